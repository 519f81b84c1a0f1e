"""AT-GRPO: an agent-turn tree per problem, sequential turns, K branches per (turn, agent)
node, groups (problem, turn, agent). Evaluated on independent episodes (no branch selection,
which would read the reward)."""

from __future__ import annotations

from teamrl.algorithms.at_grpo_tree import agent_turn_rollout
from teamrl.algorithms.grpo import eval_rollout
from teamrl.algorithms.recipe import Recipe, common_args
from teamrl.config.step_shape import agent_turn_shape

DEFAULTS = {"discount": None}  # None: a candidate's return is its own reward


def rollout(team, make_env, examples, cfg, *, step: int, greedy=False, single_path=False):
    a = cfg.algorithm
    k = 1 if single_path else a.num_generations
    result = agent_turn_rollout(
        team, make_env, examples, **common_args(cfg, k, greedy), seed=cfg.seed * 100_003 + step,
        selection=a.selection, selection_temperature=a.selection_temperature,
        alpha=a.alpha, discount=a.discount,
    )  # fmt: skip
    regroup(result.samples, a.group_by)
    return result


def regroup(samples, group_by) -> None:
    """The grouping ablation: keep (problem, slot) and only the named keys of turn and agent.

    (problem, slot, turn, agent) -> e.g. (problem, slot, agent) for ``group_by=['agent']``, so
    one group pools the K branches of every node of that agent. ``None`` keeps all four.
    """
    if group_by is None:
        return
    keep = [i for name, i in (("turn", 2), ("agent", 3)) if name in group_by]
    for s in samples:
        s.group = s.group[:2] + tuple(s.group[i] for i in keep)


AT_GRPO = Recipe(
    "at_grpo",
    ("problem", "slot", "turn", "agent"),
    rollout,
    eval_rollout,
    DEFAULTS,
    agent_turn_shape,
)
