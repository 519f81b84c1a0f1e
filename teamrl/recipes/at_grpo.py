"""AT-GRPO: an agent-turn tree per problem, sequential turns, K branches per (turn, agent)
node, groups (problem, turn, agent). Evaluated on independent episodes (no branch selection,
which would read the reward)."""

from __future__ import annotations

from teamrl.recipes.base import Recipe, common_args
from teamrl.recipes.trajectory_grpo import eval_rollout
from teamrl.rollout.at_tree import agent_turn_rollout

DEFAULTS = {"discount": None}  # None: a candidate's return is its own reward


def rollout(team, make_env, examples, cfg, *, step: int, greedy=False, single_path=False):
    a = cfg.algorithm
    return agent_turn_rollout(
        team,
        make_env,
        examples,
        num_generations=1 if single_path else a.num_generations,
        greedy=greedy,
        selection=a.selection,
        selection_temperature=a.selection_temperature,
        alpha=a.alpha,
        discount=a.discount,
        seed=cfg.seed * 100_003 + step,
        **common_args(cfg),
    )


AT_GRPO = Recipe(
    name="at_grpo",
    group_key=("problem", "slot", "turn", "agent"),
    rollout=rollout,
    eval_rollout=eval_rollout,
    defaults=DEFAULTS,
)
