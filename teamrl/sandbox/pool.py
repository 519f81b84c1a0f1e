"""``SandboxPool``: many programs at once, each in its own sandbox."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from teamrl.sandbox.limits import ExecResult, Limits
from teamrl.sandbox.modes import isolation_mode
from teamrl.sandbox.run import run_python


class SandboxPool:
    """Runs many programs at once, each in its own sandbox.

    The threads only wait on subprocesses, so ``max_workers`` (default ``os.cpu_count()``)
    is how many programs run at the same time.
    """

    def __init__(
        self, max_workers: int | None = None, *, isolation: str = "auto", python: str | None = None
    ) -> None:
        if max_workers is not None and max_workers < 1:
            raise ValueError(f"max_workers: expected >= 1 or None, got {max_workers}")
        self.max_workers = max_workers or os.cpu_count() or 1
        self.isolation = isolation
        self.python = python
        self._executor = ThreadPoolExecutor(self.max_workers, thread_name_prefix="sandbox")

    def submit(
        self,
        code: str,
        *,
        stdin: str = "",
        limits: Limits | None = None,
        args: Sequence[str] = (),
        report: bool = False,
    ) -> Future[ExecResult]:
        """Start one program; the future's result is its ExecResult (``report``: open the
        authenticated report channel, see ``teamrl.sandbox.channel``)."""
        kwargs = dict(stdin=stdin, limits=limits, args=args, python=self.python, report=report)
        return self._executor.submit(run_python, code, isolation=self.isolation, **kwargs)

    def map(
        self,
        codes: Sequence[str],
        stdins: Sequence[str] | None = None,
        limits: Limits | Sequence[Limits] | None = None,
    ) -> list[ExecResult]:
        """Run every program; results in input order. ``limits``: one for all, or one each."""
        n = len(codes)
        stdins = [""] * n if stdins is None else list(stdins)
        if len(stdins) != n:
            raise ValueError(f"stdins: expected {n} entries (one per code), got {len(stdins)}")
        if limits is None or isinstance(limits, Limits):
            per = [limits] * n
        else:
            per = list(limits)
            if len(per) != n:
                raise ValueError(f"limits: expected {n} entries (one per code), got {len(per)}")
        if n and self.isolation == "auto":
            isolation_mode(self.python)  # probe once here, not in every thread
        futures = [self.submit(c, stdin=s, limits=lim) for c, s, lim in zip(codes, stdins, per)]
        return [f.result() for f in futures]

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
