"""make demo (``teamrl.commands.quickstart``): its held-out report and its one-line verdict."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import paragraph_writer
from helpers.runs import ROOT, tiny_writers

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
    assert sorted(rewards) == list(range(quickstart.HELD_OUT_POSTS))  # the test posts, in order
    assert sum(rewards.values()) / len(rewards) == pytest.approx(result["report"]["greedy/reward"])
    assert set(result["texts"][0]) == {"concise", "detailed"}
    assert all(1 <= n <= 6 for n in result["lengths"]["concise"])


def test_the_demos_table_scores_what_the_demo_scores():
    from experiments.tables import TABLES
    from teamrl.config import load_config

    table = TABLES["quickstart_seeds"]
    assert table.config == "quickstart" and table.test_problems == quickstart.HELD_OUT_POSTS
    # every condition runs the demo's writers as the config sets them (budgets, stop strings)
    demo = load_config("quickstart").team.agents
    for condition in table.conditions:
        overrides = [*table.base, *condition.overrides]
        assert load_config(table.config, overrides).team.agents == demo, condition.name


def demo_on_a_paragraph_writer(tmp_path, *overrides: str):
    """``make demo`` for 3 steps (``log.warn_after_steps``: the watch's count) with its own
    config, on tiny-llama biased to write as SmolLM2's detailed writer did: it never ends on its
    own, only a stop string ends it (tests/helpers/paragraph_writer.py). In a fresh process, so
    that its warnings print to stderr as the user reads them. Returns (the finished process, the
    run's metrics rows)."""
    argv = [
        "model.name_or_path=tiny-llama",
        "train.max_steps=3",
        f"log.output_dir={tmp_path}",
        "log.progress_bar=false",
        *overrides,
    ]
    script = paragraph_writer.__file__
    proc = subprocess.run(
        [sys.executable, script, *argv], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = (tmp_path / "quickstart" / "metrics.jsonl").read_text().splitlines()
    return proc, [json.loads(line) for line in metrics]


def warning_lines(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("teamrl: warning:")]


def test_the_demos_writers_can_end_their_answers_so_the_demo_does_not_warn(tmp_path):
    # Issue 56: the demo's detailed writer (SmolLM2) never ended within its 64 tokens, and the
    # demo's first words to a new user were the watch's warning that its answers never finish.
    # The config now ends each writer's one paragraph at a blank line (and gives the detailed
    # one the budget its three to five sentences need): on a model that ends only at a stop
    # string, some answers end, and the demo prints no warning.
    proc, rows = demo_on_a_paragraph_writer(tmp_path)
    assert warning_lines(proc) == []
    assert [row["step"] for row in rows] == [1, 2, 3]
    for agent in ("concise", "detailed"):
        assert all(row[f"truncated_fraction/{agent}"] < 1.0 for row in rows), agent


def test_without_their_stop_strings_the_same_writers_are_cut_and_the_demo_warns(tmp_path):
    # The control, so that the test above cannot pass on a model that ends on its own: the
    # writers of the config before issue 56 (no stop strings, the detailed writer at 64 tokens)
    # on the same model have every completion cut, and the watch says so at step 3.
    old_writers = (
        "team.agents.0.stop=[]",
        "team.agents.1.stop=[]",
        "team.agents.1.max_completion_length=64",
    )
    proc, rows = demo_on_a_paragraph_writer(tmp_path, *old_writers)
    assert all(
        row[f"truncated_fraction/{a}"] == 1.0 for row in rows for a in ("concise", "detailed")
    )
    cut = "was cut at max_completion_length=64 for 3 consecutive steps"
    assert [line.split(": its answers")[0] for line in warning_lines(proc)] == [
        f"teamrl: warning: every completion of agent 'concise' {cut} (truncated_fraction/concise=1.0)",
        f"teamrl: warning: every completion of agent 'detailed' {cut} (truncated_fraction/detailed=1.0)",
    ]
