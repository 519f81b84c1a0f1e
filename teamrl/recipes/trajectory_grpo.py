"""Trajectory GRPO (``algorithm.name=grpo``): K independent episodes per problem, every
sample credited with its episode's return, groups (problem); the baseline is taken over
episodes (``Sample.episode``)."""

from __future__ import annotations

from teamrl.recipes.base import Recipe, common_args
from teamrl.rollout.at_tree import trajectory_rollout

DEFAULTS: dict = {}  # discount is unused: a sample carries its episode's undiscounted return


def rollout(team, make_env, examples, cfg, *, step: int, greedy=False, single_path=False):
    a = cfg.algorithm
    return trajectory_rollout(
        team,
        make_env,
        examples,
        num_generations=1 if single_path else a.num_generations,
        greedy=greedy,
        alpha=a.alpha,
        seed=cfg.seed * 100_003 + step,
        **common_args(cfg),
    )


def eval_rollout(team, make_env, examples, cfg, *, n: int, greedy: bool):
    return trajectory_rollout(
        team,
        make_env,
        examples,
        num_generations=n,
        greedy=greedy,
        alpha=cfg.algorithm.alpha,
        seed=cfg.seed,
        **common_args(cfg),
    )


TRAJECTORY_GRPO = Recipe(
    name="grpo",
    group_key=("problem", "slot"),
    rollout=rollout,
    eval_rollout=eval_rollout,
    defaults=DEFAULTS,
)
