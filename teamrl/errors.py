"""Errors a user can cause: each message is one line naming the field or file and the value."""

from __future__ import annotations

import difflib
import traceback
from collections.abc import Iterable
from pathlib import Path


class ConfigError(ValueError):
    """A config value is unknown, has the wrong type, or is out of range."""


class UserCodeError(RuntimeError):
    """The user's own code (a task's env, reward, prompt or transition) failed or returned
    something unusable. The message is one line naming the user's file, line and function and
    the cause; the command line prints just that (``--traceback`` or ``TEAMRL_TRACEBACK=1``
    for the whole stack), and the Python API raises this same exception."""


def user_frame(err: BaseException) -> str:
    """``TypeError at my_tasks.py:12 in reward: ...``: the error and the innermost frame
    outside teamrl (the user's code), else the innermost frame; ``sys.exit("msg")`` is
    ``SystemExit('msg') at ...``."""
    package = str(Path(__file__).resolve().parent)
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if not str(Path(f.filename).resolve()).startswith(package)]
    frame = (mine or frames or [None])[-1]
    at = f" at {Path(frame.filename).name}:{frame.lineno} in {frame.name}" if frame else ""
    if isinstance(err, SystemExit):  # sys.exit(code) in the user's code: named by its code
        return f"SystemExit({err.code!r}){at}"
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}{at}: {first}" if first else f"{type(err).__name__}{at}"


def named(fn: object) -> str:
    """A function's name and where it is defined: ``my_reward (tasks.py:12)`` (a callable
    without code, e.g. a builtin: its name alone)."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    code = getattr(fn, "__code__", None)
    if code is None:
        return name
    return f"{name} ({Path(code.co_filename).name}:{code.co_firstlineno})"


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice closest to a mistyped ``name`` (difflib's ``get_close_matches`` at its
    default cutoff, 0.6), or None when none is close."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1)
    return close[0] if close else None


def did_you_mean(name: str, choices: Iterable[str], prefix: str = "") -> str:
    """``"did you mean 'x'?"`` for the choice closest to ``name`` (``closest``), shown after
    ``prefix`` (a section's dotted path), or ``""`` when none is close."""
    close = closest(name, choices)
    return f"did you mean {prefix + close!r}?" if close else ""


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """``warnings.formatwarning`` for the command line: ``teamrl: warning: ...`` on one line, as
    an error is (Python's default adds the file and the source line under it)."""
    text = str(message).replace("\r", " ").replace("\n", " ")
    return f"teamrl: warning: {text}\n"
