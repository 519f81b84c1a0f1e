"""Errors a user can cause: each message is one line naming the field or file and the value."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """A config value is unknown, has the wrong type, or is out of range."""


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
