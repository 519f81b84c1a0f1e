"""An app task (teamrl.apps) under Ray: the endpoint and the app's episodes live in the
controller, whose team sends each barrier's batch to the policies' worker group."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.util")  # not the tests/ray folder itself
pytest.importorskip("openai", reason="the apps extra: pip install 'teamrl[apps]'")

from helpers.apps import tiny_cfg  # noqa: E402
from ray_cluster import CPU, ray_cluster  # noqa: E402, F401

from teamrl.apps import app_task  # noqa: E402
from teamrl.scale import shutdown_team  # noqa: E402
from teamrl.trainer import Trainer  # noqa: E402


def writers(client, example):
    """Two writers, the second reading the first; the team reward counts distinct letters."""
    first = client.chat.completions.create(
        model="alice", messages=[{"role": "user", "content": example["text"]}]
    )
    text = first.choices[0].message.content
    second = client.chat.completions.create(
        model="bob", messages=[{"role": "user", "content": text}]
    )
    return len(set(text + second.choices[0].message.content)) / 10


def test_an_app_trains_on_a_ray_worker_group(ray_cluster, tmp_path):  # noqa: F811
    rows = [{"text": f"post number {i}"} for i in range(4)]
    task = app_task("writers_ray_app", writers, ["alice", "bob"], train=rows, eval=rows[:2])
    cfg = tiny_cfg(
        "train.max_steps=2",
        "distributed.backend=ray",
        f"distributed.address={ray_cluster}",
        "distributed.num_workers_per_policy=1",
        *(f"{k}={v}" for k, v in CPU.items()),
    )
    tr = Trainer(cfg, task=task, run_dir=tmp_path / "run")
    try:
        history = tr.train()
        evaluation = tr.evaluate()
    finally:
        shutdown_team(tr.team)
    assert [m["step"] for m in history] == [1, 2]
    for m in history:
        assert m["app/dropped_samples"] == 0.0 and m["turns/mean"] == 2.0
        assert {"loss/alice", "loss/bob"} <= set(m)
    assert "eval/reward/mean" in evaluation
