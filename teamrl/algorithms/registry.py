"""The algorithms by ``algorithm.name``: one module each (``magrpo``, ``at_grpo``, ``grpo``,
``app``), holding its rollout tree, its returns, its group key and its defaults, read top to
bottom.

A recipe (``teamrl.algorithms.recipe``) is what the trainer and the evaluator call: the
training rollout, the evaluation episodes, the group key and the step's shape, so the mapping
from config to rollout is written once. A new algorithm that is a new rollout shape or group
key is a new module here and one entry below; what credit it gets is ``teamrl.credit``'s, and
how a policy learns from it is ``teamrl.update``'s.
"""

from __future__ import annotations

from teamrl.algorithms.app import APP
from teamrl.algorithms.at_grpo import AT_GRPO
from teamrl.algorithms.grpo import TRAJECTORY_GRPO
from teamrl.algorithms.magrpo import MAGRPO
from teamrl.algorithms.recipe import Recipe
from teamrl.config import ConfigError

RECIPES: dict[str, Recipe] = {r.name: r for r in (MAGRPO, AT_GRPO, TRAJECTORY_GRPO, APP)}


def recipe_for(name: str) -> Recipe:
    """The recipe of ``algorithm.name``."""
    if name not in RECIPES:
        raise ConfigError(f"algorithm.name: expected one of {sorted(RECIPES)}, got {name!r}")
    return RECIPES[name]


__all__ = ["RECIPES", "Recipe", "recipe_for"]
