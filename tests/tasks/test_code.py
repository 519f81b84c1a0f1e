"""Coding tasks: the leveled aux/main reward, feedback, loaders, stdin/stdout judging, envs.

Model-written code runs in the real sandbox (``teamrl.sandbox``) for the key cases;
fake runners (which never execute anything) check the plumbing around it.
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from collections import OrderedDict

import pytest
from helpers.coding import ENTRY, HE_ROW, MBPP_ROW, PROMPT, TEST, _cc_row, _write_jsonl

from teamrl.envs.base import clone
from teamrl.sandbox import ExecResult
from teamrl.tasks.coding.code_text import extract_code, find_function
from teamrl.tasks.coding.coder_tester import CodeContestConfig, CoderTesterEnv
from teamrl.tasks.coding.contest_data import (
    decode_lcb_tests,
    load_apps,
    load_code_contests,
    load_livecodebench,
)
from teamrl.tasks.coding.data import (
    function_task_splits,
    load_coophumaneval,
    load_humaneval,
    load_mbpp,
)
from teamrl.tasks.coding.feedback import feedback
from teamrl.tasks.coding.harness import check_units
from teamrl.tasks.coding.helper_main import AuxMainCodingEnv
from teamrl.tasks.coding.reward import (
    AuxMainJob,
    LeveledRewardConfig,
    is_thin_wrapper,
    leveled_reward,
    leveled_rewards,
)
from teamrl.tasks.coding.stdio import (
    judge_tester,
    outputs_match,
    parse_test_cases,
    stdio_pass_ratio,
)
from teamrl.tasks.registry import make_task, registered_tasks

# --------------------------------------------------------------------------------------
# A hand-made function task: 4 test units (``assert True`` is not one)
# --------------------------------------------------------------------------------------

ROW = {"task_id": "toy/0", "prompt": PROMPT, "test": TEST, "entry_point": ENTRY}

AUX = "def aux(x):\n    return x * x\n"
MAIN_FULL = (
    "def sum_of_squares(xs):\n    total = 0\n    for x in xs:\n        total += aux(x)\n"
    "    return total\n"
)
# sum(xs)**2 passes [] (0) and [3] (9), fails [1, 2] (9 != 5) and [-1, 1] (0 != 2).
MAIN_HALF = "def sum_of_squares(xs):\n    return sum(xs) ** 2\n"
AUX_WHOLE = "def aux(xs):\n    return sum(x * x for x in xs)\n"
MAIN_THIN = "def sum_of_squares(xs):\n    return aux(xs)\n"
MAIN_DISCARD = (
    "def sum_of_squares(xs):\n    total = 0\n    for x in xs:\n        aux(x)\n"
    "        total += x * x\n    return total\n"
)
MAIN_SYNTAX = "def sum_of_squares(xs):\n    total = 0\n    return total +\n"


def _score(helper: str, main: str, **kw) -> object:
    return leveled_reward(helper, main, prompt=PROMPT, test=TEST, entry_point=ENTRY, **kw)


def _never_run(codes, stdins, timeout_s):
    raise AssertionError("no program should run for this case")


# --------------------------------------------------------------------------------------
# Leveled reward, real sandbox
# --------------------------------------------------------------------------------------


def test_full_marks_is_4():
    r = _score(AUX, "```python\n" + MAIN_FULL + "```")
    assert (r.definitions, r.syntax, r.tests, r.cooperation) == (1.0, 0.5, 1.0, 1.5)
    assert r.score == pytest.approx(4.0)
    assert r.passed == 4 and len(r.units) == 4 and r.all_passed
    shifted = _score(AUX, MAIN_FULL, config=LeveledRewardConfig(reward_shift=-4.0))
    assert shifted.reward == pytest.approx(0.0)
    assert shifted.components()["score"] == pytest.approx(4.0)


def test_missing_main_stops_at_definitions():
    r = _score("I cannot help with that.", "def helper(xs):\n    return 0\n", runner=_never_run)
    assert r.score == 0.0 and r.stopped_at == "definitions"
    # aux alone earns its 0.4, then scoring still stops.
    r = _score(AUX, "no code here", runner=_never_run)
    assert r.score == pytest.approx(0.4) and r.stopped_at == "definitions"
    # a main without a return counts as missing.
    r = _score(AUX, "def sum_of_squares(xs):\n    print(xs)\n", runner=_never_run)
    assert r.score == pytest.approx(0.4) and r.stopped_at == "definitions"


def test_syntax_error_stops_at_1():
    r = _score(AUX, MAIN_SYNTAX, runner=_never_run)
    assert r.definitions == pytest.approx(1.0)
    assert r.score == pytest.approx(1.0) and r.stopped_at == "syntax"
    assert r.syntax_error["agent"] == "main" and r.syntax_error["line"] == 3


def test_half_the_asserts_pass():
    r = _score(AUX, MAIN_HALF)
    assert [u.passed for u in r.units] == [True, False, True, False]
    assert r.tests == pytest.approx(0.5)
    assert r.cooperation == 0.0  # main does not call aux
    assert r.score == pytest.approx(0.4 + 0.6 + 0.5 + 0.5)
    first = r.units[1]
    assert first.source == "assert candidate([1, 2]) == 5"
    assert first.error == "AssertionError" and first.got == "9"


def test_thin_wrapper_gets_only_half_bonus():
    r = _score(AUX_WHOLE, MAIN_THIN)
    assert r.all_passed and r.thin_wrapper
    assert r.cooperation == pytest.approx(0.5)
    assert r.score == pytest.approx(1.0 + 0.5 + 1.0 + 0.5)


def test_discarded_aux_result_costs_half():
    r = _score(AUX, MAIN_DISCARD)
    assert r.all_passed and r.aux_called and r.aux_result_discarded and not r.thin_wrapper
    assert r.cooperation == pytest.approx(0.5 + 1.0 - 0.5)
    assert r.score == pytest.approx(3.5)


def test_no_bonus_without_a_passing_test():
    main = "def sum_of_squares(xs):\n    return aux(-1)\n"  # aux(-1) = 1 matches no expected value
    r = _score(AUX, main)
    assert r.passed == 0 and r.aux_called
    assert r.cooperation == 0.0 and r.score == pytest.approx(1.5)


def test_unit_timeout_and_crash():
    hang_on_one = (
        "def sum_of_squares(xs):\n    while len(xs) == 1:\n        pass\n"
        "    return sum(x * x for x in xs)\n"
    )
    cfg = LeveledRewardConfig(per_test_timeout_s=0.3)
    r = _score(AUX, hang_on_one, config=cfg)
    assert [u.passed for u in r.units] == [True, True, False, True]
    assert r.units[2].error.startswith("Timeout")
    assert r.score == pytest.approx(1.0 + 0.5 + 0.75)
    # After max_timeouts timeouts the remaining units are not run.
    hang = "def sum_of_squares(xs):\n    while True:\n        pass\n    return 0\n"
    r = _score(AUX, hang, config=LeveledRewardConfig(per_test_timeout_s=0.3, max_timeouts=1))
    assert r.units[0].error.startswith("Timeout")
    assert all(u.error.startswith("Skipped") for u in r.units[1:])
    # A program that dies before the tests: every unit fails, with the reason.
    crash = "import no_such_module_xyz\n\n" + MAIN_FULL
    r = _score(AUX, crash)
    assert r.passed == 0 and "ModuleNotFoundError" in r.run_error
    assert r.score == pytest.approx(1.5)


def test_prompt_helpers_are_part_of_the_program():
    # Like HumanEval/32, the test calls a helper that only the prompt defines.
    prompt = "def double(x):\n    return 2 * x\n\n\ndef f(x):\n    '''Return double(x) + 1.'''\n"
    test = "def check(candidate):\n    assert candidate(3) == double(3) + 1\n"
    r = leveled_reward(
        "", "def f(x):\n    return double(x) + 1\n", prompt=prompt, test=test, entry_point="f"
    )
    assert r.all_passed and r.score == pytest.approx(0.6 + 0.5 + 1.0)


def test_packaged_humaneval_canonical_solutions_pass():
    rows = load_humaneval()
    assert len(rows) == 164 and rows[0]["task_id"] == "HumanEval/0"
    picked = [rows[i] for i in (0, 10, 32, 38)]  # 10/32/38 need the prompt's helpers
    jobs = [
        AuxMainJob(
            "", r["prompt"] + r["canonical_solution"], r["prompt"], r["test"], r["entry_point"]
        )
        for r in picked
    ]
    scores = leveled_rewards(jobs)
    assert [s.all_passed for s in scores] == [True] * 4
    assert [s.score for s in scores] == [pytest.approx(2.1)] * 4


# --------------------------------------------------------------------------------------
# Leveled reward plumbing with a fake runner (nothing executes)
# --------------------------------------------------------------------------------------


class FakeUnitRunner:
    """Reports unit results as the harness would, without running the program."""

    def __init__(self, verdicts: list[bool]) -> None:
        self.verdicts, self.calls = verdicts, []

    def __call__(self, codes, stdins, timeout_s, report=False):
        self.calls.append((list(codes), list(stdins), timeout_s))
        out = []
        for _ in codes:
            lines = []
            for i, ok in enumerate(self.verdicts):
                rec = {"unit": i, "ok": ok} if ok else {"unit": i, "ok": False, "error": "E"}
                lines.append(json.dumps(rec))
            lines.append(json.dumps({"done": True}))
            out.append(
                ExecResult("noise from the program", "", 0, False, None, 0.01, "\n".join(lines))
            )
        return out


def test_fake_runner_batches_and_parses():
    runner = FakeUnitRunner([True, False, False, True])
    jobs = [
        AuxMainJob(AUX, MAIN_FULL, PROMPT, TEST, ENTRY),
        AuxMainJob(AUX, "nothing", PROMPT, TEST, ENTRY),  # stops at L1: not run
        AuxMainJob(AUX, MAIN_DISCARD, PROMPT, TEST, ENTRY),
    ]
    cfg = LeveledRewardConfig(program_timeout_s=7.0)
    a, b, c = leveled_rewards(jobs, config=cfg, runner=runner)
    assert len(runner.calls) == 1
    codes, stdins, timeout = runner.calls[0]
    # The tests travel on stdin, read by the harness only after the solution's worker forked.
    assert len(codes) == 2 and timeout == 7.0
    assert all(
        "candidate([1, 2])" in s and "candidate([1, 2])" not in c for c, s in zip(codes, stdins)
    )
    assert a.tests == pytest.approx(0.5) and a.score == pytest.approx(1.5 + 0.5 + 1.5)
    assert b.score == pytest.approx(0.4) and b.units == []
    assert c.score == pytest.approx(1.5 + 0.5 + 1.0)


def test_unreported_units_fail():
    def silent(codes, stdins, timeout_s, report=False):
        return [ExecResult("", "", None, True, "wall_time", timeout_s) for _ in codes]

    r = _score(AUX, MAIN_FULL, runner=silent)
    assert r.passed == 0 and r.tests == 0.0 and "timed out" in r.run_error


def test_ast_helpers():
    assert check_units(TEST) == [
        "assert candidate([]) == 0",
        "assert candidate([1, 2]) == 5",
        "assert candidate([3]) == 9",
        "assert candidate([-1, 1]) == 2",
    ]
    with pytest.raises(ValueError, match="test: expected a top-level 'def check"):
        check_units("assert 1 == 1\n")
    import ast

    def fn(src: str):
        return ast.parse(src).body[0]

    assert is_thin_wrapper(fn("def f(x):\n    '''doc'''\n    return aux(x)\n"))
    assert is_thin_wrapper(fn("def f(x):\n    r = aux(x, 1)\n    return r\n"))
    assert not is_thin_wrapper(fn("def f(x):\n    r = aux(x)\n    return r + 1\n"))
    assert not is_thin_wrapper(fn("def f(x):\n    return aux(x) + 1\n"))
    # Found with a syntax error elsewhere in the completion (line-based fallback).
    broken = "Here you go:\ndef aux(x):\n    return x +\n\nThat's it"
    found = find_function(broken, "aux")
    assert found is not None and found.has_return and found.source.startswith("def aux(x):")
    assert extract_code("text\n```python\nprint(1)\n```\nmore\n```python\nprint(2)\n```") == (
        "print(2)"
    )


# --------------------------------------------------------------------------------------
# Feedback
# --------------------------------------------------------------------------------------


def _fb(mode: str, agent: str, helper: str, main: str, result) -> str:
    return feedback(
        mode,
        agent,
        problem=PROMPT,
        entry_point=ENTRY,
        helper_text=helper,
        main_text=main,
        result=result,
    )


def test_level_feedback_contents():
    half = _score(AUX, MAIN_HALF)
    text = _fb("level_feedback", "main", AUX, MAIN_HALF, half)
    assert "Tests passed: 2 of 4." in text
    assert "assert candidate([1, 2]) == 5" in text and "Got: 9" in text
    assert "`sum_of_squares` does not call `aux`." in text
    assert MAIN_HALF.strip() in text and AUX.strip() in text
    assert text.rstrip().endswith("no markdown.") and "Revise `sum_of_squares`" in text
    helper_text = _fb("level_feedback", "helper", AUX, MAIN_HALF, half)
    assert "Revise the helper function `aux`" in helper_text

    syntax = _score(AUX, MAIN_SYNTAX, runner=_never_run)
    text = _fb("level_feedback", "main", AUX, MAIN_SYNTAX, syntax)
    assert "Syntax error in `sum_of_squares` at line 3, column" in text
    assert "return total +" in text

    discard = _score(AUX, MAIN_DISCARD)
    assert "calls `aux` but discards its result" in _fb(
        "level_feedback", "main", AUX, MAIN_DISCARD, discard
    )
    thin = _score(AUX_WHOLE, MAIN_THIN)
    assert "only returns `aux(...)`" in _fb("level_feedback", "main", AUX_WHOLE, MAIN_THIN, thin)


def test_passed_and_plain_feedback():
    half = _score(AUX, MAIN_HALF)
    full = _score(AUX, MAIN_FULL)
    failed = _fb("passed", "helper", AUX, MAIN_HALF, half)
    assert "did not pass all tests" in failed and "Tests passed" not in failed
    assert "assert candidate" not in failed
    assert "the team's code passed all tests" in _fb("passed", "main", AUX, MAIN_FULL, full)
    plain = _fb("plain", "main", AUX, MAIN_HALF, half)
    assert MAIN_HALF.strip() in plain and "Revise `sum_of_squares`" in plain
    assert "passed" not in plain and "Feedback" not in plain
    with pytest.raises(ValueError, match="feedback.mode"):
        _fb("expert_edits", "main", AUX, MAIN_HALF, half)


# --------------------------------------------------------------------------------------
# Loaders on local fixtures in the upstream formats
# --------------------------------------------------------------------------------------


def test_humaneval_and_coophumaneval_folders(tmp_path):
    _write_jsonl(tmp_path / "he", "test.jsonl", [HE_ROW, {**HE_ROW, "task_id": "HumanEval/1"}])
    rows = load_humaneval(str(tmp_path / "he"))
    assert [r["task_id"] for r in rows] == ["HumanEval/0", "HumanEval/1"]
    assert rows[0]["entry_point"] == ENTRY and rows[0]["source"] == "humaneval"
    bad = {**HE_ROW, "test": "def check(candidate):\n    pass\n"}
    _write_jsonl(tmp_path / "bad", "test.jsonl", [HE_ROW, bad])
    with pytest.raises(ValueError, match=r"humaneval row 1: test: check\(candidate\) contains no"):
        load_humaneval(str(tmp_path / "bad"))
    assert len(load_humaneval(str(tmp_path / "bad"), skip_malformed=True)) == 1
    coop = {k: HE_ROW[k] for k in ("task_id", "prompt", "test", "entry_point")}
    _write_jsonl(tmp_path / "che", "test.jsonl", [coop])  # one split, whatever its name
    assert load_coophumaneval(str(tmp_path / "che"))[0]["source"] == "coophumaneval"


def test_humaneval_splits_follow_the_reference():
    splits = function_task_splits("humaneval")
    assert [len(splits[k]) for k in ("train", "eval", "test")] == [114, 16, 32]
    assert splits["train"][0]["task_id"] == "HumanEval/33"
    assert splits["eval"][-1]["task_id"] == "HumanEval/162"
    ids = {k: {r["task_id"] for r in v} for k, v in splits.items()}
    assert not (ids["eval"] & ids["test"]) and not (ids["train"] & (ids["eval"] | ids["test"]))


def test_mbpp_folder(tmp_path):
    folder = tmp_path / "mbpp"
    for split in ("train", "validation", "test"):
        _write_jsonl(folder, f"{split}.jsonl", [MBPP_ROW])
    splits = function_task_splits("mbpp", str(folder))
    row = splits["train"][0]
    assert row["task_id"] == "MBPP/2" and row["entry_point"] == "similar_elements"
    assert row["prompt"].startswith("def similar_elements(a, b):")
    assert "shared elements" in row["prompt"] and "assert set(similar_elements(" in row["prompt"]
    assert "import math" in row["test"] and "candidate((3, 4, 5, 6)" in row["test"]
    r = leveled_reward(
        "",
        row["canonical_solution"],
        prompt=row["prompt"],
        test=row["test"],
        entry_point=row["entry_point"],
    )
    assert r.all_passed and len(r.units) == 2
    _write_jsonl(tmp_path / "bad", "test.jsonl", [{**MBPP_ROW, "test_list": []}])
    with pytest.raises(ValueError, match=r"mbpp\[test\] row 0: test_list"):
        load_mbpp("test", str(tmp_path / "bad"))


def _apps_row(pid: int, a: int = 1, b: int = 2, **over) -> dict:
    row = {
        "problem_id": pid,
        "question": "Print the sum of two integers.",
        "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)\n"]),
        "input_output": json.dumps({"inputs": [f"{a} {b}\n"], "outputs": [f"{a + b}\n"]}),
        "difficulty": "introductory",
        "url": "u",
        "starter_code": "",
    }
    row.update(over)
    return row


def test_apps_folder(tmp_path):
    call_based = _apps_row(
        1, input_output=json.dumps({"fn_name": "f", "inputs": [[1]], "outputs": [[2]]})
    )
    lines = _apps_row(2, input_output=json.dumps({"inputs": [["3 4", "5 6"]], "outputs": [["7"]]}))
    _write_jsonl(tmp_path / "apps", "test.jsonl", [_apps_row(0), call_based, lines])
    rows = load_apps("test", str(tmp_path / "apps"))
    assert [r["id"] for r in rows] == ["apps/test/0", "apps/test/2"]  # call-based skipped
    assert rows[0]["tests"] == [{"input": "1 2\n", "output": "3\n"}]
    assert rows[0]["solution"].startswith("a, b = map(int")
    assert rows[1]["tests"] == [{"input": "3 4\n5 6\n", "output": "7\n"}]
    assert set(rows[0]) >= {"question", "tests", "source", "id"}
    _write_jsonl(tmp_path / "bad", "test.jsonl", [_apps_row(0), _apps_row(5, input_output="{")])
    with pytest.raises(ValueError, match=r"apps\[test\] row 1: input_output: not valid JSON"):
        load_apps("test", str(tmp_path / "bad"))
    assert len(load_apps("test", str(tmp_path / "bad"), skip_malformed=True)) == 1


def test_apps_rows_without_tests_are_skipped_and_logged(tmp_path, caplog):
    no_key = {k: v for k, v in _apps_row(3).items() if k != "input_output"}
    rows = [
        _apps_row(0),
        _apps_row(1, input_output=""),
        _apps_row(2, input_output="   "),
        no_key,
        _apps_row(4, input_output=json.dumps({"inputs": [], "outputs": []})),
        _apps_row(5, a=5, b=6),
    ]
    _write_jsonl(tmp_path / "apps", "train.jsonl", rows)
    with caplog.at_level("WARNING", logger="teamrl.tasks.coding.data"):
        kept = load_apps("train", str(tmp_path / "apps"))
    assert [r["id"] for r in kept] == ["apps/train/0", "apps/train/5"]
    assert "skipped 4 unusable (no tests: 4)" in caplog.text
    # A non-empty input_output that is not what APPS writes is still an error.
    bad = _apps_row(7, input_output=json.dumps([1, 2]))
    _write_jsonl(tmp_path / "bad", "train.jsonl", [_apps_row(0), bad])
    with pytest.raises(ValueError, match=r"apps\[train\] row 1: input_output: expected a JSON"):
        load_apps("train", str(tmp_path / "bad"))


def test_limit_reads_only_the_rows_it_keeps(tmp_path):
    # Rows 2..7 of APPS train are malformed; with limit=2 the task never reads them (train is
    # rows 0-1, eval the last 32), without a limit the build fails on them.
    broken = [_apps_row(i, input_output="{") for i in range(2, 8)]
    train = [_apps_row(0), _apps_row(1, a=1, b=1), *broken]
    train += [_apps_row(i, a=i) for i in range(8, 40)]
    apps = tmp_path / "apps"
    _write_jsonl(apps, "train.jsonl", train)
    _write_jsonl(apps, "test.jsonl", [_apps_row(0), _apps_row(1, input_output="{")])
    task = make_task("code_contest", source="apps", dataset_id=str(apps), limit=1)
    assert [r["id"] for r in task.train] == ["apps/train/0"]
    assert [r["id"] for r in task.eval] == ["apps/train/8"]  # first of the last 32
    assert [r["id"] for r in task.test] == ["apps/test/0"]
    with pytest.raises(ValueError, match=r"apps\[(train|test)\] row \d: input_output: not valid"):
        make_task("code_contest", source="apps", dataset_id=str(apps))
    # LiveCodeBench: a broken row after the first usable test (post-cutoff) row is not read.
    evil = _lcb_row("x", "2024-10-01", private_test_cases="not base64 !!")
    lcb = tmp_path / "lcb"
    rows = [_lcb_row("old", "2024-01-01"), _lcb_row("new", "2024-09-01"), evil]
    _write_jsonl(lcb, "test.jsonl", rows)
    opts = {"source": "livecodebench", "dataset_id": str(lcb), "lcb_version": "release_v1"}
    task = make_task("code_contest", limit=1, **opts)
    assert [r["id"] for r in task.test] == ["livecodebench/new"]
    with pytest.raises(ValueError, match="row 2: private_test_cases"):
        make_task("code_contest", **opts)
    # Limited splits are the first rows of the unlimited ones (a clean fixture).
    clean = tmp_path / "clean"
    _write_jsonl(clean, "train.jsonl", [_apps_row(i, a=i) for i in range(40)])
    _write_jsonl(clean, "test.jsonl", [_apps_row(i, a=i) for i in range(5)])
    full = make_task("code_contest", source="apps", dataset_id=str(clean))
    part = make_task("code_contest", source="apps", dataset_id=str(clean), limit=3)
    for split in ("train", "eval", "test"):
        assert getattr(part, split) == list(getattr(full, split))[:3]


def test_code_contests_folder(tmp_path):
    _write_jsonl(tmp_path / "cc", "train.jsonl", [_cc_row("1A. Sum")])
    (row,) = load_code_contests("train", str(tmp_path / "cc"))
    assert row["id"] == "codecontests/1A. Sum" and row["source"] == "codecontests"
    # public + private, deduplicated by input; generated tests only on request.
    assert row["tests"] == [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "5 5\n", "output": "10\n"},
    ]
    assert row["solution"].startswith("a, b = map(int")  # the Python 3 one, not C++/Python 2
    assert row["time_limit_s"] == pytest.approx(2.5)
    (gen,) = load_code_contests("train", str(tmp_path / "cc"), test_sets=("generated",))
    assert gen["tests"] == [{"input": "0 0\n", "output": "0\n"}]
    bad = _cc_row("2B", public_tests={"input": ["1\n", "2\n"], "output": ["1\n"]})
    _write_jsonl(tmp_path / "bad", "train.jsonl", [bad])
    with pytest.raises(ValueError, match="row 0: public_tests: 2 inputs but 1 outputs"):
        load_code_contests("train", str(tmp_path / "bad"))


def _compressed(cases: list[dict]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


def _lcb_row(qid: str, date: str, **over) -> dict:
    row = {
        "question_title": "Sum",
        "question_content": "Print the sum of two integers.",
        "platform": "atcoder",
        "question_id": qid,
        "contest_id": "abc1",
        "contest_date": date,
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
        "private_test_cases": _compressed(
            [{"input": "4 4\n", "output": "8\n", "testtype": "stdin"}]
        ),
        "metadata": "{}",
    }
    row.update(over)
    return row


def test_livecodebench_folder(tmp_path):
    functional = _lcb_row(
        "lc1",
        "2024-03-01T00:00:00",
        public_test_cases=json.dumps([{"input": "1", "output": "1", "testtype": "functional"}]),
    )
    plain = _lcb_row("abc2", "2024-09-01T00:00:00", private_test_cases=json.dumps([]))
    _write_jsonl(
        tmp_path / "lcb", "test.jsonl", [_lcb_row("abc1", "2024-01-01T00:00:00"), functional, plain]
    )
    rows = load_livecodebench(str(tmp_path / "lcb"), version="release_v1")
    assert [r["id"] for r in rows] == ["livecodebench/abc1", "livecodebench/abc2"]
    assert rows[0]["tests"] == [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "4 4\n", "output": "8\n"},
    ]
    assert rows[1]["tests"] == [{"input": "1 2\n", "output": "3\n"}]
    assert rows[0]["solution"] is None
    # A pickle that names a class is refused (plain data only).
    evil = base64.b64encode(zlib.compress(pickle.dumps(OrderedDict()))).decode()
    with pytest.raises(pickle.UnpicklingError, match="plain data only"):
        decode_lcb_tests(evil)
    _write_jsonl(tmp_path / "bad", "test.jsonl", [_lcb_row("x", "2024", private_test_cases=evil)])
    with pytest.raises(ValueError, match="row 0: private_test_cases: refused"):
        load_livecodebench(str(tmp_path / "bad"), version="release_v1")
    with pytest.raises(ValueError, match="livecodebench.version"):
        load_livecodebench(str(tmp_path / "lcb"), version="v6")


# --------------------------------------------------------------------------------------
# Stdin/stdout judging and the tester's reward (real sandbox)
# --------------------------------------------------------------------------------------

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
MUL = "a, b = map(int, input().split())\nprint(a * b)\n"
GT = [
    {"input": "1 2\n", "output": "3\n"},
    {"input": "2 2\n", "output": "4\n"},
    {"input": "5 5\n", "output": "10\n"},
]


def test_output_normalisation():
    assert outputs_match("3  \n\n\n", "3")
    assert outputs_match("a \nb\t\n", "a\nb")
    assert not outputs_match(" 3", "3")  # leading whitespace is significant
    assert not outputs_match("3\n4", "3 4")


def test_stdio_pass_ratio():
    ratio, runs = stdio_pass_ratio(MUL, GT, timeout_s=5.0)
    assert ratio == pytest.approx(1 / 3) and [r.ok for r in runs] == [True] * 3
    assert runs[0].output == "2\n"
    ratio, runs = stdio_pass_ratio("raise SystemExit('boom')", GT[:1], timeout_s=5.0)
    assert ratio == 0.0 and runs[0].error == "boom"
    ratio, runs = stdio_pass_ratio("while True:\n    pass\n", GT[:1], timeout_s=0.5)
    assert ratio == 0.0 and runs[0].error == "timed out"
    ratio, runs = stdio_pass_ratio("", GT[:1], timeout_s=0.5, runner=_never_run)
    assert ratio == 0.0 and runs[0].error == "no code"


def test_parse_test_cases():
    text = (
        "Here are tests.\n<input>\n1 2\n</input>\n<output>\n3\n</output>\n"
        "<input>\n7 8</input> <output>15</output>\n<input>\n0 0\n</input>\n<output>\n0\n</output>"
    )
    assert parse_test_cases(text, 2) == [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "7 8\n", "output": "15"},
    ]
    assert parse_test_cases("no tags", 4) == []


def test_tester_judged_by_reference():
    cases = [
        {"input": "1 2\n", "output": "3\n"},  # correct, and MUL fails it -> a caught bug
        {"input": "2 2\n", "output": "5\n"},  # wrong expected output
        {"input": "x\n", "output": "0\n"},  # invalid input: the reference crashes
    ]
    v = judge_tester(cases, program=MUL, reference=ADD, ground_truth=GT, timeout_s=5.0)
    assert v.correct == [True, False, False] and v.judge == "reference"
    assert v.program_passes == [False, False, False]
    assert v.correctness == pytest.approx(1 / 3) and v.discrimination == 1.0
    assert not v.agreement
    # A correct case that the buggy program happens to pass catches nothing.
    v = judge_tester(
        cases[1:2] + [{"input": "2 2\n", "output": "4\n"}],
        program=MUL,
        reference=ADD,
        ground_truth=GT,
        timeout_s=5.0,
    )
    assert v.correct == [False, True] and v.program_passes == [False, True]
    assert v.discrimination == 0.0 and v.correctness == pytest.approx(0.5)


def test_tester_judged_by_ground_truth_lookup():
    cases = [
        {"input": "1 2  \n", "output": "3"},  # a GT input (after normalisation), right output
        {"input": "5 5\n", "output": "25\n"},  # a GT input, wrong output
        {"input": "7 8\n", "output": "15\n"},  # right, but cannot be verified: not paid
    ]
    v = judge_tester(cases, program=ADD, reference=None, ground_truth=GT, timeout_s=5.0)
    assert v.judge == "ground_truth_lookup"
    assert v.correct == [True, False, False]
    assert v.program_passes == [True, False, True] and not v.agreement


def test_judging_with_a_fake_runner():
    outputs = {(ADD, "1 2\n"): "3\n", (MUL, "1 2\n"): "2\n"}

    def table(codes, stdins, timeout_s):
        return [ExecResult(outputs[(c, s)], "", 0, False, None, 0.0) for c, s in zip(codes, stdins)]

    v = judge_tester(
        [{"input": "1 2\n", "output": "3\n"}],
        program=MUL,
        reference=ADD,
        ground_truth=GT,
        timeout_s=1.0,
        runner=table,
    )
    assert v.correct == [True] and v.program_passes == [False] and v.discrimination == 1.0


# --------------------------------------------------------------------------------------
# Environments
# --------------------------------------------------------------------------------------


def test_tasks_are_registered():
    names = registered_tasks()
    assert {"humaneval", "coophumaneval", "mbpp", "code_contest"} <= set(names)


def test_aux_main_env_contract():
    env = AuxMainCodingEnv(
        max_turns=2,
        feedback_mode="level_feedback",
        reward_config=LeveledRewardConfig(reward_shift=-4.0),
    )
    with pytest.raises(RuntimeError, match="reset"):
        env.step({"helper": AUX, "main": MAIN_FULL})
    obs = env.reset(ROW)
    assert set(obs) == {"helper", "main"}
    assert "named `aux`" in obs["helper"] and "Implement `sum_of_squares`" in obs["main"]
    assert PROMPT.strip() in obs["main"]
    with pytest.raises(ValueError, match="expected actions for"):
        env.step({"main": MAIN_FULL})
    branch = clone(env)
    s = env.step({"helper": AUX, "main": MAIN_HALF})
    assert s.reward == pytest.approx(2.0 - 4.0)
    assert s.reward_components["tests"] == pytest.approx(0.5)
    assert not s.done and s.success is False
    # Multi-turn: feedback reports the one visible unit only (see the leak test below).
    assert "Visible tests passed: 1 of 1 (3 more tests are hidden)." in s.observations["main"]
    s = env.step({"helper": AUX, "main": MAIN_HALF})
    assert s.truncations == {"helper": True, "main": True} and not any(s.terminations.values())
    # The clone taken before the first step is independent; the maximum score terminates.
    s = branch.step({"helper": AUX, "main": MAIN_FULL})
    assert s.terminations == {"helper": True, "main": True} and s.reward == pytest.approx(0.0)
    assert s.success is True
    with pytest.raises(ValueError, match="feedback"):
        AuxMainCodingEnv(feedback_mode="nope")


# Passes the first (visible) unit, fails the hidden ones with [1, 2] and [3].
MAIN_VISIBLE_ONLY = (
    "def sum_of_squares(xs):\n    total = 0\n    for x in xs:\n        total += aux(x)\n"
    "    return total if len(xs) == 0 or xs == [-1, 1] else -7\n"
)
# Fails only the first (visible) unit: the hidden ones decide success.
MAIN_FAILS_VISIBLE = (
    "def sum_of_squares(xs):\n    total = 0\n    for x in xs:\n        total += aux(x)\n"
    "    return total if xs else 1\n"
)


def _hidden_sources() -> list[str]:
    return check_units(TEST)[1:]


def test_feedback_never_shows_the_tests_that_decide_success():
    hidden = _hidden_sources()
    for mode in ("level_feedback", "passed", "plain"):
        env = AuxMainCodingEnv(max_turns=2, feedback_mode=mode)
        env.reset(ROW)
        for main in (MAIN_HALF, MAIN_VISIBLE_ONLY, MAIN_FAILS_VISIBLE, MAIN_SYNTAX):
            s = clone(env).step({"helper": AUX, "main": main})
            for agent, text in s.observations.items():
                for src in hidden:
                    assert src not in text, (mode, agent, src)
                assert "Got: -7" not in text  # what a hidden assert got
    env = AuxMainCodingEnv(max_turns=2)
    env.reset(ROW)
    # All hidden units fail: the visible unit passes, so feedback sees nothing wrong with the
    # tests, and success (judged on the hidden units) is False. The episode stops on what the
    # agents can see, not on the hidden outcome (that would be an oracle stop).
    s = clone(env).step({"helper": AUX, "main": MAIN_VISIBLE_ONLY})
    assert s.success is False and s.infos["visible_tests"] == 1
    assert "All visible checks passed." in s.observations["main"] and s.terminations["main"]
    # Only the visible unit fails: its assert is shown, and success holds.
    s = clone(env).step({"helper": AUX, "main": MAIN_FAILS_VISIBLE})
    assert s.success is True and not s.done
    main_obs = s.observations["main"]
    assert "assert candidate([]) == 0" in main_obs and "Got: 1" in main_obs
    passed = AuxMainCodingEnv(max_turns=2, feedback_mode="passed")
    passed.reset(ROW)
    s = passed.step({"helper": AUX, "main": MAIN_VISIBLE_ONLY})
    assert "passed all visible tests" in s.observations["helper"]


def test_hidden_run_errors_stay_hidden():
    # Unit 0 (visible) passes, then the program dies: the crash happens in hidden units.
    def dies_after_unit_0(codes, stdins, timeout_s, report=False):
        report_ = json.dumps({"unit": 0, "ok": True})
        return [ExecResult("", "MemoryError", 1, False, None, 0.01, report_) for _ in codes]

    env = AuxMainCodingEnv(max_turns=2, runner=dies_after_unit_0)
    env.reset(ROW)
    s = env.step({"helper": AUX, "main": MAIN_FULL})
    assert s.success is False
    assert s.reward_components["pass_rate"] == pytest.approx(0.25)
    assert "MemoryError" not in s.observations["main"]
    assert "stopped before" not in s.observations["main"]


def test_single_turn_success_is_every_unit():
    env = AuxMainCodingEnv(max_turns=1)
    env.reset(ROW)
    s = clone(env).step({"helper": AUX, "main": MAIN_FAILS_VISIBLE})
    assert s.infos["visible_tests"] == 0 and s.success is False
    assert not any(s.terminations.values()) and all(s.truncations.values())
    s = clone(env).step({"helper": AUX, "main": MAIN_FULL})
    assert s.success is True and all(s.terminations.values())
    # The same success definition as a multi-turn run, when asked for.
    env = AuxMainCodingEnv(max_turns=1, feedback_tests=1)
    env.reset(ROW)
    assert env.step({"helper": AUX, "main": MAIN_FAILS_VISIBLE}).success is True
    # A problem with one unit keeps it hidden.
    one = {**ROW, "test": "def check(candidate):\n    assert candidate([3]) == 9\n"}
    env = AuxMainCodingEnv(max_turns=2, feedback_tests=3)
    env.reset(one)
    s = env.step({"helper": AUX, "main": MAIN_HALF})
    assert s.infos["visible_tests"] == 0 and s.success is True
    assert "candidate([3])" not in s.observations["main"]
    with pytest.raises(ValueError, match="feedback_tests"):
        AuxMainCodingEnv(feedback_tests=-1)


def test_task_descriptions_match_the_splits(tmp_path):
    desc = registered_tasks()
    splits = function_task_splits("humaneval")
    for name, rows in splits.items():
        first, last = (int(r["task_id"].split("/")[1]) for r in (rows[0], rows[-1]))
        span = f"[{first or ''}:{last + 1}]"
        assert f"{name} {span}" in desc["humaneval"], (name, span)
    coop = {k: HE_ROW[k] for k in ("task_id", "prompt", "test", "entry_point")}
    _write_jsonl(
        tmp_path / "che", "train.jsonl", [{**coop, "task_id": f"C/{i}"} for i in range(30)]
    )
    splits = function_task_splits("coophumaneval", str(tmp_path / "che"))
    assert [r["task_id"] for r in splits["eval"]] == [f"C/{i}" for i in range(22, 30)]
    assert [r["task_id"] for r in splits["test"]] == [f"C/{i}" for i in range(16)]
    assert "test [:16], eval the last 8 rows" in desc["coophumaneval"]


def test_humaneval_and_mbpp_tasks(tmp_path):
    task = make_task("humaneval", max_turns=1, reward_shift=-4, limit=3)
    assert (len(task.train), len(task.eval), len(task.test)) == (3, 3, 3)
    assert set(task.agents) == {"helper", "main"}
    env = task.make_env()
    ex = task.eval[0]
    env.reset(ex)
    s = env.step({"helper": "", "main": ex["prompt"] + ex["canonical_solution"]})
    assert s.reward == pytest.approx(2.1 - 4.0) and s.done
    folder = tmp_path / "mbpp"
    for split in ("train", "validation", "test"):
        _write_jsonl(folder, f"{split}.jsonl", [MBPP_ROW])
    task = make_task("mbpp", dataset_id=str(folder), feedback="plain")
    assert task.train[0]["entry_point"] == "similar_elements"
    with pytest.raises(ValueError, match="feedback"):
        make_task("mbpp", dataset_id=str(folder), feedback="expert")


SUM_ROW = {
    "id": "t/0",
    "question": "Read two integers a and b and print a + b.",
    "tests": [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "5 5\n", "output": "10\n"},
        {"input": "200 1\n", "output": "201\n"},
    ],
    "solution": ADD,
}
SMALL_ONLY = "a, b = map(int, input().split())\nprint(a + b if a < 100 else 0)\n"


def test_coder_tester_turns_rewards_and_agreement():
    env = CoderTesterEnv(CodeContestConfig(max_turns=3, max_tests=2))
    assert env.turn_order == ["coder", "tester"]
    obs = env.reset(SUM_ROW)
    assert "```python" in obs["coder"] and "print a + b" in obs["coder"]
    with pytest.raises(ValueError, match="expected an action from 'coder'"):
        env.step({"tester": "x"})
    s = env.step({"coder": "```python\n" + MUL + "```"})
    assert s.reward == 0.0 and s.local_rewards == {"coder": 0.0} and not s.done
    assert MUL.strip() in s.observations["tester"] and "<input>" in s.observations["tester"]
    branch = clone(env)
    s = env.step(
        {
            "tester": "<input>\n1 2\n</input>\n<output>\n3\n</output>\n"
            "<input>\n2 2\n</input>\n<output>\n5\n</output>"
        }
    )
    comps = s.reward_components
    assert comps["tester_correctness"] == pytest.approx(0.5)
    assert comps["tester_discrimination"] == 1.0
    assert s.local_rewards == {"tester": pytest.approx(1.5)} and not s.done
    assert "Test 1 (FAILED)" in s.observations["coder"]
    # Next turn: a program right on the first 2 GT tests only; the tester agrees with it.
    s = env.step({"coder": SMALL_ONLY})
    assert s.reward == pytest.approx(1.0) and "Test 1 (passed)" in s.observations["tester"]
    s = env.step({"tester": "<input>\n1 2\n</input>\n<output>\n3\n</output>"})
    assert s.terminations == {"coder": True, "tester": True}
    assert s.reward_components["agreement"] == 1.0
    assert s.success is False  # GT test 3 fails: agreement is not success
    # The branch cloned after turn 1's coder step is untouched and runs out of turns.
    b = CoderTesterEnv(CodeContestConfig(max_turns=1))
    b.reset(SUM_ROW)
    b.step({"coder": ADD})
    s = b.step({"tester": "<input>\n1 1\n</input>\n<output>\n3\n</output>"})
    assert s.truncations == {"coder": True, "tester": True} and not any(s.terminations.values())
    assert s.success is True and s.local_rewards["tester"] == 0.0
    s = branch.step({"tester": "nothing parseable"})
    assert s.reward_components["tester_cases"] == 0.0 and s.local_rewards["tester"] == 0


TESTER_TWO_CASES = (
    "<input>\n1 2\n</input>\n<output>\n3\n</output>\n<input>\n2 2\n</input>\n<output>\n5\n</output>"
)


def test_coder_tester_reports_success_on_every_step():
    env = CoderTesterEnv(CodeContestConfig(max_turns=4, max_tests=2))
    env.reset(SUM_ROW)
    s = env.step({"coder": SMALL_ONLY})  # right on the first 2 GT tests, wrong on the third
    assert s.success is False and s.reward == pytest.approx(1.0)
    s = env.step({"tester": TESTER_TWO_CASES})  # no agreement, turns left: the episode goes on
    assert not s.done and s.success is False
    s = env.step({"coder": ADD})
    assert s.success is True
    s = env.step({"tester": TESTER_TWO_CASES})
    assert not s.done and s.success is True


def test_coder_tester_simultaneous_mode():
    cfg = CodeContestConfig(mode="simultaneous", max_turns=2, max_tests=2)
    env = CoderTesterEnv(cfg)
    assert env.turn_order is None  # the rollout's sign of a simultaneous env
    obs = env.reset(SUM_ROW)
    # The tester writes cases from the problem alone: there is no code yet.
    assert "Write up to 4 test cases" in obs["tester"] and "<input>" in obs["tester"]
    assert "```python" not in obs["tester"] and "print a + b" in obs["tester"]
    with pytest.raises(ValueError, match="expected actions for"):
        env.step({"coder": ADD})
    branch = clone(env)
    s = env.step({"coder": "```python\n" + MUL + "```", "tester": TESTER_TWO_CASES})
    # The same definitions as the sequential turn with the same actions.
    seq = CoderTesterEnv(CodeContestConfig(max_turns=2, max_tests=2))
    seq.reset(SUM_ROW)
    seq_coder = seq.step({"coder": "```python\n" + MUL + "```"})
    seq_tester = seq.step({"tester": TESTER_TWO_CASES})
    assert s.reward == seq_tester.reward == 0.0
    assert s.local_rewards == {**seq_coder.local_rewards, **seq_tester.local_rewards}
    assert s.local_rewards == {"coder": 0.0, "tester": pytest.approx(1.5)}
    assert s.reward_components == seq_tester.reward_components
    assert s.success is False and not s.done and s.infos["turn"] == 1
    assert s.observations == seq_tester.observations | {"tester": s.observations["tester"]}
    assert "Test 1 (FAILED)" in s.observations["coder"]
    tester_obs = s.observations["tester"]
    assert "from the last turn" in tester_obs and MUL.strip() in tester_obs
    # Turn 2: a right program that passes the tester's (right) case: agreement ends it.
    s = env.step({"coder": ADD, "tester": "<input>\n1 2\n</input>\n<output>\n3\n</output>"})
    assert s.terminations == {"coder": True, "tester": True} and s.success is True
    assert s.reward == 1.0 and s.local_rewards == {"coder": 1.0, "tester": 1.0}
    # No agreement in the last turn: truncated, with the outcome still reported.
    s = branch.step({"coder": MUL, "tester": "nothing"})
    s = branch.step({"coder": MUL, "tester": "nothing"})
    assert s.truncations == {"coder": True, "tester": True} and s.success is False
    with pytest.raises(ValueError, match="code_contest.mode"):
        CodeContestConfig(mode="parallel")


def test_coder_tester_without_reference_uses_episode_program():
    row = {**SUM_ROW, "solution": None}
    env = CoderTesterEnv(CodeContestConfig(max_turns=3))
    env.reset(row)
    env.step({"coder": MUL})
    s = env.step(
        {
            "tester": "<input>\n1 2\n</input>\n<output>\n3\n</output>\n"
            "<input>\n7 8\n</input>\n<output>\n15\n</output>"
        }
    )
    assert s.infos["judge"] == "ground_truth_lookup"
    assert s.reward_components["tester_correctness"] == pytest.approx(0.5)
    env.step({"coder": ADD})  # passes every GT test: it becomes the judge
    s = env.step(
        {
            "tester": "<input>\n7 8\n</input>\n<output>\n15\n</output>\n"
            "<input>\n9 9\n</input>\n<output>\n17\n</output>"
        }
    )
    assert s.infos["judge"] == "episode_program"
    assert s.reward_components["tester_correctness"] == pytest.approx(0.5)


def test_code_contest_task_splits(tmp_path):
    apps = tmp_path / "apps"
    _write_jsonl(apps, "train.jsonl", [_apps_row(i, a=i, b=1) for i in range(34)])
    _write_jsonl(apps, "test.jsonl", [_apps_row(0), _apps_row(1, a=3, b=4)])
    task = make_task("code_contest", source="apps", dataset_id=str(apps), max_turns=2)
    assert (len(task.train), len(task.eval), len(task.test)) == (2, 32, 2)
    assert task.train[1]["tests"] == [{"input": "1 1\n", "output": "2\n"}]
    assert set(task.agents) == {"coder", "tester"}
    env = task.make_env()
    env.reset(task.test[1])
    assert env.step({"coder": ADD}).reward == 1.0
    cc = tmp_path / "cc"
    for split in ("train", "valid", "test"):
        _write_jsonl(cc, f"{split}.jsonl", [_cc_row(f"{split}-1")])
    lcb = tmp_path / "lcb"
    _write_jsonl(lcb, "test.jsonl", [_lcb_row("a", "2024-01-05"), _lcb_row("b", "2024-09-01")])
    task = make_task(
        "code_contest",
        source="codecontests",
        dataset_id=str(cc),
        limit=1,
        test_source="livecodebench",
        test_dataset_id=str(lcb),
        lcb_version="release_v1",
    )
    assert task.train[0]["id"] == "codecontests/train-1"
    assert task.eval[0]["id"] == "codecontests/valid-1"
    assert [r["id"] for r in task.test] == ["livecodebench/a"]  # limit=1
    task = make_task(
        "code_contest",
        source="livecodebench",
        dataset_id=str(lcb),
        lcb_version="release_v1",
        lcb_cutoff="2024-08-01",
    )
    assert [r["id"] for r in task.eval] == ["livecodebench/a"] and task.train == []
    assert [r["id"] for r in task.test] == ["livecodebench/b"]
    with pytest.raises(ValueError, match="code_contest.source"):
        make_task("code_contest", source="leetcode")
