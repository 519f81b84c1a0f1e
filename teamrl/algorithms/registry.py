"""Algorithm recipes: for each ``algorithm.name``, the rollout shape, its group key and its
defaults. The trainer and the evaluator both go through the recipe, so the mapping from config
to rollout call is written once.

A recipe sits above the episode builders (``teamrl.rollout``) and next to the trainer; the
maths it feeds (advantages, losses, the update) lives in ``teamrl.algorithms`` and knows no
env. A new algorithm that is a new rollout shape or group key is a new module here.
"""

from __future__ import annotations

from teamrl.algorithms.at_grpo import AT_GRPO
from teamrl.algorithms.grpo import TRAJECTORY_GRPO
from teamrl.algorithms.magrpo import MAGRPO
from teamrl.algorithms.recipe import Recipe
from teamrl.config import ConfigError

RECIPES: dict[str, Recipe] = {r.name: r for r in (MAGRPO, AT_GRPO, TRAJECTORY_GRPO)}


def recipe_for(name: str) -> Recipe:
    """The recipe of ``algorithm.name``."""
    if name not in RECIPES:
        raise ConfigError(f"algorithm.name: expected one of {sorted(RECIPES)}, got {name!r}")
    return RECIPES[name]


__all__ = ["RECIPES", "Recipe", "recipe_for"]
