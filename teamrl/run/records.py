"""Reading a run folder's files for the commands that show a run (``teamrl report``, ``teamrl
plot``): every line checked, and anything malformed one line naming the file and the line.

    rows = read_records(run / "metrics.jsonl", METRICS)      # a list of dicts
    for row in iter_records(run / "samples.jsonl", SAMPLES, skipped):
        ...
    config = read_config(run / "config.yaml")                # a dict, aliases bounded

A JSON-lines file is read as bytes, line by line; each line must be UTF-8 text holding one JSON
object whose fields have the kinds its file's spec names (``METRICS``, ``SAMPLES``, ...: the
fields a reader relies on, each with the JSON kinds it may hold). A line that is not is a
``RunFileError``: ``runs/x/samples.jsonl:7: 'joint' must be a list of strings or null, got 5``.
Blank lines are skipped.

The one exception is the file's last line when it has no newline yet and does not parse: the
trainer writes every line whole with its newline in one ``write`` (``teamrl.run.files.
append_line``), so such a line is one being written by a live run, or one a crash tore. It is
skipped, and a note naming the file and the line goes to ``skipped`` (or is a warning when no
list is given): a report of a running run works, and says what it left out. Any other bad line
(a torn line followed by more lines, a line that ends in its newline) is an error: the file was
damaged or edited, and a page drawn from what remains would silently lie.

``config.yaml`` is read with YAML's safe loader, its aliases bounded: an alias is a reference
that the page's JSON (and any reader that walks the data) expands, so nine aliases of nine
aliases of ... turn a 600-byte file into gigabytes. The document as its aliases expand it may
be at most ``ALIAS_BUDGET`` nodes and characters larger than as written (a config that shares
a few settings by alias stays far below); a larger or a recursive one is refused in one line.

This module reads only: the trainer's writers and their crash repair live in
``teamrl.run.files`` and ``teamrl.run.logging``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from teamrl.config.yaml_file import YamlProblem, load_mapping
from teamrl.errors import ConfigError


class RunFileError(ConfigError):
    """A run file that cannot be read: the message names the file, the line and what is wrong."""


# --- what each file's lines hold ---------------------------------------------------------------

# The JSON kinds a field may hold, with the words an error uses for them.
KINDS = {
    "int": "an integer",
    "number": "a number",
    "str": "a string",
    "bool": "true or false",
    "null": "null",
    "strings": "a list of strings",
    "numbers": "a list of numbers",
}


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_kind(v: object, kind: str) -> bool:
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == "number":
        return _is_number(v)
    if kind == "str":
        return isinstance(v, str)
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "null":
        return v is None
    if kind == "strings":
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if kind == "numbers":
        return isinstance(v, list) and all(x is None or _is_number(x) for x in v)
    raise AssertionError(f"unknown kind {kind!r}")


@dataclass(frozen=True)
class Field:
    """A field a reader relies on: the JSON kinds it may hold (``KINDS``), and whether every
    line must have it."""

    kinds: tuple[str, ...]
    required: bool = False

    def words(self) -> str:
        return " or ".join(KINDS[k] for k in self.kinds)


Spec = Mapping[str, Field]

STEP = Field(("int",), required=True)
NUMBER = Field(("number", "null"))
TEXT = Field(("str", "null"))
SCALAR = Field(("int", "str", "null"))

METRICS: Spec = {"step": STEP}  # every other key: a metric, any JSON value (non-numbers unused)
RESUMES: Spec = {"step": STEP, "time": NUMBER}
SAMPLES: Spec = {  # teamrl.run.logging.sample_rows; older files lack all but step and agent
    "step": STEP,
    "agent": Field(("str",), required=True),
    "turn": Field(("int", "null")),
    "example": SCALAR,
    "slot": SCALAR,
    "prompt": TEXT,
    "completion": TEXT,
    "reward": NUMBER,
    "team_reward": NUMBER,
    "local_reward": NUMBER,
    "return": NUMBER,
    "advantage": NUMBER,
    "node": TEXT,
    "parent": TEXT,
    "index": Field(("int", "null")),
    "joint": Field(("strings", "null")),
    "joint_team_rewards": Field(("numbers", "null")),
    "joint_returns": Field(("numbers", "null")),
    "candidate": Field(("int", "null")),
    "continued": Field(("bool", "null")),
}
EVAL_SAMPLES: Spec = {
    **SAMPLES,
    "episode_return": NUMBER,
    "success": Field(("bool", "number", "null")),
}


# --- JSON lines --------------------------------------------------------------------------------


def iter_records(path: Path, spec: Spec, skipped: list[str] | None = None) -> Iterator[dict]:
    """The rows of JSON-lines file ``path``, each checked against ``spec``. A bad line raises
    ``RunFileError`` naming ``path:line``; a partial last line is skipped with a note appended
    to ``skipped`` (a warning when it is None)."""
    try:
        f = Path(path).open("rb")
    except OSError as err:
        raise RunFileError(f"{path}: cannot read it ({err.strerror or err})") from None
    with f:
        number = 0
        while True:
            try:
                raw = f.readline()
            except OSError as err:
                raise RunFileError(
                    f"{path}:{number + 1}: cannot read it ({err.strerror})"
                ) from None
            if not raw:
                return
            number += 1
            row = _parse(path, number, raw)
            if row is _PARTIAL:
                note = (
                    f"{path}:{number}: a partial last line (a run still writing it, or a write "
                    "torn by a crash): skipped"
                )
                if skipped is None:
                    warnings.warn(note, stacklevel=2)
                elif note not in skipped:
                    skipped.append(note)
                return
            if row is not None:
                _check(path, number, row, spec)
                yield row


def read_records(path: Path, spec: Spec, skipped: list[str] | None = None) -> list[dict]:
    """``iter_records`` as a list."""
    return list(iter_records(path, spec, skipped))


_PARTIAL = object()  # _parse's answer for a last line still being written


def _parse(path: Path, number: int, raw: bytes) -> dict | object | None:
    """One line's object; None for a blank line; ``_PARTIAL`` for a last line without its
    newline that does not parse."""
    whole = raw.endswith(b"\n")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        if not whole:
            return _PARTIAL  # a multi-byte character cut by the write in progress
        raise RunFileError(
            f"{path}:{number}: not UTF-8 text (byte {raw[err.start]:#04x} at column "
            f"{err.start + 1})"
        ) from None
    if not text.strip():
        return None
    try:
        row = json.loads(text.rstrip("\r\n"))
    except json.JSONDecodeError as err:
        if not whole:
            return _PARTIAL
        at = "" if err.msg.endswith(" at") else " at"  # "Unterminated string starting at"
        raise RunFileError(
            f"{path}:{number}: not JSON ({err.msg}{at} column {err.colno}): {_cut(text)}"
        ) from None
    except RecursionError:
        raise RunFileError(f"{path}:{number}: JSON nested too deeply") from None
    if not isinstance(row, dict):
        raise RunFileError(
            f"{path}:{number}: expected one JSON object per line, got {_json_kind(row)}: "
            f"{_cut(text)}"
        )
    return row


def _check(path: Path, number: int, row: dict, spec: Spec) -> None:
    for name, field in spec.items():
        if name not in row:
            if field.required:
                raise RunFileError(f"{path}:{number}: the line has no {name!r}: {_clip(row)}")
            continue
        value = row[name]
        if not any(_is_kind(value, k) for k in field.kinds):
            raise RunFileError(
                f"{path}:{number}: {name!r} must be {field.words()}, got {_clip(value)}"
            )


def _json_kind(v: object) -> str:
    if isinstance(v, list):
        return "a list"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, bool):
        return "true or false"
    if v is None:
        return "null"
    return "a number"


def _clip(v: object, n: int = 60) -> str:
    """A value shown in an error: its JSON, at most ``n`` characters."""
    try:
        text = json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(v)
    return _cut(text, n)


def _cut(text: str, n: int = 60) -> str:
    """A line's text shown in an error: at most ``n`` characters."""
    text = text.strip()
    return text if len(text) <= n else text[: n - 3] + "..."


# --- config.yaml --------------------------------------------------------------------------------


def read_config(path: Path) -> dict:
    """The mapping in a run's ``config.yaml`` (``{}`` for an empty file). Bad UTF-8, bad YAML, a
    document that is not a mapping, and aliases that expand it by more than ``ALIAS_BUDGET``
    (``teamrl.config.yaml_file``) are each a ``RunFileError`` naming the file (and the line,
    where there is one)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise RunFileError(f"{path}: cannot read it ({err.strerror or err})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise RunFileError(f"{path}:{line}: not UTF-8 text (byte {raw[err.start]:#04x})") from None
    try:
        return load_mapping(text)
    except YamlProblem as err:
        where = f":{err.line}" if err.line is not None else ""
        reason = err.reason.replace("at the top level", "(a run's config)")
        raise RunFileError(f"{path}{where}: {reason}") from None
