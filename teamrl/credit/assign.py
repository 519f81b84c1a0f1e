"""The credit seam: from a step's rollout to the samples that train and their advantages.

The trainer holds one ``Credit`` and calls it twice a step, never asking which kind it is:

    assigned = credit.assign(result, resample)   # advantages written into the samples; the
                                                 # samples that train (flat groups dropped, and
                                                 # refilled by resampling under DAPO)
    ... every policy updates on assigned.samples ...
    credit.fit(step)                             # a learned estimator regresses, after the update

and, for checkpoints and export, ``credit.state()`` / ``credit.load(folder)``.

Two estimators sit behind it:

- ``GroupCredit``: the group baselines of MAGRPO and AT-GRPO (``teamrl.credit.advantages``:
  a sample's return against its group's mean, rloo, max, raw or counterfactual baseline, scaled
  by ``scale_rewards``), with DAPO's filtering of flat groups (``teamrl.credit.filtering``).
- ``CriticCredit`` (``algorithm.critic`` iac | maac): the group advantages first (they keep the
  group metrics comparable across runs), then the critics' GAE on the step's trees replaces every
  sample's advantage (``teamrl.credit.critics``); after the policies update, the value heads
  regress on the features taken before it.

A new estimator is a new class here with these four methods, chosen in ``make_credit``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from teamrl.config import Config, ConfigError
from teamrl.credit.advantages import advantage_warnings, compute_advantages
from teamrl.credit.critics import (
    CriticBatch,
    build_critics,
    critic_credit,
    critic_gamma,
    critic_state,
    fit_critics,
    load_critic_state,
)
from teamrl.credit.filtering import drop_flat_groups, flat_groups_filled
from teamrl.rollout.common import RolloutResult
from teamrl.sample import Sample
from teamrl.team.policies import Team

CRITICS_FILE = "critics.pt"  # a checkpoint's learned credit


@dataclass
class Assigned:
    """The samples that train this step (their ``advantage`` set) and what credit logged."""

    samples: list[Sample]
    metrics: dict[str, float] = field(default_factory=dict)


class Credit(Protocol):
    def assign(self, result: RolloutResult, resample: Callable[[], RolloutResult]) -> Assigned:
        """Write every sample's advantage; return the samples that train. ``resample`` draws
        a fresh rollout of the step's size (DAPO's refill of filtered groups)."""

    def fit(self, step: int) -> dict[str, float]:
        """After the policies' update: train whatever the estimator learns (no-op for groups)."""

    def state(self) -> dict | None:
        """What a checkpoint and an export keep of it (None: nothing to keep)."""

    def load(self, folder: Path) -> None:
        """Restore ``state()`` from a checkpoint folder."""


class GroupCredit:
    """Group baselines (MAGRPO's joint-tree nodes, AT-GRPO's agent-turn nodes, GRPO's
    problems) and DAPO's flat-group filter with its optional refill."""

    def __init__(self, cfg: Config):
        self.cfg = cfg  # read at each step: the algorithm section as it is then
        for w in advantage_warnings(cfg.algorithm.baseline, cfg.algorithm.scale_rewards):
            warnings.warn(w, stacklevel=3)

    def assign(self, result: RolloutResult, resample: Callable[[], RolloutResult]) -> Assigned:
        a = self.cfg.algorithm
        metrics = compute_advantages(result.samples, a.baseline, a.scale_rewards)
        return self._filtered(result, resample, metrics)

    def _filtered(
        self, result: RolloutResult, resample: Callable[[], RolloutResult], metrics: dict
    ) -> Assigned:
        a, samples = self.cfg.algorithm, result.samples
        if not a.filter_groups:
            return Assigned(samples, {**metrics, **advantage_stats(samples)})
        kept = drop_flat_groups(samples)
        metrics["filtered_samples_fraction"] = 1 - len(kept) / len(samples)
        if a.max_resample_rounds:  # DAPO dynamic sampling: refill the batch

            def more() -> list[Sample]:
                extra = resample().samples
                compute_advantages(extra, a.baseline, a.scale_rewards)
                return extra

            kept, rounds = flat_groups_filled(samples, kept, more, a.max_resample_rounds)
            metrics["filter/resample_rounds"] = float(rounds)
        return Assigned(kept, {**metrics, **advantage_stats(kept)})

    def fit(self, step: int) -> dict[str, float]:
        return {}

    def state(self) -> dict | None:
        return None

    def load(self, folder: Path) -> None:
        return None


class CriticCredit(GroupCredit):
    """IAC / MAAC value heads: GAE on the step's trees replaces the group advantage; the heads
    fit after the update on features from before it."""

    def __init__(self, cfg: Config, team: Team, gamma: float):
        super().__init__(cfg)
        self.team = team
        self.gamma = gamma  # the GAE discount (critic_gamma)
        self.critics = build_critics(team, cfg)
        self._batch: CriticBatch | None = None

    def assign(self, result: RolloutResult, resample: Callable[[], RolloutResult]) -> Assigned:
        a = self.cfg.algorithm
        metrics = compute_advantages(result.samples, a.baseline, a.scale_rewards)
        self._batch, critic_metrics = critic_credit(
            self.team, self.critics, result, self.cfg, self.gamma
        )
        metrics.update(critic_metrics)
        return self._filtered(result, resample, metrics)

    def fit(self, step: int) -> dict[str, float]:
        if self._batch is None:
            return {}
        batch, self._batch = self._batch, None
        return fit_critics(self.critics, batch, self.cfg, step)

    def state(self) -> dict | None:
        return critic_state(self.critics)

    def load(self, folder: Path) -> None:
        saved = Path(folder) / CRITICS_FILE
        if not saved.exists():
            raise ConfigError(
                f"checkpoint {folder} has no {CRITICS_FILE}; this run trains critics "
                f"(algorithm.critic={self.cfg.algorithm.critic!r}): resume with the "
                "checkpoint's algorithm.critic"
            )
        load_critic_state(self.critics, torch.load(saved, weights_only=True), str(saved))


def advantage_stats(samples: list[Sample]) -> dict[str, float]:
    """Per agent, over the samples that train: the advantages' mean, standard deviation and
    mean absolute value (``advantage/<stat>/<agent>``). The mean sits near 0 under group
    centring; the mean absolute value is how hard the update pushes that agent (0: nothing
    to learn from this step)."""
    by_agent: dict[str, list[float]] = {}
    for s in samples:
        by_agent.setdefault(s.agent, []).append(s.advantage)
    out: dict[str, float] = {}
    for agent, values in sorted(by_agent.items()):
        v = torch.tensor(values, dtype=torch.float64)
        out[f"advantage/mean/{agent}"] = float(v.mean())
        out[f"advantage/std/{agent}"] = float(v.std(unbiased=False))
        out[f"advantage/abs_mean/{agent}"] = float(v.abs().mean())
    return out


def make_credit(cfg: Config, team: Team, default_discount: float | None) -> Credit:
    """The run's credit estimator: learned critics when ``algorithm.critic`` names one, else
    the group baselines. ``default_discount``: the algorithm's discount when
    ``algorithm.discount`` is None (its recipe's ``defaults``), what the critics' GAE uses."""
    if cfg.algorithm.critic != "none":
        return CriticCredit(cfg, team, critic_gamma(cfg, default_discount))
    return GroupCredit(cfg)
