"""Pieces shared by the episode builders: the result type and guarded env steps."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from teamrl.envs.base import Env, Step
from teamrl.sample import Sample


@dataclass
class RolloutResult:
    samples: list[Sample]
    roots: list = field(default_factory=list)  # joint-tree roots (MAGRPO) for sample tables
    stats: dict[str, float] = field(default_factory=dict)  # timings and token counts
    metrics: dict[str, float] = field(default_factory=dict)  # reward/..., completion_length/...
    episodes: list[dict] = field(default_factory=list)  # one summary per episode (eval, logs)


class RewardError(RuntimeError):
    """An environment's step (its reward or transition) raised or returned garbage."""


def step_env(env: Env, actions: dict[str, str], where: str) -> Step:
    try:
        out = env.step(actions)
    except Exception as err:  # re-raised with the context a user needs to debug their env
        preview = {a: t[:80] for a, t in actions.items()}
        raise RewardError(f"{where}: env.step raised {err!r} on actions {preview}") from err
    if not isinstance(out, Step):
        raise RewardError(f"{where}: env.step must return a teamrl Step, got {type(out).__name__}")
    if out.reward != out.reward or any(v != v for v in out.local_rewards.values()):
        raise RewardError(f"{where}: env.step returned a NaN reward on actions {actions}")
    return out


def parallel_map(pool: ThreadPoolExecutor | None, fn, items: list) -> list:
    return list(pool.map(fn, items)) if pool else [fn(x) for x in items]


def check_observations(obs: dict, agents: list[str], where: str) -> None:
    if not isinstance(obs, dict) or set(agents) - set(obs):
        have = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
        raise ValueError(
            f"{where}: env must return an observation for every agent {agents}, got {have}"
        )
