"""pass@k, avg@k and report aggregation, by hand."""

from __future__ import annotations

import pytest

from teamrl.evaluation import markdown_table, pass_at_k, summarise


def test_pass_at_k_unbiased_estimator_by_hand():
    # n = 4 samples, c = 1 correct: pass@1 = 1/4; pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 2, 3) == 1.0  # n - c < k: some correct one is always drawn
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(2, 1, 3)


def ep(problem, success, ret=0.0, turns=1, comps=None):
    return {
        "problem": problem,
        "success": success,
        "return": ret,
        "turns": turns,
        "components": comps or {},
    }


def test_summarise_reports_greedy_pass_and_avg():
    greedy = [ep(0, True, 1.0, 2, {"win": 1.0}), ep(1, False, 0.0, 3, {"win": 0.0})]
    sampled = [ep(0, True), ep(0, False), ep(1, False), ep(1, False)]
    r = summarise(greedy, sampled, [1, 2])
    assert r["greedy/accuracy"] == 0.5
    assert r["greedy/turns"] == 2.5
    assert r["greedy/components/win"] == 0.5
    assert r["avg@2"] == pytest.approx(0.25)  # (1/2 + 0/2) / 2
    assert r["pass@1"] == pytest.approx(0.25)
    assert r["pass@2"] == pytest.approx(0.5)  # problem 0 surely, problem 1 never


def test_rewards_only_tasks_have_no_accuracy():
    r = summarise([ep(0, None, 2.0)], [ep(0, None, 1.0)], [1])
    assert "greedy/accuracy" not in r and "pass@1" not in r
    assert r["greedy/reward"] == 2.0 and r["sampled/reward"] == 1.0
    table = markdown_table({"tldr": r})
    assert table.splitlines()[0] == "| metric | tldr |"
    assert "| greedy/reward | 2.000 |" in table
