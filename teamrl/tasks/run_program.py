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
``configure(env)``
    every sandbox setting of a run's env config: the isolation, and the disk bound
    (``env.sandbox_disk_mb``, ``env.sandbox_disk_files``) of every later program.
``disk_bound(env)``
    the disk bound of an env config, checked (what the preflight checks).
``batch_limits(timeout_s)``
    the sandbox ``Limits`` of a batch program (a runner elsewhere, e.g. on Ray, uses them).
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
_disk: dict[str, int] = {}  # Limits keywords (disk_mb, disk_files); empty: the defaults


def set_isolation(mode: str) -> None:
    """The sandbox isolation mode of every later run (see ``teamrl.sandbox``)."""
    if mode not in ISOLATION_CHOICES:
        raise ValueError(
            f"env.sandbox_isolation: expected one of {ISOLATION_CHOICES}, got {mode!r}"
        )
    if mode != _isolation["mode"]:
        _isolation["mode"] = mode
        _pool.cache_clear()


def configure(env: Any) -> None:
    """The sandbox settings of ``env`` (an ``EnvConfig``) for every later run: its isolation
    and its disk bound."""
    disk = disk_bound(env)
    set_isolation(env.sandbox_isolation)
    _disk.clear()
    _disk.update(disk)


def disk_bound(env: Any) -> dict[str, int]:
    """The ``Limits`` keywords of ``env``'s disk bound; ValueError (one line, naming the
    field) for a value below 1."""
    disk = {"disk_mb": env.sandbox_disk_mb, "disk_files": env.sandbox_disk_files}
    for key, value in disk.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"env.sandbox_{key}: expected an integer >= 1, got {value!r}")
    return disk


def isolation() -> str:
    """The isolation mode later runs get (``set_isolation``; ``"auto"`` by default)."""
    return _isolation["mode"]


def run_program(code: str, limits: dict | None = None) -> Any:
    """Run one program in the sandbox (an ``ExecResult``); ``limits``: ``Limits`` kwargs."""
    from teamrl.sandbox import Limits, run_python  # imported here: keep imports light

    return run_python(code, limits=Limits(**{**_disk, **(limits or {})}), isolation=isolation())


@lru_cache(maxsize=1)
def _pool() -> Any:
    from teamrl.sandbox import SandboxPool

    return SandboxPool(isolation=_isolation["mode"])


def sandbox_runner(
    codes: Sequence[str], stdins: Sequence[str], timeout_s: float, report: bool = False
) -> list[Any]:
    """The default runner: every program in the shared ``SandboxPool`` with a wall-clock limit."""
    limits = batch_limits(timeout_s)
    if not report:
        return _pool().map(list(codes), stdins=list(stdins), limits=limits)
    pool = _pool()
    futures = [pool.submit(c, stdin=s, limits=limits, report=True) for c, s in zip(codes, stdins)]
    return [f.result() for f in futures]


def batch_limits(timeout_s: float) -> Any:
    """The ``Limits`` of a program run in a batch: ``timeout_s`` of wall clock, the disk bound
    set by ``configure``, the sandbox's defaults otherwise."""
    from teamrl.sandbox import Limits

    # The CPU limit is set no lower than the wall clock, so the wall clock is what binds.
    cpu = max(1, math.ceil(timeout_s))
    return Limits(wall_seconds=float(timeout_s), cpu_seconds=cpu, **_disk)


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
