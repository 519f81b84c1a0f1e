"""A Ray worker's death as the user reads it, without Ray (a stand-in ``ray`` module): the
error names the worker's node by id and address, and a node the cluster marked dead as lost;
``teamrl train`` prints that with the last checkpoint and the resume command in one line and
exits 1. tests/ray_nodes loses a real node."""

from __future__ import annotations

import sys
import types

import pytest
from helpers.runs import tiny_overrides

import teamrl.scale.group as group_module
import teamrl.trainer as trainer_module
from teamrl.cli import main
from teamrl.scale.group import WorkerDiedError, WorkerGroup
from teamrl.scale.placement import GroupPlan

LOST, ALIVE = "b" * 56, "a" * 56  # Ray node ids are 56 hex digits


class Unavailable(Exception):
    """Ray's ActorUnavailableError: the actor's socket closed, no death reported (yet)."""


class FakeRay(types.ModuleType):
    """``ray`` as group.py reads it: ``nodes()`` answers from ``answers`` in turn (the last
    one from then on)."""

    def __init__(self, answers: list[dict[str, bool]]):
        super().__init__("ray")
        self.answers, self.asked = answers, 0
        self.exceptions = types.SimpleNamespace(ActorUnavailableError=Unavailable)

    def init(self):  # require_ray checks that there is one
        raise AssertionError("not called")

    def nodes(self):
        alive = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        return [{"NodeID": node, "Alive": up} for node, up in alive.items()]


def group_of_two() -> WorkerGroup:
    group = WorkerGroup.__new__(WorkerGroup)  # no Ray: only what _died reads
    group.plan = GroupPlan("shared", ("shared",), ("alice", "bob"), "tiny-llama", 2, 1.0, 0.0)
    group.info = [
        {"pid": 11, "node": "10.0.0.2", "node_id": ALIVE},
        {"pid": 22, "node": "10.0.0.3", "node_id": LOST},
    ]
    return group


@pytest.fixture
def no_sleep(monkeypatch):
    monkeypatch.setattr(group_module.time, "sleep", lambda s: None)


def test_a_worker_on_a_dead_node_is_named_with_its_node_as_lost(monkeypatch, no_sleep):
    ray = FakeRay([{ALIVE: True, LOST: False}])
    monkeypatch.setitem(sys.modules, "ray", ray)
    death = group_of_two()._died(1, "update", RuntimeError("The actor died unexpectedly.\nmore"))
    assert death == (
        "worker 1 of 2 of policy group 'shared' (policies ['shared'], pid 22, node "
        f"{LOST} (10.0.0.3)) died during update: its node was lost (the cluster marked it "
        "dead: every worker on it is gone)"
    )
    err = WorkerDiedError(death)
    assert err.death == death
    assert str(err) == f"{death}. Continue the run from its last checkpoint with --resume"


def test_a_dead_process_on_a_live_node_keeps_rays_first_line(monkeypatch, no_sleep):
    ray = FakeRay([{ALIVE: True, LOST: True}])
    monkeypatch.setitem(sys.modules, "ray", ray)
    death = group_of_two()._died(0, "generate", RuntimeError("The actor died unexpectedly.\nx"))
    assert death.endswith(
        f"node {ALIVE} (10.0.0.2)) died during generate: The actor died unexpectedly."
    )
    assert ray.asked == 1  # a reported death: the cluster is asked once, no waiting


def test_an_unreachable_worker_waits_for_the_health_checks_to_decide(monkeypatch, no_sleep):
    # the actor's socket closed before the head marked its node dead: the third answer says so
    ray = FakeRay([{LOST: True}, {LOST: True}, {LOST: False}])
    monkeypatch.setitem(sys.modules, "ray", ray)
    death = group_of_two()._died(1, "update", Unavailable("Socket closed"))
    assert death.endswith(
        "its node was lost (the cluster marked it dead: every worker on it is gone)"
    )
    assert ray.asked == 3
    # never marked dead within the wait: Ray's own words
    ray = FakeRay([{LOST: True}])
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setattr(group_module, "NODE_DEATH_WAIT_S", 0.0)
    death = group_of_two()._died(1, "update", Unavailable("The actor is unavailable"))
    assert death.endswith("died during update: The actor is unavailable")


def test_train_prints_the_death_the_last_checkpoint_and_the_resume_command(
    tmp_path, capsys, monkeypatch
):
    run = tmp_path / "run"
    for step in (1, 2):  # two checkpoints: the newest is named
        folder = run / "checkpoints" / f"step-{step}"
        folder.mkdir(parents=True)
        for name in ("config.yaml", "trainer_state.json"):
            (folder / name).write_text("{}")
    (run / "checkpoints" / "step-3").mkdir()  # empty: no checkpoint
    death = "worker 1 of 2 of policy group 'shared' (...) died during update: its node was lost"

    class DiesMidRun:
        def __init__(self, cfg, task, run_dir, preflight):
            pass

        def train(self, resume):
            raise WorkerDiedError(death)

    monkeypatch.setattr(trainer_module, "Trainer", DiesMidRun)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: r\n")
    argv = ["train", str(cfg), *tiny_overrides(steps=5), "--run-dir", str(run), "--resume"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"teamrl: error: {death}; last checkpoint: {run / 'checkpoints' / 'step-2'}; "
        f"resume with: teamrl train {run} --resume"
    )
    assert [line for line in err.splitlines() if "error" in line] == [err.splitlines()[-1]]
