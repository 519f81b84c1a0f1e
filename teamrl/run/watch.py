"""Warnings for a run that trains but cannot learn: one line each, naming the setting to change.

``LearningWatch`` reads each training step's metrics (the dict ``Trainer.train_step`` returns)
and warns, once per run and condition, when one of these held for ``log.warn_after_steps``
consecutive steps:

- every group was flat (``frac_zero_std_groups`` = 1): each group's samples got the same
  reward, so every advantage is 0 and no update moves the weights (a constant reward, too few
  or too similar samples per group, or a task already solved: every sample at the best reward);
- every completion of an agent was truncated (``truncated_fraction/<agent>`` = 1): its
  answers never finish, so the reward never sees one;
- a policy that had samples got a gradient norm of 0 (``grad_norm/<policy>`` = 0): its weights
  do not change. Steps where every group was flat do not count here: the first warning
  already says why;
- a policy's mean importance weight fell below ``IS_FLOOR`` (``is_weight/<policy>``): its
  policy gradient is scaled down that much. Said at the first such step, not the k-th: the
  weight measures the scaling itself, not a trend;
- an agent of an app (``algorithm.name=app``) had no call to train on while some episodes
  called no agent of theirs (``app/silent_agents`` > 0 and no ``completion_length/<agent>``):
  the app never calls it (a ``model`` name it does not use), or never in two episodes of an
  example, so it learns nothing and only a count shows it.

A step where a condition does not hold (or its metric is missing) starts its count again. The
warnings go through Python's ``warnings`` (``NotLearningWarning``: the command line prints
them, tests catch them) and into the step's row of metrics.jsonl, under ``warnings``. On a
resume the watch replays the logged rows first, silently, so a resumed run warns exactly as the
uninterrupted one would have, and its rows match.
"""

from __future__ import annotations

import warnings
from typing import Any

from teamrl.config import Config
from teamrl.run.files import read_jsonl
from teamrl.run.logging import RunLogger

FLAT = "frac_zero_std_groups"
TRUNCATED = "truncated_fraction/"
GRAD_NORM = "grad_norm/"
IS_WEIGHT = "is_weight/"
SILENT = "app/silent_agents"  # an app's (episode, agent) pairs with no call
# The mean importance weight pi_old / q below which the correction is shrinking the gradient
# rather than correcting it. Under top-p alone a token's weight is the nucleus mass m_t, which
# is at least top_p; the token_* and geometric_* weights stay near it (above 0.1 for any top_p
# >= 0.1), and an exact-sampler run sits at 1. The sequence_* weight is prod_t m_t, geometric
# in the length (0.9^48 = 0.0064): below 0.1 it has cut the step size more than tenfold, which
# no learning-rate choice accounts for.
IS_FLOOR = 0.1


class NotLearningWarning(UserWarning):
    """A run that trains but cannot learn (``teamrl.run.watch``)."""


class LearningWatch:
    """Counts, per condition, the consecutive steps it held; says each once, at the k-th."""

    def __init__(self, cfg: Config, logger: RunLogger | None = None) -> None:
        self.cfg = cfg
        self.k = cfg.log.warn_after_steps
        self.active = logger is None or logger.active  # the main rank warns, the others not
        self.streaks: dict[str, int] = {}  # condition -> consecutive steps it held
        self.warned: set[str] = set()
        if logger is not None and logger.active and logger.metrics_path.exists():
            for row in read_jsonl(logger.metrics_path):  # a resume: the steps before it
                if row.get("step", 0) >= 1:
                    self.observe(row)

    def observe(self, metrics: dict[str, Any]) -> list[str]:
        """The warnings this step completes (each condition's k-th consecutive step, once)."""
        if self.k <= 0:
            return []
        holding = self._holding(metrics)
        self.streaks = {key: self.streaks.get(key, 0) + 1 for key in holding}
        found = []
        for key, streak in self.streaks.items():
            needed = 1 if key.startswith(IS_WEIGHT) else self.k
            if streak >= needed and key not in self.warned:
                self.warned.add(key)
                found.append(self._message(key, metrics))
        return found

    def check(self, metrics: dict[str, Any]) -> None:
        """``note``, then ``warn``."""
        self.warn(self.note(metrics))

    def note(self, metrics: dict[str, Any]) -> list[str]:
        """``observe``, each new one noted in the row (``warnings``); what to ``warn`` (the
        trainer writes the row between the two, so a warning raised as an error, ``-W error``,
        finds the row written)."""
        found = self.observe(metrics)
        if not (found and self.active):
            return []
        metrics["warnings"] = found
        return found

    def warn(self, found: list[str]) -> None:
        """Each of ``found`` as a ``NotLearningWarning``."""
        for text in found:
            warnings.warn(text, NotLearningWarning, stacklevel=2)

    # --- the conditions -------------------------------------------------------------------

    def _holding(self, metrics: dict[str, Any]) -> list[str]:
        """The conditions that hold at this step, as keys: the metric that shows each."""
        flat = _number(metrics.get(FLAT)) == 1.0
        out = [FLAT] if flat else []
        for key, value in metrics.items():
            if key.startswith(TRUNCATED) and _number(value) == 1.0:
                out.append(key)
            elif key.startswith(GRAD_NORM) and not flat and _number(value) == 0.0:
                out.append(key)
            elif key.startswith(IS_WEIGHT) and (_number(value) or IS_FLOOR) < IS_FLOOR:
                out.append(key)  # None (a NaN, missing) is no weight to judge
        if (_number(metrics.get(SILENT)) or 0.0) > 0:  # an app's agent no call trained
            for agent in self.cfg.team.agents:
                if f"completion_length/{agent.name}" not in metrics:
                    out.append(f"{SILENT}/{agent.name}")
        return out

    def _message(self, key: str, metrics: dict[str, Any]) -> str:
        k, agents = self.k, self.cfg.team.agents
        steps = f"for {k} consecutive step{'s' if k > 1 else ''}"
        if key == FLAT:
            mean = _number(metrics.get("reward/mean"))
            shown = "" if mean is None else f", reward/mean={mean:.4g}"
            return (
                f"every group's rewards were identical {steps} ({FLAT}=1.0{shown}): every "
                "advantage is 0, so nothing is learned; unless that is the best reward (the "
                "task is solved), check that the reward varies with the completions, or "
                "raise algorithm.num_generations "
                f"(now {self.cfg.algorithm.num_generations}) or the agents' temperature "
                "(team.agents.<i>.temperature)"
            )
        if key.startswith(TRUNCATED):
            name = key[len(TRUNCATED) :]
            index = next((i for i, a in enumerate(agents) if a.name == name), None)
            if index is None:  # not an agent of the config: the metric alone
                return (
                    f"every completion of agent {name!r} was truncated {steps} ({key}=1.0): "
                    "raise its max_completion_length or set its stop strings"
                )
            field = f"team.agents.{index}"
            return (
                f"every completion of agent {name!r} was cut at max_completion_length="
                f"{agents[index].max_completion_length} {steps} ({key}=1.0): its answers never "
                f"finish; raise {field}.max_completion_length or set {field}.stop (strings "
                "that end an answer)"
            )
        if key.startswith(IS_WEIGHT):
            return self._is_message(key[len(IS_WEIGHT) :], _number(metrics.get(key)) or 0.0)
        if key.startswith(SILENT + "/"):
            name = key[len(SILENT) + 1 :]
            return (
                f"agent {name!r} of the app had no call to train on {steps} (no "
                f"completion_length/{name}, {SILENT}={_number(metrics.get(SILENT)):g}): the "
                f"app never called model={name!r}, or never in two episodes of an example (a "
                "group needs two), so it learns nothing; check the model names the app passes "
                f"(the agents: {', '.join(a.name for a in agents)}), or raise "
                f"algorithm.num_generations (now {self.cfg.algorithm.num_generations})"
            )
        name = key[len(GRAD_NORM) :]
        return (
            f"policy {name!r} had samples but a gradient norm of 0 {steps} ({key}=0.0): its "
            "weights do not change; most often its agents' rewards do not vary within a "
            "group: check their rewards, or raise algorithm.num_generations "
            f"(now {self.cfg.algorithm.num_generations}) or their temperature "
            "(team.agents.<i>.temperature)"
        )

    def _is_message(self, name: str, weight: float) -> str:
        a = self.cfg.algorithm
        head = (
            f"policy {name!r}: the mean importance weight was {weight:.3g} (is_weight/{name} "
            f"< {IS_FLOOR}), which scales its policy gradient down "
            f"{1 / max(weight, 1e-30):.3g}x; "
        )
        if a.importance_sampling_mode.startswith("sequence"):
            return head + (
                f"algorithm.importance_sampling_mode={a.importance_sampling_mode!r} multiplies "
                "each token's ratio over the whole completion, and under top_p < 1 every "
                "ratio is the nucleus mass (< 1): use a token_* or geometric_* mode, "
                "algorithm.truncated_scoring=true, or top_p=1"
            )
        return head + (
            "the sampler is far from the trained policy (algorithm.max_staleness, "
            "generation.backend, or the agents' top_p/top_k): check "
            f"logp_diff/{name}, or set algorithm.truncated_scoring=true under top-p/top-k"
        )


def _number(value: Any) -> float | None:
    """A logged metric as a float; None for a missing or non-numeric one (NaN logs as None)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
