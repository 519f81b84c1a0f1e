"""``_f``: a dataclass field with its help string (every config field has one)."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any


def _f(default: Any = dataclasses.MISSING, help: str = "", **kw: Any) -> Any:  # noqa: A002
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: _copy(value), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


def _copy(value: Any) -> Any:
    import copy

    return copy.deepcopy(value)
