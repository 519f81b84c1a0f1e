"""Loaders for the stdin/stdout datasets of ``code_contest`` (coder and unit tester).

**Stdin/stdout tasks** (AT-GRPO: coder and unit tester)::

    {"id", "source", "question", "tests": [{"input", "output"}], "solution", "difficulty", ...}

``solution`` is one reference Python 3 program when the dataset has one, else None.

- APPS (``codeparrot/apps``): ``input_output`` is a JSON string ``{"inputs", "outputs"}``;
  rows with ``fn_name`` are call-based (not stdin/stdout), and rows whose ``input_output`` is
  empty or absent have no tests (some of APPS train): both are skipped, counted and logged.
- CodeContests (``deepmind/code_contests``): ``public_tests``/``private_tests``/
  ``generated_tests`` are ``{"input": [...], "output": [...]}``; ``solutions`` holds programs
  by language (3 = Python 3).
- LiveCodeBench (``livecodebench/code_generation_lite``): ``public_test_cases`` is a JSON
  string; ``private_test_cases`` is either the same JSON or base64(zlib(pickle(json string))),
  decoded with an unpickler that refuses every class and function (plain data only).
  Problems with ``"functional"`` tests (LeetCode, call-based) are skipped and counted.

Loading plumbing (local folders, ``skip_malformed``, ``limit``): ``teamrl.tasks.coding.data``.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from teamrl.errors import ConfigError
from teamrl.tasks.coding.data import (
    SkipRow,
    load_jsonl,
    load_split,
    normalise_all,
    take_rows,
    text_field,
)

APPS_ID = "codeparrot/apps"
CODE_CONTESTS_ID = "deepmind/code_contests"
LIVECODEBENCH_ID = "livecodebench/code_generation_lite"

# CodeContests ``solutions.language`` enum: 0 unknown, 1 Python 2, 2 C++, 3 Python 3, 4 Java.
_PYTHON3 = 3

# --------------------------------------------------------------------------------------
# Stdin/stdout tasks: APPS, CodeContests, LiveCodeBench
# --------------------------------------------------------------------------------------


def _io_text(value: Any, name: str) -> str:
    """A test input/output as text; APPS sometimes stores one as a list of lines."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "\n".join(value) + "\n"
    if not isinstance(value, str):
        raise ValueError(f"{name}: expected a string, got {type(value).__name__}")
    return value


def _pair_tests(inputs: Any, outputs: Any, name: str) -> list[dict]:
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise ValueError(f"{name}: expected lists of inputs and outputs")
    if len(inputs) != len(outputs):
        raise ValueError(f"{name}: {len(inputs)} inputs but {len(outputs)} outputs")
    return [
        {"input": _io_text(i, f"{name}.input"), "output": _io_text(o, f"{name}.output")}
        for i, o in zip(inputs, outputs)
    ]


def _dedupe(tests: list[dict]) -> list[dict]:
    seen, out = set(), []
    for t in tests:
        if t["input"] not in seen:
            seen.add(t["input"])
            out.append(t)
    return out


def _stdio_row(
    source: str, id_: str, question: str, tests: list[dict], solution: str | None, **extra: Any
) -> dict:
    """A normalised stdin/stdout row; ``tests`` are deduplicated and must not be empty."""
    tests = _dedupe(tests)
    if not tests:
        raise ValueError("tests: the row has no test cases")
    return {
        "id": id_,
        "source": source,
        "question": question,
        "tests": tests,
        "solution": solution,
        **extra,
    }


def _statement_extras(row: dict) -> dict[str, str]:
    """The difficulty and starter code that APPS and LiveCodeBench rows carry."""
    return {
        "difficulty": str(row.get("difficulty") or ""),
        "starter_code": row.get("starter_code") or "",
    }


def _json_field(raw: str, name: str) -> Any:
    """``raw`` parsed as JSON; a ValueError naming the field ``name`` if it is not valid JSON."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"{name}: not valid JSON ({err.msg})") from err


def normalize_apps_row(row: dict, index: int, split: str = "test") -> dict:
    """An APPS row as a stdin/stdout task.

    Call-based rows and rows without tests (``input_output`` absent, empty, or with no
    input/output pairs) raise ``SkipRow``: they are valid APPS rows that this task cannot use.
    A non-empty ``input_output`` that does not parse is malformed (ValueError)."""
    question = text_field(row, "question")
    raw = row.get("input_output")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise SkipRow("no tests")
    io_spec = _json_field(text_field(row, "input_output"), "input_output")
    if not isinstance(io_spec, dict):
        raise ValueError("input_output: expected a JSON object with 'inputs' and 'outputs'")
    if io_spec.get("fn_name"):
        raise SkipRow("call-based")
    tests = _pair_tests(io_spec.get("inputs"), io_spec.get("outputs"), "input_output")
    if not tests:
        raise SkipRow("no tests")
    solution = None
    sols = row.get("solutions") or ""
    if sols:
        parsed = _json_field(sols, "solutions")
        if not isinstance(parsed, list):
            raise ValueError("solutions: expected a JSON list of programs")
        solution = next((s for s in parsed if isinstance(s, str) and s.strip()), None)
    return _stdio_row(
        "apps",
        f"apps/{split}/{row.get('problem_id', index)}",
        question,
        tests,
        solution,
        **_statement_extras(row),
    )


def load_apps(
    split: str = "test",
    dataset_id: str = APPS_ID,
    *,
    limit: int | None = None,
    skip_malformed: bool = False,
) -> list[dict]:
    """APPS stdin/stdout problems of ``split`` (``train`` or ``test``; file ``<split>.jsonl``);
    ``limit`` keeps the first ``limit`` usable ones."""
    return normalise_all(
        load_jsonl(dataset_id, [f"{split}.jsonl"]),
        _apps_normaliser(split),
        what=f"apps[{split}]",
        skip_malformed=skip_malformed,
        limit=limit,
    )


def _apps_normaliser(split: str) -> Callable[[dict, int], dict]:
    return lambda row, index: normalize_apps_row(row, index, split)


CODE_CONTESTS_TEST_SETS = ("public", "private", "generated")


def normalize_code_contests_row(
    row: dict, index: int, test_sets: tuple[str, ...] = ("public", "private")
) -> dict:
    """A CodeContests row; tests are the union (deduplicated by input) of ``test_sets``."""
    question = text_field(row, "description")
    tests: list[dict] = []
    for name in test_sets:
        if name not in CODE_CONTESTS_TEST_SETS:
            raise ValueError(
                f"test_sets: expected names from {CODE_CONTESTS_TEST_SETS}, got {name!r}"
            )
        block = row.get(f"{name}_tests") or {"input": [], "output": []}
        if not isinstance(block, dict):
            raise ValueError(f"{name}_tests: expected a dict with 'input' and 'output' lists")
        tests += _pair_tests(block.get("input"), block.get("output"), f"{name}_tests")
    solution = None
    sols = row.get("solutions") or {}
    for lang, code in zip(sols.get("language") or [], sols.get("solution") or []):
        if lang == _PYTHON3 and isinstance(code, str) and code.strip():
            solution = code
            break
    limit = row.get("time_limit") or {}
    return _stdio_row(
        "codecontests",
        f"codecontests/{row.get('name', index)}",
        question,
        tests,
        solution,
        difficulty=str(row.get("difficulty", "")),
        time_limit_s=float(limit.get("seconds") or 0) + float(limit.get("nanos") or 0) * 1e-9,
    )


def load_code_contests(
    split: str = "train",
    dataset_id: str = CODE_CONTESTS_ID,
    *,
    test_sets: tuple[str, ...] = ("public", "private"),
    limit: int | None = None,
    skip_malformed: bool = False,
) -> list[dict]:
    """CodeContests problems of ``split`` (``train``, ``valid``, ``test``); ``limit`` keeps the
    first ``limit`` usable ones."""
    test_sets = tuple(test_sets)
    return normalise_all(
        load_split(dataset_id, split),
        lambda r, i: normalize_code_contests_row(r, i, test_sets),
        what=f"codecontests[{split}]",
        skip_malformed=skip_malformed,
        limit=limit,
    )


class _PlainDataUnpickler(pickle.Unpickler):
    """Unpickles only built-in data (str, bytes, list, dict, numbers): every class or function
    lookup is refused, which is what makes loading a pickle from a dataset safe."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: plain data only")


def decode_lcb_tests(value: str) -> list[dict]:
    """LiveCodeBench test cases: a JSON list, or base64(zlib(pickle(JSON string)))."""
    value = (value or "").strip()
    if not value:
        return []
    if value.startswith("["):
        data = json.loads(value)
    else:
        try:
            raw = zlib.decompress(base64.b64decode(value, validate=False))
        except (binascii.Error, zlib.error) as err:
            raise ValueError(f"not JSON and not base64+zlib ({err})") from err
        data = _PlainDataUnpickler(io.BytesIO(raw)).load()
        if isinstance(data, bytes):
            data = data.decode("utf-8")
        if isinstance(data, str):
            data = json.loads(data)
    if not isinstance(data, list) or not all(isinstance(t, dict) for t in data):
        raise ValueError("expected a list of {input, output, testtype} objects")
    return data


def normalize_livecodebench_row(row: dict, index: int) -> dict:
    """A LiveCodeBench row (stdin tests only; functional/LeetCode rows raise ``SkipRow``)."""
    question = text_field(row, "question_content")
    cases = []
    for name in ("public_test_cases", "private_test_cases"):
        try:
            cases += decode_lcb_tests(row.get(name) or "")
        except (ValueError, pickle.UnpicklingError, EOFError) as err:
            raise ValueError(f"{name}: {err}") from err
    if any(c.get("testtype") == "functional" for c in cases):
        raise SkipRow("call-based")
    tests = _pair_tests(
        [c.get("input") for c in cases], [c.get("output") for c in cases], "test_cases"
    )
    return _stdio_row(
        "livecodebench",
        f"livecodebench/{row.get('question_id', index)}",
        question,
        tests,
        None,
        **_statement_extras(row),
        date=str(row.get("contest_date") or ""),
    )


def livecodebench_files(version: str) -> list[str]:
    """JSONL files of a release: ``release_vN`` holds ``test.jsonl``, ``test2.jsonl`` ..
    ``testN.jsonl``."""
    prefix = "release_v"
    if not version.startswith(prefix) or not version[len(prefix) :].isdigit():
        raise ValueError(f"livecodebench.version: expected 'release_vN', got {version!r}")
    n = int(version[len(prefix) :])
    if n < 1:
        raise ValueError(f"livecodebench.version: expected N >= 1, got {version!r}")
    return ["test.jsonl"] + [f"test{k}.jsonl" for k in range(2, n + 1)]


def load_livecodebench(
    dataset_id: str = LIVECODEBENCH_ID,
    *,
    version: str = "release_v6",
    limit: int | None = None,
    skip_malformed: bool = False,
) -> list[dict]:
    """LiveCodeBench stdin/stdout problems of a release (a benchmark: test data only), in file
    order; ``limit`` keeps the first ``limit`` usable ones."""
    return normalise_all(
        load_jsonl(dataset_id, livecodebench_files(version)),
        normalize_livecodebench_row,
        what="livecodebench",
        skip_malformed=skip_malformed,
        limit=limit,
    )


# --------------------------------------------------------------------------------------
# Splits of the stdin/stdout tasks
# --------------------------------------------------------------------------------------

STDIO_SOURCES = ("apps", "codecontests", "livecodebench")
HELD_OUT_EVAL = 32  # training-time eval rows cut from the end of a train-only source
APPS_TEST_ROWS = 500  # APPS test[:500], the set PettingLLMs reports on
SPLITS = ("train", "eval", "test")


def stdio_task_splits(
    source: str,
    dataset_id: str | None = None,
    *,
    limit: int | None = None,
    lcb_version: str = "release_v6",
    lcb_cutoff: str = "2024-08-01",
    skip_malformed: bool = False,
    splits: tuple[str, ...] = SPLITS,
) -> dict[str, list[dict]]:
    """``{split: rows}`` of one source, for each name in ``splits`` (eval is never the
    benchmark's test set); ``limit`` caps every split.

    - ``apps``: train = APPS train but its last 32 usable problems, which are eval;
      test = APPS test[:500].
    - ``codecontests``: the upstream train / valid / test splits.
    - ``livecodebench`` (no train split): split by contest date, as LiveCodeBench itself does
      to avoid contamination. Problems before ``lcb_cutoff`` train (the last 32 of them
      evaluate), problems on or after it test.

    With a ``limit`` the rows are the same as the first ``limit`` of the unlimited splits, but
    only the rows needed are normalised: the eval rows are found scanning back from the end,
    then train and test scan forward and stop at ``limit``.
    """
    if source not in STDIO_SOURCES:
        raise ConfigError(
            f"env.kwargs.source (code_contest.source): expected one of {STDIO_SOURCES}, "
            f"got {source!r}"
        )
    unknown = set(splits) - set(SPLITS)
    if unknown:
        raise ValueError(f"splits: expected names from {SPLITS}, got {sorted(unknown)}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit: expected >= 1 or None, got {limit}")
    kw = {"skip_malformed": skip_malformed}

    def cap(n: int) -> int:
        return n if limit is None else min(n, limit)

    out: dict[str, list[dict]] = {}
    if source == "codecontests":
        names = {"train": "train", "eval": "valid", "test": "test"}
        for name in splits:
            out[name] = load_code_contests(
                names[name], dataset_id or CODE_CONTESTS_ID, limit=limit, **kw
            )
        return out

    if source == "apps":
        ds_id = dataset_id or APPS_ID
        if "test" in splits:
            out["test"] = load_apps("test", ds_id, limit=cap(APPS_TEST_ROWS), **kw)
        if "train" not in splits and "eval" not in splits:
            return out
        rows = load_jsonl(ds_id, ["train.jsonl"])
        order = list(range(len(rows)))
        normalise, what = _apps_normaliser("train"), "apps[train]"
    else:  # livecodebench
        rows = load_jsonl(dataset_id or LIVECODEBENCH_ID, livecodebench_files(lcb_version))
        # Only the date column is read for every row; tests are decoded for rows we keep.
        column = rows["contest_date"] if "contest_date" in rows.column_names else [""] * len(rows)
        dates = [str(d or "") for d in column]
        by_date = sorted(range(len(rows)), key=dates.__getitem__)
        order = [i for i in by_date if dates[i] < lcb_cutoff]
        normalise, what = normalize_livecodebench_row, "livecodebench"
        if "test" in splits:
            new = [i for i in by_date if dates[i] >= lcb_cutoff]
            out["test"] = _rows(take_rows(_at(rows, new), normalise, what=what, limit=limit, **kw))
        if "train" not in splits and "eval" not in splits:
            return out

    # The last 32 usable rows of ``order`` evaluate; train is everything before them.
    held = take_rows(_at(rows, reversed(order)), normalise, what=what, limit=HELD_OUT_EVAL, **kw)
    held.reverse()
    if "eval" in splits:
        out["eval"] = _rows(held)[: cap(HELD_OUT_EVAL)]
    if "train" in splits:
        cut = order.index(held[0][0]) if held else len(order)
        out["train"] = _rows(
            take_rows(_at(rows, order[:cut]), normalise, what=what, limit=limit, **kw)
        )
    return out


def _at(rows: Any, indices: Iterable[int]) -> Iterable[tuple[int, dict]]:
    """``(i, rows[i])`` lazily, so a scan that stops early never reads the remaining rows."""
    return ((i, rows[i]) for i in indices)


def _rows(pairs: list[tuple[int, dict]]) -> list[dict]:
    return [row for _, row in pairs]
