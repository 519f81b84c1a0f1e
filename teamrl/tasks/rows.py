"""Row helpers shared by the task builders."""

from __future__ import annotations

from typing import Any

from teamrl.errors import ConfigError


def check_limit(limit: Any) -> None:
    """``env.kwargs.limit`` is None or an int >= 1 (a ConfigError naming the value)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"env.kwargs.limit: expected a positive int or None, got {limit!r}")


def limit_rows(rows: list[dict], limit: int | None) -> list[dict]:
    """The first ``limit`` rows (all of them for None); a ``limit`` below 1 is an error."""
    check_limit(limit)
    return rows if limit is None else rows[:limit]
