"""Math task family: answer extraction, equivalence, loaders, arithmetic generator, env."""

from __future__ import annotations

import ast
import copy
import inspect
import json
import operator
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

import teamrl.tasks.math.equivalence as rmath
from teamrl.algorithms.at_grpo import agent_turn_rollout
from teamrl.generation import Generation
from teamrl.sandbox import ExecResult
from teamrl.tasks.math.answers import extract_answer, extract_boxed
from teamrl.tasks.math.data import (
    ArithmeticConfig,
    arithmetic_problems,
    load_aime2024,
    load_aime2025,
    load_gsm8k,
    load_olympiadbench,
)
from teamrl.tasks.math.env import (
    MathEnv,
    MathEnvConfig,
    SandboxRunner,
    build_math_single_task,
    build_math_task,
    extract_code,
    program_answer,
)
from teamrl.tasks.math.equivalence import check_equivalence, is_equivalent
from teamrl.tasks.math.guards import MathCheckConfig
from teamrl.tasks.registry import make_task

# --------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{\frac{1}{2}} done", r"\frac{1}{2}"),  # nested braces
        (r"\boxed{1} then \boxed{2^{3}}", "2^{3}"),  # several boxes: the last
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),  # escaped braces do not count
        (r"\fbox{7}", "7"),
        (r"\boxed 5 is it", "5"),
        (r"\boxed{3} and a truncated \boxed{4", "3"),  # the last complete box
        ("no box here, 12", None),
        ("", None),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"The answer is 5, i.e. \boxed{6}", "6"),  # boxed wins
        ("Natalia sold 72 clips.\n#### 1,072", "1,072"),
        ("So the final answer is $3/4$.", "3/4"),
        ("Answer: 17", "17"),
        ("3 apples and -7.5 pears", "-7.5"),  # last number
        ("nothing numeric", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extraction_is_linear_on_many_unclosed_boxes(monkeypatch):
    """No wall clock (speed is for benchmarks): count the work. Each balanced-brace scan may
    stop where the last unclosed box began, so the spans scanned never overlap and their total
    is at most the text's length: linear, even for ``\\boxed{`` repeated 20,000 times."""
    import teamrl.tasks.math.answers as answers

    scanned = []
    real = answers.brace_group

    def counting(text, start, limit=None):
        scanned.append((limit if limit is not None else len(text)) - start)
        return real(text, start, limit)

    monkeypatch.setattr(answers, "brace_group", counting)
    text = r"\boxed{1} " + r"\boxed{" * 20_000
    assert extract_boxed(text) == "1"
    assert len(scanned) == 20_001 and sum(scanned) <= len(text)
    assert extract_answer("x" * 100_000 + text) == "1"


# --------------------------------------------------------------------------------------
# Equivalence
# --------------------------------------------------------------------------------------

# (prediction, gold, equivalent) checked by hand. Percent choice: 50\% reads as 50 or as 0.5.
CASES = [
    ("0.5", r"\frac{1}{2}", True),
    ("1,000", "1000", True),
    (r"50\%", "0.5", True),
    (r"50\%", "50", True),
    ("0.5", r"50\%", True),
    (r"\dfrac{3}{4}", "0.75", True),
    (r"2\sqrt{3}", r"\sqrt{12}", True),
    ("x+1", "1+x", True),
    (r"\$18", "18", True),
    ("2", "3", False),
    ("-4", "4", False),
    (r"\frac{1}{3}", "0.3", False),
]


@pytest.mark.parametrize("pred, gold, expected", CASES)
def test_equivalence_math_verify_path(pred, gold, expected):
    verdict = check_equivalence(pred, gold)
    assert (verdict.equivalent, verdict.method) == (expected, "math_verify")
    assert is_equivalent(pred, gold) is expected


@pytest.mark.parametrize("pred, gold, expected", CASES)
def test_equivalence_sympy_fallback_path(pred, gold, expected):
    verdict = check_equivalence(pred, gold, backend="sympy")
    assert (verdict.equivalent, verdict.method) == (expected, "sympy")


def test_garbage_is_not_equivalent_on_either_path():
    assert check_equivalence("qwerty uiop", "3") == rmath.Verdict(False, "math_verify")
    verdict = check_equivalence("qwerty uiop", "3", backend="sympy")
    assert (verdict.equivalent, verdict.method) == (False, "string")
    assert check_equivalence(None, "3").method == "empty"
    assert check_equivalence("", "3").equivalent is False
    with pytest.raises(ValueError, match="gold"):
        check_equivalence("3", "")


def test_sympy_tolerance_is_relative_to_max_one_and_gold():
    # |a - b| <= 1e-6 * max(1, |gold|)
    assert is_equivalent("0.3333333", r"\frac{1}{3}", backend="sympy")  # 3.3e-8
    assert not is_equivalent("0.333", r"\frac{1}{3}", backend="sympy")  # 3.3e-4
    assert is_equivalent("1000000.5", "1000000", backend="sympy")  # 0.5 <= 1.0
    assert not is_equivalent("1000002", "1000000", backend="sympy")  # 2 > 1.0
    assert is_equivalent("(1, 2)", "(1,2)", backend="sympy")
    assert not is_equivalent("(2, 1)", "(1,2)", backend="sympy")  # tuples keep order


def test_sympy_fallback_when_math_verify_raises_or_is_missing(monkeypatch):
    def boom(pred, gold):
        raise RuntimeError("parser crashed")

    monkeypatch.setattr(rmath, "_math_verify_compare", boom)
    verdict = check_equivalence(r"\frac{1}{2}", "0.5")
    assert (verdict.equivalent, verdict.method) == (True, "sympy")
    assert "math-verify raised RuntimeError: parser crashed" in verdict.detail

    monkeypatch.setattr(rmath, "math_verify_available", lambda: False)
    verdict = check_equivalence("3", "4")
    assert (verdict.equivalent, verdict.method) == (False, "sympy")
    assert "not installed" in verdict.detail
    with pytest.raises(ImportError, match="math-verify"):
        check_equivalence("3", "3", backend="math_verify")


@pytest.mark.parametrize(
    "pred",
    [
        "9**9**9",
        "9^{9^{9}}",
        "10^{10^{10}}",
        "2^{99999999}",
        "(10^{6})!",
        "100000!",
        "(2^{9999})^{9999}",  # (a^m)^n = a^(m n)
        "1" * 100_000,
        "(" * 190 + "1" + ")" * 190,  # short enough, but nested too deep
    ],
)
def test_pathological_predictions_are_refused_quickly(pred):
    # "refused" means the screen stopped it before any evaluation; the clock only guards
    # against a hang (speed itself is not a unit-test matter).
    start = time.perf_counter()
    verdict = check_equivalence(pred, "5")
    assert (verdict.equivalent, verdict.method) == (False, "refused")
    assert time.perf_counter() - start < 10


def test_symbolic_towers_are_not_refused():
    assert is_equivalent("e^{-x^2}", "e^{-x^{2}}")


def test_gold_is_screened_only_on_request():
    assert check_equivalence("5", "9^{9^{9}}", screen_gold=True).method == "refused"


def _spin(pred, gold, config):
    while True:
        pass


@pytest.mark.parametrize("in_thread", [False, True])  # SIGALRM / watchdog thread
def test_time_box_stops_a_slow_check(monkeypatch, in_thread):
    monkeypatch.setattr(rmath, "_sympy_compare", _spin)
    config = MathCheckConfig(time_limit=0.2)
    start = time.perf_counter()
    if in_thread:
        with ThreadPoolExecutor(1) as pool:
            verdict = pool.submit(check_equivalence, "1", "1", backend="sympy", config=config)
            verdict = verdict.result(timeout=10)
    else:
        verdict = check_equivalence("1", "1", backend="sympy", config=config)
    assert time.perf_counter() - start < 2.0
    assert (verdict.equivalent, verdict.method) == (False, "timeout")
    monkeypatch.undo()  # the thread is usable again and the box leaves no pending exception
    assert check_equivalence("1", "1.0", backend="sympy", config=config).method == "sympy"


# --------------------------------------------------------------------------------------
# Loaders (fixtures in the upstream layouts, written here)
# --------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _private_datasets_cache(tmp_path, monkeypatch):
    """Keep the datasets cache of every load in this test's own folder."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _write_parquet(path: Path, rows: list[dict]) -> None:
    import datasets

    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(rows).to_parquet(str(path))


def _readme(config: str, splits: dict[str, str]) -> str:
    files = "".join(f"  - split: {s}\n    path: {p}\n" for s, p in splits.items())
    return f"---\nconfigs:\n- config_name: {config}\n  data_files:\n{files}---\n"


GSM8K_TRAIN = [
    {"question": "Ann has 3 bags of 4 pens. How many pens?", "answer": "3*4=<<3*4=12>>12\n#### 12"},
    {"question": "A car costs 1,000 and 72 more.", "answer": "1000+72=1072\n#### 1,072"},
    {"question": "Half of 10?", "answer": "10/2=5\n#### 5"},
]
GSM8K_TEST = [{"question": "Two plus two?", "answer": "2+2=4\n#### 4"}]


@pytest.fixture()
def gsm8k_dir(tmp_path):
    root = tmp_path / "gsm8k"
    # openai/gsm8k: config folders with a README that declares them
    (root).mkdir()
    (root / "README.md").write_text(
        _readme("main", {"train": "main/train-*", "test": "main/test-*"})
    )
    _write_parquet(root / "main" / "train-00000-of-00001.parquet", GSM8K_TRAIN)
    _write_parquet(root / "main" / "test-00000-of-00001.parquet", GSM8K_TEST)
    return str(root)


def test_load_gsm8k(gsm8k_dir, tmp_path):
    rows = load_gsm8k("train", dataset_id=gsm8k_dir, cache_dir=str(tmp_path / "c"))
    assert rows == [
        {
            "question": GSM8K_TRAIN[0]["question"],
            "answer": "12",
            "source": "gsm8k",
            "id": "gsm8k-train-0",
        },
        {
            "question": GSM8K_TRAIN[1]["question"],
            "answer": "1072",
            "source": "gsm8k",
            "id": "gsm8k-train-1",
        },
        {"question": "Half of 10?", "answer": "5", "source": "gsm8k", "id": "gsm8k-train-2"},
    ]
    test = load_gsm8k("test", dataset_id=gsm8k_dir, limit=1, cache_dir=str(tmp_path / "c"))
    assert [r["answer"] for r in test] == ["4"]
    assert len(load_gsm8k("train", dataset_id=gsm8k_dir, limit=2)) == 2


def test_load_gsm8k_malformed_rows(tmp_path):
    bad = tmp_path / "bad"
    _write_jsonl(bad / "train.jsonl", [GSM8K_TRAIN[0], {"question": "q", "answer": "no marker"}])
    with pytest.raises(ValueError, match=r"gsm8k row 1: field 'answer' has no '####"):
        load_gsm8k("train", dataset_id=str(bad), name=None)
    missing = tmp_path / "missing"
    _write_jsonl(missing / "train.jsonl", [{"problem": "q", "answer": "#### 1"}])
    with pytest.raises(ValueError, match=r"gsm8k row 0: missing field 'question'"):
        load_gsm8k("train", dataset_id=str(missing), name=None)
    with pytest.raises(ValueError, match="limit"):
        load_gsm8k("train", dataset_id=str(missing), name=None, limit=-1)


AIME24 = [
    {
        "id": 60,
        "problem": "Find x.",
        "solution": "...",
        "answer": "033",
        "url": "u",
        "year": "2024",
    },
    {
        "id": 61,
        "problem": "Find y.",
        "solution": "...",
        "answer": "204",
        "url": "u",
        "year": "2024",
    },
]


def test_load_aime2024(tmp_path):
    root = tmp_path / "aime24"  # HuggingFaceH4/aime_2024: data/train-*.parquet
    _write_parquet(root / "data" / "train-00000-of-00001.parquet", AIME24)
    rows = load_aime2024(dataset_id=str(root))
    assert rows == [
        {"question": "Find x.", "answer": "33", "source": "aime2024", "id": 60},
        {"question": "Find y.", "answer": "204", "source": "aime2024", "id": 61},
    ]


# Maxwell-Jia/AIME_2024, the set the reference evaluates on: one parquet file at the repo
# root, capitalised columns, integer answers.
AIME24_MAXWELL = [
    {"ID": "2024-I-1", "Problem": "Find x.", "Solution": "...", "Answer": 33},
    {"ID": "2024-II-15", "Problem": "Find y.", "Solution": "...", "Answer": 204},
]


def test_load_aime2024_reference_format(tmp_path):
    assert inspect.signature(load_aime2024).parameters["dataset_id"].default == (
        "Maxwell-Jia/AIME_2024"
    )
    root = tmp_path / "maxwell"
    _write_parquet(root / "aime_2024_problems.parquet", AIME24_MAXWELL)
    assert load_aime2024(dataset_id=str(root)) == [
        {"question": "Find x.", "answer": "33", "source": "aime2024", "id": "2024-I-1"},
        {"question": "Find y.", "answer": "204", "source": "aime2024", "id": "2024-II-15"},
    ]
    bad = tmp_path / "bad"
    _write_parquet(bad / "aime_2024_problems.parquet", [{"ID": "x", "Problem": "q", "Sol": 1}])
    with pytest.raises(ValueError, match=r"aime2024 row 0: missing field 'answer' or 'Answer'"):
        load_aime2024(dataset_id=str(bad))


def test_load_aime2025_and_malformed_row(tmp_path):
    root = tmp_path / "aime25"  # yentinglin/aime_2025: problem, answer, id, url, year
    good = {"id": "I-1", "problem": "Sum of bases?", "answer": "70", "url": "u", "year": 2025}
    _write_jsonl(root / "train.jsonl", [good])
    assert load_aime2025(dataset_id=str(root)) == [
        {"question": "Sum of bases?", "answer": "70", "source": "aime2025", "id": "I-1"}
    ]
    bad_root = tmp_path / "aime25bad"
    _write_jsonl(bad_root / "train.jsonl", [good, dict(good, id="I-2", answer="  ")])
    with pytest.raises(ValueError, match=r"aime2025 row 1: field 'answer' is empty"):
        load_aime2025(dataset_id=str(bad_root))


OLYMPIAD = [
    {
        "id": 1606,
        "question": "Compute the ratio.",
        "solution": ["It is one half."],
        "final_answer": ["$\\frac{1}{2}$"],
        "is_multiple_answer": False,
        "unit": None,
        "answer_type": "Numerical",
        "subfield": "Algebra",
    },
    {
        "id": 1607,
        "question": "Find all n.",
        "solution": ["..."],
        "final_answer": ["3", "5"],
        "is_multiple_answer": True,
        "unit": None,
        "answer_type": "Numerical",
        "subfield": "Number Theory",
    },
]


def _olympiad_dir(root: Path, rows: list[dict]) -> str:
    # Hothan/OlympiadBench: one folder per config, declared in the README
    root.mkdir(parents=True)
    (root / "README.md").write_text(
        _readme("OE_TO_maths_en_COMP", {"train": "OlympiadBench/OE_TO_maths_en_COMP/*"})
    )
    _write_parquet(root / "OlympiadBench" / "OE_TO_maths_en_COMP" / "part.parquet", rows)
    return str(root)


def test_load_olympiadbench(tmp_path):
    rows = load_olympiadbench(dataset_id=_olympiad_dir(tmp_path / "ob", OLYMPIAD))
    assert rows == [
        {
            "question": "Compute the ratio.",
            "answer": r"\frac{1}{2}",
            "source": "olympiadbench",
            "id": 1606,
        },
        {"question": "Find all n.", "answer": "3, 5", "source": "olympiadbench", "id": 1607},
    ]


def test_load_olympiadbench_malformed_row(tmp_path):
    bad = [OLYMPIAD[0], dict(OLYMPIAD[1], final_answer=[])]
    with pytest.raises(ValueError, match=r"olympiadbench row 1: field 'final_answer'"):
        load_olympiadbench(dataset_id=_olympiad_dir(tmp_path / "ob", bad))


# --------------------------------------------------------------------------------------
# Procedural arithmetic
# --------------------------------------------------------------------------------------

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _evaluate(node):
    """An independent evaluator: exact integers, Python's precedence from its parser."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        num, den = _evaluate(node.left), _evaluate(node.right)
        assert num % den == 0, "division must be exact"
        return num // den
    return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))


def test_arithmetic_is_deterministic_and_seeded():
    first = arithmetic_problems("train", 50, seed=3)
    assert first == arithmetic_problems("train", 50, seed=3)
    assert first != arithmetic_problems("train", 50, seed=4)
    assert {r["source"] for r in first} == {"arithmetic"}


def test_arithmetic_answers_are_correct():
    rows = arithmetic_problems("train", 300, seed=0)
    assert {r["kind"] for r in rows} == {"word", "expression"}
    for row in rows:
        expected = _evaluate(ast.parse(row["expression"], mode="eval"))
        assert row["answer"] == str(expected), row
        if row["kind"] == "expression":  # the question shows the same expression
            shown = row["question"].removeprefix("Compute ").removesuffix(".")
            assert shown.replace("×", "*").replace("÷", "/") == row["expression"]


def test_arithmetic_word_problems_read_correctly():
    """Recompute three templates from the question text alone."""
    checks = {
        r"has (\d+) boxes with (\d+) \w+ in each box and gives (\d+)": lambda a, b, c: a * b - c,
        r"buys (\d+) notebooks that cost (\d+) dollars each and pays with (\d+)": lambda a, b, c: (
            c - a * b
        ),
        r"bakes (\d+) trays of (\d+) cookies each and sells (\d+) cookies\. The rest are "
        r"packed into bags of (\d+)": lambda a, b, c, d: (a * b - c) // d,
    }
    seen = set()
    for row in arithmetic_problems("train", 400, seed=1):
        for pattern, fn in checks.items():
            match = re.search(pattern, row["question"])
            if match:
                seen.add(pattern)
                assert row["answer"] == str(fn(*map(int, match.groups()))), row
    assert seen == set(checks)


def test_arithmetic_splits_are_disjoint():
    splits = {
        s: arithmetic_problems(s, n, seed=0)
        for s, n in (("train", 400), ("eval", 80), ("test", 80))
    }
    questions = {s: {r["question"] for r in rows} for s, rows in splits.items()}
    assert [len(q) for q in questions.values()] == [400, 80, 80]  # distinct within a split
    assert not questions["train"] & questions["eval"]
    assert not questions["train"] & questions["test"]
    assert not questions["eval"] & questions["test"]


def test_arithmetic_difficulty_knobs():
    cfg = ArithmeticConfig(min_ops=3, max_ops=3, max_value=5, word_ratio=0.0)
    rows = arithmetic_problems("eval", 40, seed=0, config=cfg)
    assert {r["n_ops"] for r in rows} == {3}
    assert {r["kind"] for r in rows} == {"expression"}
    assert max(int(n) for r in rows for n in re.findall(r"\d+", r["expression"])) <= 5
    tiny = ArithmeticConfig(min_ops=1, max_ops=1, max_value=2, word_ratio=0.0)
    with pytest.raises(ValueError, match="found only"):
        arithmetic_problems("train", 50, config=tiny)
    with pytest.raises(ValueError, match="min_ops"):
        ArithmeticConfig(min_ops=2, max_ops=1)
    with pytest.raises(ValueError, match="split"):
        arithmetic_problems("validation", 1)


# --------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------

EXAMPLE = {"question": "Compute 6 × 7.", "answer": "42", "source": "arithmetic", "id": "x"}


def _ok(stdout: str) -> ExecResult:
    return ExecResult(stdout, "", 0, False, None, 0.01)


class FakeRunner:
    """Maps program text to a canned ExecResult and records the programs it was given."""

    def __init__(self, results: dict[str, ExecResult]):
        self.results, self.calls = results, []

    def __call__(self, code: str) -> ExecResult:
        self.calls.append(code)
        return self.results[code]


def _fence(code: str) -> str:
    return f"Here is my program:\n```python\n{code}\n```"


RESULTS = {
    "print(6 * 8)": _ok("48\n"),
    "print(6 * 7)": _ok("working...\nThe answer is 42\n"),
    "print(1 / 0)": ExecResult("", "Traceback ...\nZeroDivisionError", 1, False, None, 0.02),
    "while True: pass": ExecResult("", "", None, True, "wall_time", 10.0),
}


def test_extract_code_and_program_answer():
    assert extract_code("a\n```python\nx = 1\n```\nb\n```py\nprint(2)\n```") == "print(2)"
    assert extract_code("```\nprint(3)\n```") == "print(3)"
    assert extract_code("```python\nprint(4)") is None  # unclosed
    assert program_answer("1\n2\n\n") == "2"
    assert program_answer("Answer: 7") == "7"
    assert program_answer("\\boxed{9}\ndone") == "9"
    assert program_answer("  \n") is None


def test_sequential_env_contract():
    runner = FakeRunner(RESULTS)
    env = MathEnv(MathEnvConfig(mode="sequential", max_turns=3, alpha=0.5), runner=runner)
    assert env.turn_order == ["tool", "reasoner"]
    obs = env.reset(EXAMPLE)
    assert set(obs) == {"tool", "reasoner"} and all("Compute 6 × 7." in o for o in obs.values())
    with pytest.raises(ValueError, match="expected actions for \\['tool'\\]"):
        env.step({"reasoner": r"\boxed{42}"})

    # turn 1, tool: runs and prints 48 (wrong) -> local 0; its team reward is not known yet,
    # so the step is pending (the AT-GRPO rollout scores it by finishing the turn on a copy)
    step = env.step({"tool": _fence("print(6 * 8)")})
    assert runner.calls == ["print(6 * 8)"]
    assert (step.reward, step.local_rewards, step.done) == (0.0, {"tool": 0.0}, False)
    assert step.pending is True
    assert step.reward_components == {
        "tool/local": 0.0,
        "tool/exec_ok": 1.0,
        "tool/correct": 0.0,
    }
    assert "print(6 * 8)" in step.observations["reasoner"]  # sees the tool's program...
    assert "48" in step.observations["reasoner"]  # ...and its output, in the same turn
    assert "print(6 * 8)" not in step.observations["tool"]

    # turn 1, reasoner: correct -> local 1, team 1; answers differ -> no stop (stop_on agree)
    step = env.step({"reasoner": r"6 times 7 is \boxed{42}."})
    # the closing step carries both agents' turn-local terms (the tool's for a lookahead)
    assert (step.reward, step.local_rewards) == (1.0, {"tool": 0.0, "reasoner": 1.0})
    assert step.pending is False
    assert step.terminations == {"tool": False, "reasoner": False}
    assert step.truncations == {"tool": False, "reasoner": False}
    assert step.success is True
    assert step.infos["answers"] == {"tool": "48", "reasoner": "42"}
    assert step.infos["turn_local_rewards"] == {"tool": 0.0, "reasoner": 1.0}
    assert step.infos["mixed_rewards"] == {"tool": 0.5, "reasoner": 1.5}  # 0.5 * 1 + local
    assert step.reward_components == {
        "reasoner/local": 1.0,
        "reasoner/correct": 1.0,
        "reasoner/answered": 1.0,
        "team": 1.0,
        "agree": 0.0,
    }
    for agent in ("tool", "reasoner"):  # feedback: both agents' previous answers
        text = step.observations[agent]
        assert "Program's answer: 48" in text and "Reasoner's answer: 42" in text

    # turn 2: the tool prints "The answer is 42" -> +1; both agree -> terminated
    step = env.step({"tool": _fence("print(6 * 7)")})
    assert step.local_rewards == {"tool": 1.0}
    step = env.step({"reasoner": r"\boxed{42}"})
    assert step.terminations == {"tool": True, "reasoner": True}
    assert step.truncations == {"tool": False, "reasoner": False}
    assert (step.reward, step.done, step.infos["turn"]) == (1.0, True, 2)
    assert step.reward_components["agree"] == 1.0
    with pytest.raises(RuntimeError, match="over"):
        env.step({"tool": _fence("print(6 * 7)")})


def test_simultaneous_env_contract():
    runner = FakeRunner(RESULTS)
    env = MathEnv(MathEnvConfig(mode="simultaneous", max_turns=2), runner=runner)
    assert not hasattr(env, "turn_order")
    env.reset(EXAMPLE)
    with pytest.raises(ValueError, match="expected actions"):
        env.step({"tool": _fence("print(6 * 8)")})

    # turn 1: the program crashes (-1), the reasoner is wrong (0), team 0
    step = env.step({"tool": _fence("print(1 / 0)"), "reasoner": r"\boxed{41}"})
    assert (step.reward, step.local_rewards) == (0.0, {"tool": -1.0, "reasoner": 0.0})
    assert step.infos["tool_status"] == "failed (exit code 1)"
    assert "ZeroDivisionError" in step.observations["reasoner"]  # shown from the next turn
    assert step.success is False and not step.done

    # turn 2: no code block (-1, runner not called)
    step = env.step({"tool": "It is 42.", "reasoner": r"The answer is \boxed{42}."})
    assert len(runner.calls) == 1
    assert (step.reward, step.local_rewards) == (1.0, {"tool": -1.0, "reasoner": 1.0})
    assert step.reward_components == {
        "tool/local": -1.0,
        "tool/exec_ok": 0.0,
        "tool/correct": 0.0,
        "reasoner/local": 1.0,
        "reasoner/correct": 1.0,
        "reasoner/answered": 1.0,
        "team": 1.0,
        "agree": 0.0,
    }
    assert step.terminations == {"tool": False, "reasoner": False}
    assert step.truncations == {"tool": True, "reasoner": True}  # max_turns reached
    assert step.success is True


def test_stop_on_correct_timeouts_and_require_boxed():
    assert MathEnvConfig().require_boxed is True  # the prompts ask for \boxed{}
    env = MathEnv(MathEnvConfig(mode="simultaneous", stop_on="correct"), runner=FakeRunner(RESULTS))
    env.reset(EXAMPLE)
    step = env.step({"tool": _fence("while True: pass"), "reasoner": "The answer is 42."})
    assert step.local_rewards == {"tool": -1.0, "reasoner": 0.0}  # unboxed does not count
    assert step.infos["answers"]["reasoner"] is None
    assert step.infos["tool_status"] == "timed out" and not step.done
    step = env.step({"tool": _fence("print(6 * 8)"), "reasoner": r"\boxed{42}"})
    assert step.terminations == {"tool": True, "reasoner": True}  # correct, though disagreeing


@pytest.mark.parametrize(
    "completion", ["The answer is 42.", "6 times 7\n#### 42", "so it is 40 + 2 = 42"]
)
def test_require_boxed_false_accepts_text_answers(completion):
    runner = FakeRunner(RESULTS)
    for require_boxed, expected in ((True, 0.0), (False, 1.0)):
        env = MathEnv(
            MathEnvConfig(mode="simultaneous", require_boxed=require_boxed), runner=runner
        )
        env.reset(EXAMPLE)
        step = env.step({"tool": _fence("print(6 * 8)"), "reasoner": completion})
        assert (step.reward, step.local_rewards["reasoner"]) == (expected, expected)


def test_pending_tool_step_lets_a_lookahead_pay_the_team_reward():
    """The rollout's lookahead contract (teamrl.algorithms.at_grpo._lookahead): a pending step is
    scored by finishing the turn on a copy; the tool candidate then earns alpha * (team reward
    of the closing step) + the closing step's local_rewards["tool"], as the reference pays
    the tool its own result plus "the reasoner is correct"."""
    alpha = 0.5
    env = MathEnv(MathEnvConfig(alpha=alpha), runner=FakeRunner(RESULTS))
    env.reset(EXAMPLE)
    scores = {}
    for code, reasoner in (("print(6 * 8)", r"\boxed{42}"), ("print(1 / 0)", r"\boxed{41}")):
        branch = copy.deepcopy(env)
        tool_step = branch.step({"tool": _fence(code)})
        assert tool_step.pending is True and tool_step.reward == 0.0
        own_local = tool_step.local_rewards["tool"]
        closing = branch.step({"reasoner": reasoner})  # the lookahead's one reasoner sample
        assert closing.local_rewards["tool"] == own_local
        assert closing.infos["mixed_rewards"]["tool"] == alpha * closing.reward + own_local
        scores[code] = alpha * closing.reward + closing.local_rewards["tool"]
    # wrong program but the reasoner is right: 0.5 * 1 + 0; crash and reasoner wrong: 0 - 1
    assert scores == {"print(6 * 8)": 0.5, "print(1 / 0)": -1.0}


class _ScriptedMathTeam:
    """Candidate k of an agent is ``texts[agent][k]`` (the rollout's Team interface)."""

    def __init__(self, texts: dict[str, list[str]]):
        self.texts = texts
        self.agents = {a: SimpleNamespace(temperature=1.0) for a in texts}
        self.policy_of = {a: a for a in texts}

    def encode_prompt(self, agent, observation, example):
        return [0]

    def request(self, agent, ids, n, greedy=False):
        return (agent, n)

    def generate(self, jobs, ignore_eos=False):
        return [[Generation([0], [k], [0.0], False) for k in range(n)] for _, (_, n) in jobs]

    def decode(self, agent, ids):
        return self.texts[agent][ids[0]]


def test_at_grpo_pays_tool_candidates_the_team_reward():
    programs = ["print(6 * 8)", "print(1 / 0)", "print(6 * 7)"]  # local 0, -1, +1
    team = _ScriptedMathTeam(
        {"tool": [_fence(p) for p in programs], "reasoner": [r"\boxed{42}"] * 3}
    )
    out = agent_turn_rollout(
        team,
        lambda: MathEnv(MathEnvConfig(max_turns=1), runner=FakeRunner(RESULTS)),
        [(0, EXAMPLE)],
        num_generations=3,
        max_turns=1,
        alpha=1.0,
    )
    tool = [s for s in out.samples if s.agent == "tool"]
    # the lookahead's reasoner is right on every branch: team 1 + each program's local term
    assert [s.reward for s in tool] == [1.0, 0.0, 2.0]
    assert [s.local_reward for s in tool] == [0.0, -1.0, 1.0]


def test_clone_mid_turn_gives_independent_branches():
    env = MathEnv(MathEnvConfig(max_turns=2), runner=FakeRunner(RESULTS))
    env.reset(EXAMPLE)
    env.step({"tool": _fence("print(6 * 7)")})
    branch = copy.deepcopy(env)
    right = branch.step({"reasoner": r"\boxed{42}"})
    wrong = env.step({"reasoner": r"\boxed{40}"})
    assert (right.reward, right.done) == (1.0, True)
    assert (wrong.reward, wrong.done, wrong.infos["answers"]["reasoner"]) == (0.0, False, "40")


def test_reset_validates_the_example():
    env = MathEnv(runner=FakeRunner({}))
    with pytest.raises(ValueError, match="'answer'"):
        env.reset({"question": "q"})
    with pytest.raises(ValueError, match="math.mode"):
        MathEnvConfig(mode="parallel")


def test_math_task_builders():
    runner = FakeRunner(RESULTS)
    task = build_math_task(source="arithmetic", n_train=20, n_eval=5, n_test=6, runner=runner)
    assert (len(task.train), len(task.eval), len(task.test)) == (20, 5, 6)
    assert set(task.agents) == {"tool", "reasoner"}
    env = task.make_env()
    assert env.turn_order == ["tool", "reasoner"] and env.runner is runner

    single = build_math_single_task(source="arithmetic", n_train=4, n_eval=2, n_test=2)
    solo = single.make_env()
    assert solo.agents == ["reasoner"] and not hasattr(solo, "turn_order")
    assert set(single.agents) == {"reasoner"}
    solo.reset(EXAMPLE)
    step = solo.step({"reasoner": r"\boxed{42}"})
    assert (step.reward, step.local_rewards, step.truncations) == (
        1.0,
        {"reasoner": 1.0},
        {"reasoner": True},
    )

    task = make_task("math", source="arithmetic", n_train=3, n_eval=1, n_test=1, alpha=0.25)
    assert task.make_env().config.alpha == 0.25
    with pytest.raises(ValueError, match="unexpected keyword"):
        make_task("math", source="arithmetic", n_train=3, bogus=1)


def test_math_task_on_upstream_fixtures(gsm8k_dir, tmp_path):
    task = build_math_task(source="gsm8k", dataset_id=gsm8k_dir, eval_size=1)
    assert [r["answer"] for r in task.train] == ["12", "1072"]
    assert [r["answer"] for r in task.eval] == ["5"]
    assert [r["answer"] for r in task.test] == ["4"]
    root = tmp_path / "aime24"
    _write_parquet(root / "aime_2024_problems.parquet", AIME24_MAXWELL)
    bench = build_math_task(
        source="aime2024", dataset_id=str(root), train_source="arithmetic", n_train=5, n_eval=2
    )
    assert [r["answer"] for r in bench.test] == ["33", "204"]
    assert {r["source"] for r in bench.train} == {"arithmetic"} and len(bench.eval) == 2


def test_tool_with_the_real_sandbox():
    env = MathEnv(MathEnvConfig(limits={"wall_seconds": 20}))
    assert isinstance(env.runner, SandboxRunner)
    env.reset(EXAMPLE)
    step = env.step({"tool": _fence("from fractions import Fraction\nprint(Fraction(84, 2))")})
    assert step.local_rewards == {"tool": 1.0}
    assert step.infos["tool_status"] == "ok"
    env.reset(EXAMPLE)
    step = env.step({"tool": _fence("raise SystemExit(3)")})
    assert (step.local_rewards, step.infos["tool_status"]) == (
        {"tool": -1.0},
        "failed (exit code 3)",
    )


def test_math_steps_set_the_protocol_fields():
    env = MathEnv(runner=FakeRunner(RESULTS))
    env.reset(EXAMPLE)
    tool = env.step({"tool": _fence("print(6 * 8)")})
    assert tool.pending is True and tool.success is False
    assert tool.reward_components == {"tool/local": 0.0, "tool/exec_ok": 1.0, "tool/correct": 0.0}
    closing = env.step({"reasoner": r"so \boxed{42}"})
    assert closing.pending is False and closing.success is True
    assert closing.reward_components["team"] == 1.0
