"""Sandboxed code execution as Ray tasks: each program is one task (one logical CPU) that runs
``run_python`` with the same limits as in one process, wherever the cluster has a free CPU.

``ray_sandbox_runner`` has the runner signature of ``teamrl.tasks.run_program``
(``runner(codes, stdins, timeout_s) -> list[ExecResult]``); ``install`` makes it the default
runner of the code rewards in this process. The sandbox import below is the one coupling to
the sandbox's home.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from teamrl import sandbox as _sandbox  # the one coupling: re-point when it moves


def _run_one(code: str, stdin: str, limits) -> object:
    return _sandbox.run_python(code, stdin=stdin, limits=limits)


@lru_cache(maxsize=1)
def _task():
    from teamrl.scale.group import require_ray

    return require_ray().remote(num_cpus=1, max_retries=0)(_run_one)


def ray_sandbox_runner(codes: Sequence[str], stdins: Sequence[str], timeout_s: float) -> list:
    """Every program as a Ray task; results in input order."""
    import ray

    # as the in-process runner: the CPU limit no lower than the wall clock, which binds
    limits = _sandbox.Limits(
        wall_seconds=float(timeout_s), cpu_seconds=max(1, math.ceil(timeout_s))
    )
    return ray.get([_task().remote(c, s, limits) for c, s in zip(codes, stdins)])


def install() -> None:
    """Make code rewards run their programs as Ray tasks (``distributed.sandbox_tasks``)."""
    from teamrl.tasks import run_program

    run_program.sandbox_runner = ray_sandbox_runner
