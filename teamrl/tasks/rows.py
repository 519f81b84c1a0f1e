"""Row helpers shared by the task builders."""

from __future__ import annotations


def limit_rows(rows: list[dict], limit: int | None) -> list[dict]:
    """The first ``limit`` rows (all of them for None); a ``limit`` below 1 is an error."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit: expected a positive int or None, got {limit!r}")
    return rows if limit is None else rows[:limit]
