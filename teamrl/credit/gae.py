"""Critic maths for actor-critic teams: GAE over a chain of steps, the clipped value loss, and
the explained variance that says whether a critic predicts anything.

A *chain* is one agent's experience in one episode, in order: its turns (turn-level credit) or
every token of its completions (token-level credit). Step k has reward r_k and the critic's
value V_k = V(s_k) of the state the step acts from. With gamma and lambda:

    delta_k = r_k + gamma * V_{k+1} - V_k          V_K = ``last_value`` (0 when the episode
                                                    ended, the critic's V(s_K) when it was cut)
    A_k     = sum_{l >= 0} (gamma * lambda)^l * delta_{k+l}
    G_k     = A_k + V_k                             the critic's regression target

lambda = 1 gives the Monte Carlo advantage (the discounted return minus V_k), lambda = 0 the
one-step TD error. The recursion A_k = delta_k + gamma * lambda * A_{k+1} is run backwards in
float64, so a chain of a thousand tokens loses nothing to rounding.

At token level a turn's reward sits on its last token (every other token earns 0) and the value
of token k is read from the hidden state that predicts it, so V_0 is the value of the prompt;
``token_rewards`` builds that reward chain from the turns' lengths.

A tree of turns (MAGRPO's joint tree: K branches leave a node, each to its own successor) is
the same recursion with the successor's advantage replaced by the mean over its branches,
as MAGRPO's return takes the mean of its children's returns (``tree_gae``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


def gae(
    rewards: Sequence[float] | torch.Tensor,
    values: Sequence[float] | torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    last_value: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages A_k, value targets G_k) of one chain, float64; see the module docstring."""
    r = torch.as_tensor(rewards, dtype=torch.float64)
    v = torch.as_tensor(values, dtype=torch.float64)
    if r.ndim != 1 or r.shape != v.shape:
        raise ValueError(
            f"gae: rewards and values must be 1-D of one length, got {tuple(r.shape)} and "
            f"{tuple(v.shape)}"
        )
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gae: gamma and lambda must lie in [0, 1], got {gamma} and {lam}")
    next_v = torch.cat([v[1:], torch.tensor([float(last_value)], dtype=torch.float64)])
    delta = r + gamma * next_v - v
    adv = torch.empty_like(delta)
    running = 0.0
    for k in range(len(delta) - 1, -1, -1):  # the chain is short (turns) or one agent's tokens
        running = float(delta[k]) + gamma * lam * running
        adv[k] = running
    return adv, adv + v


@dataclass
class CreditNode:
    """One state of a tree of turns: the critic's value of it, and per branch j the reward and
    (unless the episode ended there) the successor node. ``tree_gae`` fills the rest."""

    value: float
    rewards: list[float]
    children: dict[int, CreditNode] = field(default_factory=dict)  # branch -> successor
    advantages: list[float] = field(default_factory=list)  # A_j, written by tree_gae
    targets: list[float] = field(default_factory=list)  # A_j + V(node)


def tree_gae(node: CreditNode, gamma: float = 1.0, lam: float = 1.0) -> None:
    """GAE on a tree, post-order. Branch j of node n with successor c (V(c) = 0, and no
    successor advantage, where the episode ended):

        delta_j = r_j + gamma * V(c) - V(n)
        A_j     = delta_j + gamma * lambda * mean_j' A(c, j')

    With lambda = 1 this is R_j - V(n), R_j = r_j + gamma * mean_j' R(c, j') being MAGRPO's
    return; with one branch per node it is ``gae`` on the chain."""
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"tree_gae: gamma and lambda must lie in [0, 1], got {gamma} and {lam}")
    node.advantages, node.targets = [], []
    for j, r in enumerate(node.rewards):
        child = node.children.get(j)
        nxt, below = 0.0, 0.0
        if child is not None:
            tree_gae(child, gamma, lam)
            nxt = child.value
            below = sum(child.advantages) / len(child.advantages)
        adv = float(r) + gamma * nxt - node.value + gamma * lam * below
        node.advantages.append(adv)
        node.targets.append(adv + node.value)


def turn_token_gae(
    reward: float,
    values: Sequence[float],
    next_value: float = 0.0,
    next_advantage: float = 0.0,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[list[float], list[float]]:
    """(per-token advantages, per-token value targets) of one turn's completion, L tokens with
    values V_0..V_{L-1} (V_0 = the state's), the turn's reward on its last token. ``gamma``
    discounts between turns only (a turn is one step of the episode, as MAGRPO counts it), so
    inside a turn the recursion is undiscounted and lambda decays it per token:

        k <  L-1:  A_k = V_{k+1} - V_k + lambda * A_{k+1}
        k == L-1:  A_k = r + gamma * V' - V_k + gamma * lambda * A'

    V' and A' are the next state's value and its (mean) first-token advantage, 0 after the
    last turn. With one token this is ``tree_gae``'s branch; with lambda = 1, A_0 = r + gamma
    * (V' + A') - V_0, the turn-level advantage."""
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"turn_token_gae: gamma and lambda must lie in [0, 1], got {gamma}, {lam}")
    if not values:
        raise ValueError("turn_token_gae: a turn needs >= 1 token")
    n = len(values)
    adv = [0.0] * n
    for k in range(n - 1, -1, -1):
        if k == n - 1:
            adv[k] = float(reward) + gamma * next_value - values[k] + gamma * lam * next_advantage
        else:
            adv[k] = values[k + 1] - values[k] + lam * adv[k + 1]
    return adv, [a + v for a, v in zip(adv, values)]


def token_rewards(turn_lengths: Sequence[int], turn_rewards: Sequence[float]) -> list[float]:
    """The token-level reward chain: each turn's reward on its last token, 0 elsewhere."""
    if len(turn_lengths) != len(turn_rewards):
        raise ValueError(
            f"token_rewards: {len(turn_lengths)} turn lengths for {len(turn_rewards)} rewards"
        )
    if any(n < 1 for n in turn_lengths):
        raise ValueError(f"token_rewards: every turn needs >= 1 token, got {list(turn_lengths)}")
    out: list[float] = []
    for n, r in zip(turn_lengths, turn_rewards):
        out += [0.0] * (n - 1) + [float(r)]
    return out


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None = None,
) -> torch.Tensor:
    """Half the mean squared error of the critic over the masked steps; with ``clip`` (PPO's
    value clipping) each step takes the larger of the plain error and the error of the value
    held within ``clip`` of the value the targets were computed with:

        l_k = 0.5 * max((V_k - G_k)^2, (V_old_k + clamp(V_k - V_old_k, -c, c) - G_k)^2)

    Masked steps (pads) are replaced by 0 before any arithmetic, so a NaN there never reaches
    the loss or its gradient."""
    if clip is not None and clip <= 0:
        raise ValueError(f"value_loss: clip must be > 0 or None, got {clip}")
    m = mask > 0
    zero = torch.zeros_like(values)
    v = torch.where(m, values, zero)
    old = torch.where(m, old_values, zero)
    g = torch.where(m, targets, zero)
    err = (v - g) ** 2
    if clip is not None:
        clipped = old + torch.clamp(v - old, -clip, clip)
        err = torch.maximum(err, (clipped - g) ** 2)
    n = m.sum().clamp_min(1)
    return 0.5 * (err * m).sum() / n


def explained_variance(values: Sequence[float], targets: Sequence[float]) -> float:
    """1 - Var(G - V) / Var(G): 1 for a perfect critic, 0 for one that predicts the mean, < 0
    for one worse than that; NaN when the targets do not vary."""
    v = torch.as_tensor(values, dtype=torch.float64)
    g = torch.as_tensor(targets, dtype=torch.float64)
    var = g.var(unbiased=False)
    if g.numel() < 2 or float(var) == 0.0:
        return float("nan")
    return float(1.0 - (g - v).var(unbiased=False) / var)
