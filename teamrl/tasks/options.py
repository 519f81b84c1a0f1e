"""``option``: one field of a task's settings dataclass, with the help string a config shows."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def option(default: Any, help: str) -> Any:
    """A dataclass field with ``default`` and ``help`` (``metadata["help"]``, as config fields)."""
    return field(default=default, metadata={"help": help})
