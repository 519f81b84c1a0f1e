"""Advantages from a learned critic (``algorithm.critic`` iac | maac), on MAGRPO's joint tree
(``critic_advantages``) or on AT-GRPO's agent-turn tree (``chain_critic_advantages``).

MAGRPO credits completion j of a node with R_j - mean(R of the node's joint actions). A critic
replaces that mean with its value of the state the agent acted from, and GAE
(``teamrl.credit.gae``) spreads the credit along the tree: for agent a and joint action j
of node n, with successor c (none when the episode ended there),

    turn level:  A^a_j = c^a_j + gamma * V_a(c) - V_a(n) + gamma * lam * mean_j' A^a(c, j')
    token level: the same over the completion's tokens (``turn_token_gae``), the reward on the
                 last token, a value per token

c^a_j is what the rollout credits (the team reward, or alpha * team + local with
``reward_per_agent``). A completion that acts in several joint actions (``cross``) gets the
mean of their advantages, as MAGRPO's cross credit takes the mean of their returns.

The critic is given as lookups, so this module runs on any values (tests pass hand-made ones):
``state_value(agent, node)`` (IAC: the agent's own value of its prompt; MAAC: the central value
of the joint observation, the same for every agent) and, at token level, ``token_values(sample)``
(one per completion token, the first being the state's). What it returns is the regression data
for the critics: the value target of every state (and token) it credited, keyed by
``state_key(agent, node)`` or ``("token", id(sample), k)``.

Read top to bottom: the joint tree (``critic_advantages``, one agent's view of it
``AgentView``, then its turn level and its token level), and the agent-turn chains
(``chain_critic_advantages``, each node bootstrapping from its agent's ``Successor``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from teamrl.credit.gae import CreditNode, tree_gae, turn_token_gae
from teamrl.envs.base import Step
from teamrl.rollout.trees import Node, TurnNode, walk
from teamrl.sample import Sample

Targets = dict[Hashable, list[float]]


def critic_advantages(
    roots: list[Node],
    agents: list[str],
    *,
    state_value: Callable[[str, Node], float],
    state_key: Callable[[str, Node], Hashable],
    credit: Callable[[Step, str], float],
    gamma: float,
    lam: float,
    level: str = "turn",
    token_values: Callable[[Sample], list[float]] | None = None,
) -> Targets:
    """Write every sample's advantage (and ``token_advantages`` at token level); return the
    critics' value targets. Tree by tree, agent by agent: each agent's GAE runs on its own
    values and its own credit over the whole tree."""
    _check_level(level, token_values, "critic_advantages")
    targets: Targets = defaultdict(list)
    for root in roots:
        for a in agents:
            view = AgentView(a, agents.index(a), state_value, state_key, credit)
            if level == "turn":
                _turn_level(root, view, gamma, lam, targets)
            else:
                _token_level(root, view, token_values, gamma, lam, targets)
    return dict(targets)


def _check_level(level: str, token_values, who: str) -> None:
    if level not in ("turn", "token"):
        raise ValueError(f"algorithm.critic_level: expected turn|token, got {level!r}")
    if level == "token" and token_values is None:
        raise ValueError(f"{who}: level='token' needs token_values")


@dataclass(frozen=True)
class AgentView:
    """One agent's view of a joint tree: the critic's value of a node, the node's key among
    the value targets, and what the agent is credited with for a joint action's step."""

    agent: str
    index: int  # the agent's place in each joint action's index tuple (``Node.joint``)
    state_value: Callable[[str, Node], float]
    state_key: Callable[[str, Node], Hashable]
    credit: Callable[[Step, str], float]

    def value(self, node: Node) -> float:
        return float(self.state_value(self.agent, node))

    def key(self, node: Node) -> Hashable:
        return self.state_key(self.agent, node)

    def reward(self, node: Node, j: int) -> float:
        """c^a_j: the agent's credit for joint action ``j`` of ``node``."""
        return self.credit(node.steps[j], self.agent)

    def members(self, node: Node, i: int) -> list[int]:
        """The joint actions of ``node`` that hold the agent's completion ``i``."""
        return [j for j, idx in enumerate(node.joint) if idx[self.index] == i]


def _turn_level(root: Node, view: AgentView, gamma: float, lam: float, targets: Targets) -> None:
    """Turn-level GAE of one agent on one tree: mirror the tree with the agent's values and
    credits (``_mirror``), run ``tree_gae`` on the mirror, then write each completion's
    advantage (the mean over its joint actions) and each state's targets (``_write_turn``)."""
    tree = _mirror(root, view)
    tree_gae(tree, gamma, lam)
    # a state already in ``targets`` was fitted for an earlier agent (MAAC's team value)
    fresh = {view.key(node) for node in walk(root)} - set(targets)
    _write_turn(root, tree, view, fresh, targets)


def _mirror(node: Node, view: AgentView) -> CreditNode:
    """The tree as ``tree_gae`` reads it: V_a(n) and c^a_j at every node, pre-order."""
    return CreditNode(
        value=view.value(node),
        rewards=[float(view.reward(node, j)) for j in range(len(node.steps))],
        children={j: _mirror(child, view) for j, child in node.children.items()},
    )


def _write_turn(
    node: Node, credit_node: CreditNode, view: AgentView, fresh: set, targets: Targets
) -> None:
    """Pre-order: the state's targets (one per joint action, a state shared by the agents
    fitted once) and the mean advantage of each of the agent's completions."""
    key = view.key(node)
    if key in fresh:
        targets[key].extend(credit_node.targets)
    for i, s in enumerate(node.samples[view.agent]):
        js = view.members(node, i)
        s.advantage = float(np.mean([credit_node.advantages[j] for j in js]))
        s.token_advantages = None
    for j, child in node.children.items():
        _write_turn(child, credit_node.children[j], view, fresh, targets)


def _token_level(
    node: Node,
    view: AgentView,
    token_values: Callable[[Sample], list[float]],
    gamma: float,
    lam: float,
    targets: Targets,
) -> float:
    """Token-level GAE of one agent, post-order over the tree; returns the mean first-token
    advantage of the agent's completions at ``node`` (what its parent's last tokens bootstrap
    from). A completion's per-token advantages are the mean over its joint actions of
    ``turn_token_gae``, each with its own successor's value and advantage."""
    below = {j: _token_level(c, view, token_values, gamma, lam, targets)
             for j, c in node.children.items()}  # fmt: skip
    firsts = []
    for i, s in enumerate(node.samples[view.agent]):
        values = _token_values(token_values, s)
        per_joint = []  # (per-token advantages, per-token targets) of each joint action
        for j in view.members(node, i):
            child = node.children.get(j)
            nxt = view.value(child) if child is not None else 0.0
            per_joint.append(
                turn_token_gae(view.reward(node, j), values, nxt, below.get(j, 0.0), gamma, lam)
            )
        _write_tokens(s, np.mean([adv for adv, _ in per_joint], axis=0))
        firsts.append(s.advantage)
        for _, tgt in per_joint:
            _add_token_targets(s, tgt, targets)
    return float(np.mean(firsts))


def _write_tokens(s: Sample, advantages) -> None:
    """The sample's per-token advantages, its advantage the first token's."""
    s.token_advantages = [float(x) for x in advantages]
    s.advantage = s.token_advantages[0]


def _add_token_targets(s: Sample, tgt: list[float], targets: Targets) -> None:
    """Token t of ``s``'s value target, keyed as the critics read it: ("token", id(s), t)."""
    for t, value in enumerate(tgt):
        targets[("token", id(s), t)].append(value)


class Successor(NamedTuple):
    """What an agent-turn node's candidates bootstrap from: the agent's next node n' on the
    chosen path, its value V_a(n') and its chosen candidate's (first-token) advantage
    A_{k*}(n'); both 0 after the agent's last node."""

    value: float
    advantage: float


def chain_critic_advantages(
    episodes: list[list[TurnNode]],
    *,
    state_value: Callable[[TurnNode], float],
    state_key: Callable[[TurnNode], Hashable],
    gamma: float,
    lam: float,
    level: str = "turn",
    token_values: Callable[[Sample], list[float]] | None = None,
) -> Targets:
    """Advantages on AT-GRPO's agent-turn tree; returns the critics' value targets.

    Each episode is a chain of (turn, agent) nodes; node n holds K candidates of its agent a,
    candidate k credited with r_k (its reward on its own successor, what AT-GRPO scores), and
    branch k* continued. Agent a's nodes n_1 .. n_m along the episode are its chain; with
    n' the agent's next node (none after its last: V' = A' = 0),

        turn level:  A_k = r_k + gamma * V_a(n') - V_a(n) + gamma * lam * A_{k*}(n')
        token level: ``turn_token_gae`` over candidate k's tokens, with the same V' and
                     A' = the chosen candidate's first-token advantage at n'

    Every candidate bootstraps from the chosen path's next node, as AT-GRPO's discounted return
    R_k = r_k + gamma * (the chosen path's return) does: only the chosen branch has a next
    node, and with lam = 1 the advantage is exactly R_k - V_a(n). AT-GRPO's default (no
    discount: a candidate is judged by its own reward) is gamma = 0, A_k = r_k - V_a(n).
    The nodes are visited backwards, so each node's successor is known when it is reached.
    """
    _check_level(level, token_values, "chain_critic_advantages")
    targets: Targets = defaultdict(list)
    for nodes in episodes:
        later: dict[str, Successor] = {}  # agent -> its next node's V and A_{k*}
        for node in reversed(nodes):
            v = float(state_value(node))
            nxt = later.get(node.agent, Successor(0.0, 0.0))
            firsts = []
            for s in node.samples:
                if level == "turn":
                    adv = float(s.reward) + gamma * nxt.value - v + gamma * lam * nxt.advantage
                    s.advantage, s.token_advantages = adv, None
                    targets[state_key(node)].append(adv + v)
                else:
                    values = _token_values(token_values, s)
                    adv_t, tgt_t = turn_token_gae(
                        s.reward, values, nxt.value, nxt.advantage, gamma, lam
                    )
                    _write_tokens(s, adv_t)
                    _add_token_targets(s, tgt_t, targets)
                firsts.append(s.advantage)
            later[node.agent] = Successor(v, firsts[node.chosen])
    return dict(targets)


def _token_values(token_values: Callable[[Sample], list[float]], s: Sample) -> list[float]:
    """The critic's value of each of ``s``'s completion tokens, one per token or an error."""
    values = [float(v) for v in token_values(s)]
    if len(values) != len(s.completion_ids):
        raise ValueError(
            f"token_values: {len(values)} values for {len(s.completion_ids)} tokens of agent "
            f"{s.agent!r}"
        )
    return values


def scale_critic_advantages(samples: list[Sample], scale_rewards: str) -> None:
    """Divide by the std of the batch's returns ('batch') or of the agent's ('agent'); 'none'
    leaves them. No centring: the critic's value is the baseline."""
    if scale_rewards == "none":
        return
    if scale_rewards not in ("batch", "agent"):
        raise ValueError(
            f"algorithm.scale_rewards: expected none|batch|agent with a critic, got "
            f"{scale_rewards!r}"
        )
    returns: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        returns["*" if scale_rewards == "batch" else s.agent].append(s.return_)
    std = {k: float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for k, v in returns.items()}
    for s in samples:
        d = std["*" if scale_rewards == "batch" else s.agent] + 1e-4  # EPS, as the groups'
        s.advantage /= d
        if s.token_advantages is not None:
            s.token_advantages = [x / d for x in s.token_advantages]
