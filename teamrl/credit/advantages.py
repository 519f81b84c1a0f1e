"""Group-relative advantages: one function for every algorithm of the family.

Samples are grouped by ``sample.group`` (e.g. (problem, node, agent) for MAGRPO or
(problem, turn, agent) for AT-GRPO). Within a group of returns R_1..R_G:

    baseline 'mean' (MAGRPO):      A_g = R_g - mean(R)
    baseline 'rloo' (MA-RLOO):     A_g = R_g - mean_{j != g} R_j = G/(G-1) * (R_g - mean(R))
    baseline 'max'  (MA-ReMax):    A_g = R_g - max(R)
    baseline 'raw'  (MA-REINFORCE): A_g = R_g
    baseline 'counterfactual' (COMA, MAGRPO cross only): A_g = the sample's counterfactual
             advantage, written by the cross tree (``counterfactual_advantages``); over the full
             product it equals 'mean' (docs/algorithms/counterfactual.md)

then, with ``scale_rewards``:

    'group': A_g <- (A_g - mean(A)) / (std(A) + eps)       z-score within the group
    'batch': A_g <- (A_g - mean(A)) / (std(R_batch) + eps)  centre per group, divide by the
             std of the raw returns of every group in the batch (TRL: rewards.std())
    'agent': A_g <- (A_g - mean(A)) / (std(R of this agent's samples in the batch) + eps):
             'batch' taken per agent, so an agent whose rewards live on a larger scale does
             not dominate the others' step sizes (per-agent normalisation, as multi-agent
             GRPO users ask for; a per-agent form of TRL's scale_rewards='batch')
    'none':  A_g unchanged                                    (Dr. GRPO style)

Centring removes any per-group constant, so under 'group' or 'batch' scaling the mean, max
and raw baselines give identical advantages, and rloo (= G/(G-1) * mean's) the same under
'group' and G/(G-1) times them under 'batch' (its divisor is the raw returns' std, not
rloo's): a rescaling, like a learning-rate change. They really differ only with
scale_rewards='none'. ``advantage_warnings`` says so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import torch

from teamrl.sample import Sample

EPS = 1e-4


def group_samples(samples: Sequence[Sample]) -> dict[Hashable, list[Sample]]:
    groups: dict[Hashable, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[s.group].append(s)
    return dict(groups)


def baseline_advantages(returns: torch.Tensor, baseline: str) -> torch.Tensor:
    g = returns.numel()
    if baseline == "mean":
        return returns - returns.mean()
    if baseline == "rloo":
        return (g * returns - returns.sum()) / (g - 1)
    if baseline == "max":
        return returns - returns.max()
    if baseline == "raw":
        return returns.clone()
    raise ValueError(
        f"algorithm.baseline: expected mean|rloo|max|raw|counterfactual, got {baseline!r}"
    )


def _counterfactual(members: list[Sample], units: list[int]) -> torch.Tensor:
    """The counterfactual advantages the MAGRPO cross tree wrote into ``info``."""
    try:
        values = [members[i].info["counterfactual_advantage"] for i in units]
    except KeyError:
        raise ValueError(
            "algorithm.baseline='counterfactual' needs the MAGRPO cross tree's counterfactual "
            f"advantages; sample of group {members[0].group!r} has none"
        ) from None
    return torch.tensor(values, dtype=torch.float64)


def compute_advantages(
    samples: Sequence[Sample], baseline: str = "mean", scale_rewards: str = "group"
) -> dict[str, float]:
    """Write ``sample.advantage`` for every sample in place; return group statistics.

    Raises on an empty batch and on a group with fewer than two samples (no baseline exists).
    """
    if not samples:
        raise ValueError("compute_advantages: no samples (empty rollout)")
    groups = group_samples(samples)
    centred: dict[Hashable, torch.Tensor] = {}  # per sample
    unit_adv: dict[Hashable, torch.Tensor] = {}  # per episode (== per sample unless set)
    unit_returns: list[torch.Tensor] = []  # raw returns per episode, for the batch std
    agent_returns: dict[str, list[float]] = defaultdict(list)  # for 'agent' scaling
    zero_std = 0
    for key, members in groups.items():
        # Trajectory-level groups hold several samples per episode (``sample.episode``): the
        # baseline and the std are taken over episodes, then each sample gets its episode's.
        units = [(i,) if s.episode is None else s.episode for i, s in enumerate(members)]
        first = {}
        for i, u in enumerate(units):
            first.setdefault(u, i)
        if len(first) < 2:
            raise ValueError(
                f"group {key!r} has {len(first)} member; a group-relative baseline needs >= 2"
            )
        returns = torch.tensor([members[i].return_ for i in first.values()], dtype=torch.float64)
        zero_std += int(returns.std() < 1e-8)
        unit_returns.append(returns)
        for s in members:
            agent_returns[s.agent].append(s.return_)
        if baseline == "counterfactual":
            adv = _counterfactual(members, list(first.values()))
        else:
            adv = baseline_advantages(returns, baseline)
        adv = adv - adv.mean() if scale_rewards != "none" else adv
        unit_pos = {u: j for j, u in enumerate(first)}
        centred[key] = adv[[unit_pos[u] for u in units]]
        unit_adv[key] = adv
    if scale_rewards == "batch":
        batch_std = torch.cat(unit_returns).std()  # of raw returns, not of the centred ones
    for key, members in groups.items():
        adv = centred[key]
        if scale_rewards == "group":
            adv = adv / (unit_adv[key].std() + EPS)
        elif scale_rewards == "batch":
            adv = adv / (batch_std + EPS)
        elif scale_rewards == "agent":
            std = {a: torch.tensor(r, dtype=torch.float64).std() for a, r in agent_returns.items()}
            adv = adv / (torch.stack([std[s.agent] for s in members]) + EPS)
        elif scale_rewards != "none":
            raise ValueError(
                f"algorithm.scale_rewards: expected group|batch|agent|none, got {scale_rewards!r}"
            )
        for s, a in zip(members, adv.tolist()):
            s.advantage = a
    return {
        "groups": float(len(groups)),
        "frac_zero_std_groups": zero_std / len(groups),
    }


def advantage_warnings(baseline: str, scale_rewards: str) -> list[str]:
    if baseline not in ("mean", "counterfactual") and scale_rewards != "none":
        return [
            f"algorithm.baseline={baseline!r} with scale_rewards={scale_rewards!r}: under std "
            "normalisation the mean, rloo, max and raw baselines give the same advantages (up to a "
            "constant factor for rloo with 'batch'); "
            "set algorithm.scale_rewards=none for MA-REINFORCE/RLOO/ReMax to differ from MAGRPO."
        ]
    return []
