"""``run_python``: one program in a fresh sandbox (see the package docstring)."""

from __future__ import annotations

from collections.abc import Sequence

from teamrl.sandbox.execute import execute
from teamrl.sandbox.limits import ExecResult, Limits
from teamrl.sandbox.modes import resolve_mode


def run_python(
    code: str,
    *,
    stdin: str = "",
    limits: Limits | None = None,
    args: Sequence[str] = (),
    isolation: str = "auto",
    python: str | None = None,
    report: bool = False,
) -> ExecResult:
    """Run ``code`` as ``main.py`` in a fresh sandbox (see the package docstring).

    ``stdin`` is the program's standard input and ``args`` its ``sys.argv[1:]``.
    ``isolation`` is ``"auto"`` (the strongest that works, see ``isolation_mode``) or a mode
    by name; ``python`` picks another interpreter (run with ``-I -S``: stdlib only).
    ``report=True`` opens the authenticated report channel (``teamrl.sandbox.channel``),
    returned as ``ExecResult.report``. Anything the program does, crashing or hitting a
    limit included, is reported in the ExecResult; RuntimeError means the sandbox itself
    failed.
    """
    if not isinstance(code, str):
        raise TypeError(f"code: expected str, got {type(code).__name__}")
    mode = resolve_mode(isolation, python)
    return execute(code, stdin, limits or Limits(), args, mode, python, report)
