"""Run folders written line by line, with no training, for ``teamrl report`` at sizes a test
cannot train (tests/commands and tests/browser): a long run's metrics.jsonl, samples.jsonl
and eval_samples.jsonl in the trainer's format (teamrl.run.logging.sample_rows)."""

from __future__ import annotations

import json
from pathlib import Path

SPIKE_STEP = 77_777  # the one step where the loss jumps to SPIKE
SPIKE = 50.0


def loss(step: int) -> float:
    """A loss between 0 and 1 that never repeats a pattern a downsampler could align with,
    but for one spike."""
    return SPIKE if step == SPIKE_STEP else (step * 7919 % 1000) / 1000


def eval_reward(step: int) -> float:
    return (step // 1000 % 10) / 10


def write_rows(path: Path, rows: list[dict]) -> None:
    """A JSON-lines file of ``rows``, as the trainer writes one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_long_run(
    run: Path, steps: int, sample_every: int = 50, eval_every: int = 1000, evals: int = 2
) -> Path:
    """A MAGRPO-shaped run of ``steps`` steps (two agents, G = 2, one node): a metrics row per
    step (``loss``, a reward with its std, an evaluation every ``eval_every`` steps), the whole
    group of one example every ``sample_every`` steps, and ``evals`` held-out examples at every
    evaluation."""
    run.mkdir(parents=True, exist_ok=True)
    with (run / "metrics.jsonl").open("w") as f:
        for s in range(1, steps + 1):
            row = {
                "step": s,
                "reward/mean": (s % 100) / 100,
                "reward/std": 0.1,
                "advantage/mean/alice": 0.0,
                "advantage/std/alice": 1.0,
                "loss/alice": loss(s),
                "completion_length/alice": 10 + s % 3,
            }
            if s % eval_every == 0:
                row["eval/reward/mean"] = eval_reward(s)
            f.write(json.dumps(row) + "\n")
    with (run / "samples.jsonl").open("w") as f:
        for s in range(sample_every, steps + 1, sample_every):
            for agent in ("alice", "bob"):
                for k in range(2):
                    f.write(json.dumps(_sample(s, agent, k)) + "\n")
    with (run / "eval_samples.jsonl").open("w") as f:
        for s in range(0, steps + 1, eval_every):
            for example in range(evals):
                for agent in ("alice", "bob"):
                    row = {
                        "step": s,
                        "example": example,
                        "slot": example,
                        "agent": agent,
                        "turn": 0,
                        "completion": f"{agent} at {s}",
                        "reward": eval_reward(s),
                        "episode_return": eval_reward(s),
                    }
                    f.write(json.dumps(row) + "\n")
    return run


def _sample(step: int, agent: str, k: int) -> dict:
    return {
        "step": step,
        "example": step % 7,
        "slot": 0,
        "group": [step % 7, 0, "root", agent],
        "agent": agent,
        "turn": 0,
        "prompt": f"Say {step % 7}.",
        "completion": f"{agent} {k} at {step}",
        "reward": float(k),
        "team_reward": float(k),
        "local_reward": 0.0,
        "return": float(k),
        "advantage": k - 0.5,
        "node": "root",
        "parent": None,
        "index": k,
        "joint": [str(k)],
        "joint_team_rewards": [float(k)],
        "joint_returns": [float(k)],
    }
