"""What the progress bar, ``teamrl train``'s last line and the curves call the team reward: the
team reward itself, also under AT-GRPO, whose ``reward/mean`` counts it once per node."""

from __future__ import annotations

import json

import pytest

from teamrl.cli import main
from teamrl.commands.plot import plot_panels
from teamrl.run.logging import team_reward_key


def test_the_key_by_hand():
    assert team_reward_key({"reward/mean": 5.2, "reward/team/mean": 2.6}) == "reward/team/mean"
    assert team_reward_key({"reward/mean": 2.6}) == "reward/mean"
    panels = dict(plot_panels({"reward/mean", "reward/team/mean", "eval/reward/mean"}))
    assert panels["team reward"] == ["reward/team/mean", "eval/reward/mean"]
    assert dict(plot_panels({"reward/mean"}))["team reward"] == ["reward/mean"]


def test_the_demos_at_grpo_run_reports_its_team_reward(tmp_path, monkeypatch, capsys):
    # the demo's writers in turns: each of the two nodes is credited the team reward (alpha 1,
    # no local reward), so the return is twice the team reward and the last line names the latter
    monkeypatch.chdir(tmp_path)
    argv = [
        "train",
        "quickstart",
        "model.name_or_path=tiny-llama",
        "train.max_steps=1",
        "log.progress_bar=false",
        "team.agents.0.max_completion_length=8",
        "team.agents.1.max_completion_length=8",
        "algorithm.num_generations=2",
    ]
    assert main(argv) == 0
    (row,) = [json.loads(x) for x in (tmp_path / "runs/quickstart/metrics.jsonl").open()]
    assert row["reward/mean"] == pytest.approx(2 * row["reward/team/mean"])
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == f"reward/team/mean: step 1 {row['reward/team/mean']:.3f} -> step 1 " + (
        f"{row['reward/team/mean']:.3f}"
    )
