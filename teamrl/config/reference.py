"""The config reference: every field with its default and help (``--help-config``, docs)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from teamrl.config import Config


def describe(cls: type = Config, prefix: str = "") -> list[str]:
    """One entry per field: dotted name, default, help (for ``--help-config``).

    A list of sections (``team.agents``) is described by one entry's fields under
    ``team.agents.<i>.``, the path an override uses (``team.agents.0.temperature=0.7``).
    """
    lines = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        hint = hints[f.name]
        help_text = f.metadata.get("help", "")
        if dataclasses.is_dataclass(hint):
            lines.append(f"[{name}]  {help_text}")
            lines.extend(describe(hint, name + "."))
            continue
        item = typing.get_args(hint)[0] if typing.get_origin(hint) is list else None
        if item is not None and dataclasses.is_dataclass(item):
            lines.append(f"  {name} = {_default(f)!r}\n      {help_text}")
            lines.append(f"[{name}.<i>]  One entry of {name} (<i> = 0, 1, ...).")
            lines.extend(describe(item, f"{name}.<i>."))
            continue
        lines.append(f"  {name} = {_default(f)!r}\n      {help_text}")
    return lines


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return "REQUIRED"


def field_paths(cls: type = Config, prefix: str = "") -> dict[str, Any]:
    """{dotted path: type hint} of every leaf field (list entries as ``<i>``): for fuzzing."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            out.update(field_paths(hint, f"{prefix}{f.name}."))
            continue
        item = typing.get_args(hint)[0] if typing.get_origin(hint) is list else None
        if item is not None and dataclasses.is_dataclass(item):
            out.update(field_paths(item, f"{prefix}{f.name}.<i>."))
        out[f"{prefix}{f.name}"] = hint
    return out
