"""MAGRPO: a joint-action tree per problem, simultaneous turns, groups (problem, node, agent)."""

from __future__ import annotations

from teamrl.algorithms.magrpo_tree import joint_rollout
from teamrl.algorithms.recipe import Recipe, common_args
from teamrl.config.step_shape import joint_tree_shape

DEFAULTS = {"discount": 1.0}  # CoMLRL 1.4.3 is undiscounted


def rollout(team, make_env, examples, cfg, *, step: int, greedy=False, single_path=False):
    a = cfg.algorithm
    k = 1 if single_path else a.num_generations
    return joint_rollout(
        team, make_env, examples, **common_args(cfg, k, greedy), joint_mode=a.joint_mode,
        discount=DEFAULTS["discount"] if a.discount is None else a.discount,
        early_termination_threshold=None if single_path else a.early_termination_threshold,
        alpha=a.alpha, reward_per_agent=a.reward_per_agent,
        counterfactual=a.baseline == "counterfactual",
    )  # fmt: skip


def eval_rollout(team, make_env, examples, cfg, *, n: int, greedy: bool):
    # one joint action per turn is a single path: run each example n times
    repeated = [ex for ex in examples for _ in range(1 if greedy else n)]
    return joint_rollout(team, make_env, repeated, **common_args(cfg, 1, greedy))


MAGRPO = Recipe(
    "magrpo",
    ("problem", "slot", "node", "agent"),
    rollout,
    eval_rollout,
    DEFAULTS,
    joint_tree_shape,
)
