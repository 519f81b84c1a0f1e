"""Errors a user can cause: each message is one line naming the field or file and the value."""

from __future__ import annotations

import traceback
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
    outside teamrl (the user's code), else the innermost frame."""
    package = str(Path(__file__).resolve().parent)
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if not str(Path(f.filename).resolve()).startswith(package)]
    frame = (mine or frames or [None])[-1]
    at = f" at {Path(frame.filename).name}:{frame.lineno} in {frame.name}" if frame else ""
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}{at}: {first}" if first else f"{type(err).__name__}{at}"
