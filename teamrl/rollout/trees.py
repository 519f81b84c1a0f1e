"""The trees a rollout leaves behind (``RolloutResult.roots`` and ``turn_nodes``): MAGRPO's
joint-action tree (``Node``, ``walk``) and AT-GRPO's agent-turn nodes (``TurnNode``), with what
an agent is credited with for a step (``agent_credit``).

They live here, below both, because two floors read them: the algorithms grow them and compute
returns on them (``teamrl.algorithms.magrpo``, ``teamrl.algorithms.at_grpo``), and the critics
run GAE on them (``teamrl.credit.critics``, ``teamrl.credit.critic_credit``). Neither needs the
other for that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from teamrl.envs.base import Env, Step
from teamrl.sample import Sample


@dataclass
class Node:
    """One node of MAGRPO's joint-action tree: a state, every agent's G completions from it,
    its joint actions and their steps, and a child per joint action whose episode went on."""

    problem: int  # dataset index of the example
    slot: int  # position of the example in this step's batch (an example may appear twice)
    node_id: str  # path of joint-action indices from the root, e.g. "0/3"
    turn: int
    env: Env
    observations: dict[str, str]
    example: dict
    joint: list[tuple[int, ...]] = field(default_factory=list)  # per joint action: index per agent
    steps: list[Step] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    children: dict[int, Node] = field(default_factory=dict)
    returns: list[float] = field(default_factory=list)  # team return per joint action
    agent_returns: dict[str, list[float]] = field(default_factory=dict)  # what each agent learns
    samples: dict[str, list[Sample]] = field(default_factory=dict)


def walk(node: Node) -> Iterator[Node]:
    """Every node of a tree, the root first."""
    yield node
    for child in node.children.values():
        yield from walk(child)


@dataclass
class TurnNode:
    """One (turn, agent) node of an agent-turn tree: what the critics need of it."""

    slot: int  # the episode's place in the step's batch
    turn: int
    agent: str  # the agent that acted
    samples: list[Sample]  # its K candidates, one per branch
    chosen: int  # the branch that continued
    observations: dict[str, str]  # every agent's observation before it acted (MAAC reads them)


def agent_credit(reward_per_agent: bool, alpha: float) -> Callable[[Step, str], float]:
    """What an agent is credited with for a joint action's step: the team reward, or with
    ``reward_per_agent`` alpha * team + its local term."""
    return _per_agent_credit(alpha) if reward_per_agent else _team_credit


def _team_credit(step: Step, agent: str) -> float:
    return float(step.reward)


def _per_agent_credit(alpha: float) -> Callable[[Step, str], float]:
    def credit(step: Step, agent: str) -> float:
        return alpha * float(step.reward) + float(step.local_rewards.get(agent, 0.0))

    return credit
