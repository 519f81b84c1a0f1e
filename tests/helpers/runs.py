"""Tiny runs: overrides for small configs on tiny models, and a training run in a subprocess
killed at a checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def tiny_overrides(policies: str = "shared", steps: int = 2, **extra: object) -> list[str]:
    items = [
        "model.name_or_path=tiny-llama",
        f"team.policies={policies}",
        "env.name=digits",
        "team.agents=[{name: alice, max_completion_length: 8}, "
        "{name: bob, max_completion_length: 8}]",
        f"train.max_steps={steps}",
        "train.learning_rate=0.01",
        "train.lr_scheduler_type=constant",
        "algorithm.num_generations=4",
        "log.progress_bar=false",
    ]
    items += [f"{k}={v}" for k, v in extra.items()]
    return items


def tiny_writers(output_dir, steps: int = 1) -> list[str]:
    """The quickstart's two writers on tiny-llama, 6 tokens each, 2 joint samples, ``steps``
    steps from step 1 at the full LR (no warm-up), logging to ``output_dir``."""
    return [
        "model.name_or_path=tiny-llama",
        "team.agents.0.max_completion_length=6",
        "team.agents.1.max_completion_length=6",
        "algorithm.num_generations=2",
        f"train.max_steps={steps}",
        "train.warmup_steps=0",
        f"log.output_dir={output_dir}",
        "log.progress_bar=false",
    ]


ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is tests/helpers/runs.py)


def train_in_subprocess(cfg_path, run_dir, *flags: str) -> subprocess.Popen:
    """``teamrl train CFG --run-dir RUN [flags]`` in its own process (to kill it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "teamrl.cli", "train", str(cfg_path), "--run-dir", str(run_dir)]
    return subprocess.Popen([*cmd, *flags], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)


def kill_at_checkpoint(proc: subprocess.Popen, run_dir: Path, step: int, timeout: float = 240):
    """``kill -9`` the run as soon as its checkpoint ``step-N`` exists."""
    deadline = time.time() + timeout
    while not (run_dir / "checkpoints" / f"step-{step}").exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline, f"no checkpoint within {timeout:g} s"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
