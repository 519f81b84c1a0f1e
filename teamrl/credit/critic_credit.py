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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable

import numpy as np

from teamrl.algorithms.at_grpo import TurnNode
from teamrl.algorithms.magrpo import Node, walk
from teamrl.credit.gae import CreditNode, tree_gae, turn_token_gae
from teamrl.envs.base import Step
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
    critics' value targets."""
    targets: Targets = defaultdict(list)
    for root in roots:
        for a in agents:
            k = agents.index(a)  # the agent's place in each joint action's index tuple
            if level == "turn":
                _turn_level(root, a, k, state_value, state_key, credit, gamma, lam, targets)
            elif level == "token":
                if token_values is None:
                    raise ValueError("critic_advantages: level='token' needs token_values")
                _token_level(root, a, k, state_value, token_values, credit, gamma, lam, targets)
            else:
                raise ValueError(f"algorithm.critic_level: expected turn|token, got {level!r}")
    return dict(targets)


def _members(node: Node, agents_index: int, i: int) -> list[int]:
    """The joint actions of ``node`` that hold completion ``i`` of the agent at
    ``agents_index``."""
    return [j for j, idx in enumerate(node.joint) if idx[agents_index] == i]


def _turn_level(root, a, k, state_value, state_key, credit, gamma, lam, targets) -> None:
    def mirror(node: Node) -> CreditNode:
        return CreditNode(
            value=float(state_value(a, node)),
            rewards=[float(credit(step, a)) for step in node.steps],
            children={j: mirror(child) for j, child in node.children.items()},
        )

    tree = mirror(root)
    tree_gae(tree, gamma, lam)

    fresh = {state_key(a, node) for node in walk(root)} - set(targets)

    def write(node: Node, credit_node: CreditNode) -> None:
        key = state_key(a, node)
        if key in fresh:  # one target per joint action; a state shared by the agents (MAAC's
            targets[key].extend(credit_node.targets)  # team value) is fitted once

        for i, s in enumerate(node.samples[a]):
            js = _members(node, k, i)
            s.advantage = float(np.mean([credit_node.advantages[j] for j in js]))
            s.token_advantages = None
        for j, child in node.children.items():
            write(child, credit_node.children[j])

    write(root, tree)


def _token_level(root, a, k, state_value, token_values, credit, gamma, lam, targets) -> float:
    """Post-order over the tree; returns the mean first-token advantage of ``a`` at ``root``
    (what its parent's last tokens bootstrap from)."""
    below = {j: _token_level(c, a, k, state_value, token_values, credit, gamma, lam, targets)
             for j, c in root.children.items()}  # fmt: skip
    firsts = []
    for i, s in enumerate(root.samples[a]):
        values = _token_values(token_values, s)
        per_joint = []
        for j in _members(root, k, i):
            child = root.children.get(j)
            nxt = float(state_value(a, child)) if child is not None else 0.0
            per_joint.append(
                turn_token_gae(credit(root.steps[j], a), values, nxt, below.get(j, 0.0), gamma, lam)
            )
        adv = np.mean([p[0] for p in per_joint], axis=0)
        s.token_advantages = [float(x) for x in adv]
        s.advantage = s.token_advantages[0]
        firsts.append(s.advantage)
        for _, tgt in per_joint:
            for t, value in enumerate(tgt):
                targets[("token", id(s), t)].append(value)
    return float(np.mean(firsts))


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
    """
    if level not in ("turn", "token"):
        raise ValueError(f"algorithm.critic_level: expected turn|token, got {level!r}")
    if level == "token" and token_values is None:
        raise ValueError("chain_critic_advantages: level='token' needs token_values")
    targets: Targets = defaultdict(list)
    for nodes in episodes:
        later: dict[str, tuple[float, float]] = {}  # agent -> (V(n'), A_{k*}(n'))
        for node in reversed(nodes):
            v = float(state_value(node))
            nxt, below = later.get(node.agent, (0.0, 0.0))
            firsts = []
            for s in node.samples:
                if level == "turn":
                    adv = float(s.reward) + gamma * nxt - v + gamma * lam * below
                    s.advantage, s.token_advantages = adv, None
                    targets[state_key(node)].append(adv + v)
                else:
                    values = _token_values(token_values, s)
                    adv_t, tgt_t = turn_token_gae(s.reward, values, nxt, below, gamma, lam)
                    s.token_advantages = [float(x) for x in adv_t]
                    s.advantage = s.token_advantages[0]
                    for t, value in enumerate(tgt_t):
                        targets[("token", id(s), t)].append(value)
                firsts.append(s.advantage)
            later[node.agent] = (v, firsts[node.chosen])
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
