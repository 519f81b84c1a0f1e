"""The one adapter between the task families and the process sandbox.

Every task that runs model-written code (coding's helper/main and coder/tester, the math
tool agent, the games' tool agent) goes through this module, so the sandbox's API is spelt
out in one place. The sandbox itself (``teamrl.sandbox``) is imported lazily: a task
module stays light to import, and tests replace these callables with fakes.

``run_program(code, limits)``
    one program, no stdin, in a fresh sandbox (``run_python``); ``limits`` holds keyword
    arguments of the sandbox's ``Limits`` (None: its defaults).
``run_programs(codes, stdins, timeout_s, runner=None, report=False)``
    a batch in the shared ``SandboxPool`` (or through ``runner``, a fake in tests), one
    result per program, in order; ``report=True`` opens the sandbox's authenticated report
    channel (``ExecResult.report``) and is passed to the runner as a keyword.
``set_isolation(mode)``
    the sandbox isolation every later run uses (``env.sandbox_isolation``: ``auto`` or a
    mode of ``teamrl.sandbox.ISOLATION_MODES``).
``failure_text(result)``
    a one-line reason why a run did not finish cleanly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from teamrl.text import clip

Runner = Callable[..., list[Any]]
"""``runner(codes, stdins, timeout_s[, report=True]) -> list[ExecResult]``, one result per code,
in order (``report`` is passed only when the caller reads the report channel)."""

# "auto" and teamrl.sandbox.ISOLATION_MODES, spelt out so that this module imports no sandbox
# code (tests/rollout/test_rollout_guards.py checks the two agree)
ISOLATION_CHOICES = ("auto", "namespaces", "userns", "landlock", "setuid", "rlimits")
_isolation = {"mode": "auto"}


def set_isolation(mode: str) -> None:
    """The sandbox isolation mode of every later run (see ``teamrl.sandbox``)."""
    if mode not in ISOLATION_CHOICES:
        raise ValueError(
            f"env.sandbox_isolation: expected one of {ISOLATION_CHOICES}, got {mode!r}"
        )
    if mode != _isolation["mode"]:
        _isolation["mode"] = mode
        _pool.cache_clear()


def isolation() -> str:
    """The isolation mode later runs get (``set_isolation``; ``"auto"`` by default)."""
    return _isolation["mode"]


def run_program(code: str, limits: dict | None = None) -> Any:
    """Run one program in the sandbox (an ``ExecResult``); ``limits``: ``Limits`` kwargs."""
    from teamrl.sandbox import Limits, run_python  # imported here: keep imports light

    limits_ = None if limits is None else Limits(**limits)
    return run_python(code, limits=limits_, isolation=_isolation["mode"])


@lru_cache(maxsize=1)
def _pool() -> Any:
    from teamrl.sandbox import SandboxPool

    return SandboxPool(isolation=_isolation["mode"])


def sandbox_runner(
    codes: Sequence[str], stdins: Sequence[str], timeout_s: float, report: bool = False
) -> list[Any]:
    """The default runner: every program in the shared ``SandboxPool`` with a wall-clock limit."""
    from teamrl.sandbox import Limits

    # The CPU limit is set no lower than the wall clock, so the wall clock is what binds.
    limits = Limits(wall_seconds=float(timeout_s), cpu_seconds=max(1, math.ceil(timeout_s)))
    if not report:
        return _pool().map(list(codes), stdins=list(stdins), limits=limits)
    pool = _pool()
    futures = [pool.submit(c, stdin=s, limits=limits, report=True) for c, s in zip(codes, stdins)]
    return [f.result() for f in futures]


pool_runner = sandbox_runner  # the in-process default, kept when another runner is installed


def run_programs(
    codes: list[str],
    stdins: list[str],
    timeout_s: float,
    runner: Runner | None = None,
    *,
    report: bool = False,
) -> list:
    """Run a batch through ``runner`` (default: ``sandbox_runner``); one result per program."""
    if not codes:
        return []
    run = runner or sandbox_runner
    results = list(
        run(codes, stdins, timeout_s, report=True) if report else run(codes, stdins, timeout_s)
    )
    if len(results) != len(codes):
        raise RuntimeError(f"runner returned {len(results)} results for {len(codes)} programs")
    return results


def failure_text(result: Any) -> str:
    """A one-line reason why a run did not finish cleanly."""
    if result.timed_out:
        return "timed out"
    if result.killed:
        return f"killed ({result.killed})"
    lines = [ln for ln in (result.stderr or "").strip().splitlines() if ln.strip()]
    return clip(lines[-1], 300, marker="") if lines else f"exit code {result.returncode}"
