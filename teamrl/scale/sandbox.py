"""Sandboxed code execution as Ray tasks: each program is one task (one logical CPU) that runs
``run_python`` with the same limits as in one process, wherever the cluster has a free CPU.

``ray_sandbox_runner`` has the runner signature of ``teamrl.tasks.run_program``
(``runner(codes, stdins, timeout_s, report=False) -> list[ExecResult]``), with the isolation
this process set (``env.sandbox_isolation``) and the authenticated report channel that the
code rewards read; ``install`` makes it the default runner of the code rewards in this process
and ``uninstall`` puts the in-process pool back. The sandbox import below is the one coupling
to the sandbox's home.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from teamrl import sandbox as _sandbox  # the one coupling: re-point when it moves


def _run_one(code: str, stdin: str, limits, isolation: str, report: bool) -> object:
    return _sandbox.run_python(code, stdin=stdin, limits=limits, isolation=isolation, report=report)


@lru_cache(maxsize=1)
def _task():
    from teamrl.scale.requires import require_ray

    return require_ray().remote(num_cpus=1, max_retries=0)(_run_one)


def ray_sandbox_runner(
    codes: Sequence[str], stdins: Sequence[str], timeout_s: float, report: bool = False
) -> list:
    """Every program as a Ray task; results in input order. The isolation is the one this
    process set (``env.sandbox_isolation``), not the task's default."""
    import ray

    from teamrl.tasks import run_program

    limits = run_program.batch_limits(timeout_s)  # the in-process runner's, disk bound too
    mode = run_program.isolation()
    return ray.get([_task().remote(c, s, limits, mode, report) for c, s in zip(codes, stdins)])


def install() -> None:
    """Make code rewards run their programs as Ray tasks (``distributed.sandbox_tasks``)."""
    from teamrl.tasks import run_program

    run_program.sandbox_runner = ray_sandbox_runner


def uninstall() -> None:
    """The in-process sandbox pool again (when the Ray team shuts down)."""
    from teamrl.tasks import run_program

    if run_program.sandbox_runner is ray_sandbox_runner:
        run_program.sandbox_runner = run_program.pool_runner
