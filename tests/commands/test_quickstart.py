"""make demo (``teamrl.commands.quickstart``): its held-out report and its one-line verdict."""

from __future__ import annotations

import pytest
from helpers.runs import tiny_writers

from teamrl.commands import quickstart


def test_verdict_says_rose_only_when_the_interval_of_the_change_excludes_zero():
    before = {0: 1.0, 1: 1.0, 2: 0.5, 3: 2.0}
    line, mean, (lo, hi) = quickstart.verdict(before, {0: 1.5, 1: 1.5, 2: 1.0, 3: 2.5})
    assert mean == pytest.approx(0.5) and (lo, hi) == pytest.approx((0.5, 0.5))
    assert line.startswith("the team got better") and "4 posts better, 0 worse" in line

    # +1, -1, +1, -1: the mean change is 0 and the interval straddles it
    line, mean, (lo, hi) = quickstart.verdict(before, {0: 2.0, 1: 0.0, 2: 1.5, 3: 1.0})
    assert mean == pytest.approx(0.0) and lo < 0 < hi
    assert line.startswith("no clear change") and "2 posts better, 2 worse, 0 unchanged" in line

    line, mean, _ = quickstart.verdict(before, {0: 0.5, 1: 0.5, 2: 0.0, 3: 2.0})
    assert mean == pytest.approx(-0.375)
    assert line.startswith("the team got WORSE") and "0 posts better, 3 worse, 1 unchanged" in line


def test_verdict_pairs_posts_by_id_not_by_order():
    # the same rewards listed in another order: no change on any post
    line, mean, _ = quickstart.verdict({0: 1.0, 1: 2.0}, {1: 2.0, 0: 1.0})
    assert mean == 0.0 and "0 posts better, 0 worse, 2 unchanged" in line


def test_the_demo_reports_its_held_out_posts_and_ends_with_its_verdict(tmp_path, capsys):
    code = quickstart.main(tiny_writers(tmp_path))
    out = capsys.readouterr().out
    assert code == 0
    from teamrl.tasks.writing.data import OFFLINE_SIZES

    assert OFFLINE_SIZES[quickstart.HELD_OUT] >= quickstart.HELD_OUT_POSTS >= 16  # the floor
    n = quickstart.HELD_OUT_POSTS
    assert f"greedy team reward on {n} held-out posts" in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("verdict: ") and "unchanged)" in last
    counts = last.split("; ")[-1]  # "A posts better, B worse, C unchanged)"
    numbers = [int(w) for w in counts.replace(")", "").split() if w.isdigit()]
    assert sum(numbers) == n  # every held-out post is scored, before and after


def test_held_out_per_post_rewards_average_to_the_report(tmp_path):
    from teamrl.config import load_config
    from teamrl.trainer import Trainer

    cfg = load_config("quickstart", tiny_writers(tmp_path))
    result = quickstart.held_out(Trainer(cfg))
    rewards = result["rewards"]
    assert sorted(rewards) == list(range(quickstart.HELD_OUT_POSTS))  # the first 16 test posts
    assert sum(rewards.values()) / len(rewards) == pytest.approx(result["report"]["greedy/reward"])
    assert set(result["texts"][0]) == {"concise", "detailed"}
    assert all(1 <= n <= 6 for n in result["lengths"]["concise"])


def test_the_demos_table_scores_what_the_demo_scores():
    from experiments.tables import TABLES

    table = TABLES["quickstart_seeds"]
    assert table.config == "quickstart" and table.test_problems == quickstart.HELD_OUT_POSTS
