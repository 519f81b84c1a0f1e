"""``teamrl report``: turns (about 4) on their own axis, never the rewards' (about 1): the
evaluation panel drew ``eval/turns/mean`` with ``eval/reward/mean`` (issue 54, item 7)."""

from __future__ import annotations

import json

from teamrl.commands.report import report_data


def test_turns_get_their_own_panel_and_the_evaluation_panel_keeps_the_scores(tmp_path):
    rows = [
        {"step": 0, "eval/reward/mean": 0.2, "eval/success_rate": 0.0, "eval/turns/mean": 4.0},
        {"step": 1, "reward/mean": 0.4, "reward/std": 0.1, "turns/mean": 3.5},
        {"step": 2, "reward/mean": 0.6, "reward/std": 0.1, "turns/mean": 4.0,
         "eval/reward/mean": 0.7, "eval/success_rate": 0.5, "eval/turns/mean": 3.0},
    ]  # fmt: skip
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    panels = {p["title"]: p["keys"] for p in report_data(run)["panels"]}
    assert panels["evaluation"] == ["eval/reward/mean", "eval/success_rate"]
    assert panels["turns"] == ["turns/mean", "eval/turns/mean"]
    drawn = [k for keys in panels.values() for k in keys]
    assert drawn.count("eval/turns/mean") == 1  # in no panel but its own
    # a run that logs no turns gets no turns panel
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 1.0}) + "\n")
    assert [p["title"] for p in report_data(bare)["panels"]] == ["team reward"]
