"""Trajectory GRPO (``algorithm.name=grpo``): K independent episodes per problem, every
sample credited with its episode's return, groups (problem); the baseline is taken over
episodes (``Sample.episode``)."""

from __future__ import annotations

from teamrl.algorithms.at_grpo import eval_rollout, trajectory_rollout
from teamrl.algorithms.recipe import Recipe, common_args
from teamrl.config.step_shape import agent_turn_shape

DEFAULTS: dict = {}  # discount is unused: a sample carries its episode's undiscounted return


def rollout(team, make_env, examples, cfg, *, step: int, greedy=False, single_path=False):
    k = 1 if single_path else cfg.algorithm.num_generations
    seed = cfg.seed * 100_003 + step
    return trajectory_rollout(
        team, make_env, examples, **common_args(cfg, k, greedy), alpha=cfg.algorithm.alpha, seed=seed
    )  # fmt: skip


TRAJECTORY_GRPO = Recipe(
    "grpo", ("problem", "slot"), rollout, eval_rollout, DEFAULTS, agent_turn_shape
)
