"""One path for episode summaries and rollout metrics, shared by every episode builder.

An episode's *outcome* is folded from the env steps along its chosen path (``Outcome.record``);
``episode_summary`` turns it into the dict that evaluation reports aggregate
(``RolloutResult.episodes``). The per-agent sample metrics are the same for every rollout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from teamrl.envs.base import Step
from teamrl.sample import Sample


def add_components(into: dict[str, list[float]], step: Step) -> None:
    """Append each of the step's reward components to its list (logged as reward/<name>)."""
    for k, v in step.reward_components.items():
        into.setdefault(k, []).append(float(v))


@dataclass
class Outcome:
    """What one episode's chosen path did, folded step by step."""

    success: bool | None = None  # the last real step's verdict; None: the task has no notion
    turns: int = 0
    team_return: float = 0.0  # sum of the team rewards of the real (non-lookahead) steps
    components: dict[str, list[float]] = field(default_factory=dict)

    def record(self, step: Step) -> None:
        add_components(self.components, step)
        if step.lookahead:  # an estimate: the real turn's outcome is recorded later
            return
        self.team_return += float(step.reward)
        if step.success is not None:
            self.success = bool(step.success)


def episode_summary(
    problem: int, outcome: Outcome, ret: float, team_return: float | None = None, **extra
) -> dict:
    """The summary of one single-path episode: what ``evaluation.summarise`` reads."""
    return {
        "problem": problem,
        **extra,
        "success": outcome.success,
        "turns": outcome.turns,
        "return": ret,
        "team_return": outcome.team_return if team_return is None else team_return,
        "components": {k: float(np.mean(v)) for k, v in outcome.components.items()},
    }


def sample_metrics(samples: list[Sample], agents: list[str]) -> dict[str, float]:
    """Per-agent reward, completion length, longest prompt and truncation rate, shared by
    every rollout. The longest prompt is what sizes the update's activations (a prompt that
    carries another agent's output, e.g. a program's printed result, can grow from step to
    step), so it is logged as a maximum, not a mean."""
    m: dict[str, float] = {}
    for a in agents:
        mine = [s for s in samples if s.agent == a]
        if mine:
            m[f"reward/agent/{a}/mean"] = float(np.mean([s.reward for s in mine]))
            m[f"completion_length/{a}"] = float(np.mean([len(s.completion_ids) for s in mine]))
            m[f"prompt_length/{a}/max"] = float(max(len(s.prompt_ids) for s in mine))
            m[f"truncated_fraction/{a}"] = float(np.mean([s.truncated for s in mine]))
    m["completion_length/mean"] = float(np.mean([len(s.completion_ids) for s in samples]))
    if samples:
        m["prompt_length/max"] = float(max(len(s.prompt_ids) for s in samples))
    return m


def means(prefix: str, values: dict, suffix: str = "") -> dict[str, float]:
    """{f"{prefix}{key}{suffix}": mean(values[key])}, keys sorted."""
    return {f"{prefix}{k}{suffix}": float(np.mean(v)) for k, v in sorted(values.items())}
