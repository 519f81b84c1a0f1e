"""The config reference: every field with its default and help (``--help-config``, docs)."""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Any

from teamrl.config import Config, ConfigError
from teamrl.errors import did_you_mean


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


def sections() -> list[str]:
    """The sections ``--help-config SECTION`` takes, in the reference's order (a list of
    sections by its own name: ``team.agents``)."""
    return [_name(e).removesuffix(".<i>") for e in describe() if e.startswith("[")]


def describe_section(section: str) -> list[str]:
    """``describe()``'s entries of one section, the sections inside it included, or of one
    field (``train.max_steps``); a list entry may be named by an index (``team.agents.0``).
    An unknown name is a one-line ConfigError listing the sections."""
    want = re.sub(r"\.\d+(?=\.|$)", ".<i>", section.strip().strip(".")).removesuffix(".<i>")
    picked = [e for e in describe() if _name(e) == want or _name(e).startswith(want + ".")]
    if not picked:
        names = sections()
        hint = did_you_mean(want, names)
        raise ConfigError(
            f"--help-config: unknown section {section!r}; {hint + ' ' if hint else ''}"
            f"sections: {', '.join(names)} (or a field's dotted name)"
        )
    return picked


def _name(entry: str) -> str:
    """The dotted name of a ``describe()`` entry: ``[team.agents.<i>]  ...`` or
    ``  train.max_steps = ...``."""
    if entry.startswith("["):
        return entry[1 : entry.index("]")]
    return entry.split(" = ", 1)[0].strip()


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
