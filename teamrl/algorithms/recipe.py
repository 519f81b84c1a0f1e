"""What a recipe is: two rollout calls (training, and independent single-path evaluation
episodes) plus the group key its samples carry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from teamrl.config.step_shape import StepShape
from teamrl.rollout.common import RolloutResult

Examples = list[tuple[int, dict]]


@dataclass(frozen=True)
class Recipe:
    name: str  # algorithm.name
    group_key: tuple[str, ...]  # the fields of Sample.group, in order
    # rollout(team, make_env, examples, cfg, *, step, greedy, single_path) -> RolloutResult.
    # single_path: one sample per node and no reward-based choice (training-time eval).
    rollout: Callable[..., RolloutResult]
    # eval_rollout(team, make_env, examples, cfg, *, n, greedy) -> RolloutResult: n independent
    # single-path episodes per example (one when greedy), never reading the reward to choose.
    eval_rollout: Callable[..., RolloutResult]
    defaults: dict[str, Any]  # what the recipe uses for config values left at None
    # shape(cfg) -> StepShape: env steps, generation rows and samples of one step (what the
    # config rules and the preflight ask; teamrl.config.step_shape)
    shape: Callable[[Any], StepShape]


def common_args(cfg: Any, num_generations: int, greedy: bool) -> dict[str, Any]:
    """The rollout arguments every recipe passes: samples per node, greedy or not, and what
    comes straight from the env and team sections."""
    return dict(
        num_generations=num_generations,
        greedy=greedy,
        max_turns=cfg.env.max_turns,
        reward_workers=cfg.env.reward_workers,
        ignore_eos=cfg.team.ignore_eos,
        step_timeout=getattr(cfg.env, "step_timeout", 0.0),  # duck-typed cfgs may lack it
    )
