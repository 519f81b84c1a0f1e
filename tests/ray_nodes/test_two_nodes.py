"""Two Ray nodes on one machine (tests/ray_nodes/two_nodes.py): a policy's worker group placed
across both (distributed.placement_strategy=STRICT_SPREAD, one worker a node) updates as one
process does; a run that loses the worker node mid-step stops with one line naming the node,
the last checkpoint and the resume command, and `--resume` on a fresh two-node cluster ends
where an uninterrupted run does.

The test process joins a cluster only in the first test (as the other tests/ray modules do
theirs); the runs are `teamrl train` subprocesses with `distributed.address` the head's."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray.util")  # not the tests/ray folder itself
# tests/ray's plain helpers: the exactness check on a worker group, a run's metrics and weights
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ray"))

import pausing_task  # noqa: E402
import ray  # noqa: E402
import torch  # noqa: E402
from exactness import SGD  # noqa: E402
from helpers.runs import tiny_overrides  # noqa: E402
from ray_helpers import (  # noqa: E402
    SIGNAL,
    Replicas,
    check,
    cli,
    metrics,
    moved,
    one_process_step,
    ray_cfg,
    weights,
)
from two_nodes import TwoNodes, node_env  # noqa: E402

from teamrl.config import dump_config, load_config  # noqa: E402

SPREAD = {"distributed.placement_strategy": "STRICT_SPREAD"}  # one worker on each node
TASK = pausing_task.__file__  # what the runs --import
EXIT_S = 180.0  # bounds the run's end after the node is lost (it takes seconds): no hang


@pytest.fixture
def nodes_env(monkeypatch):
    """The drivers' environment: this process's (the first test joins the cluster) and the
    runs' (inherited from it)."""
    for key, value in node_env().items():
        monkeypatch.setenv(key, value)


def test_a_group_across_two_nodes_updates_as_one_process(tmp_path, nodes_env):
    cfg = load_config(None, tiny_overrides("lora", 1, **SGD, **SPREAD))
    by_policy, before, after, max_len = one_process_step(tmp_path / "one", cfg, SIGNAL)
    with TwoNodes(tmp_path / "nodes") as nodes:
        if ray.is_initialized():  # tests/ray's local cluster, in a run of both folders
            ray.shutdown()
        ray.init(address=nodes.address, log_to_driver=False)
        try:
            replicas = Replicas(cfg, 2)
            try:
                where = [info["node_id"] for info in replicas.group.info]
                assert sorted(where) == sorted([nodes.head_id, nodes.worker_id])
                got = replicas.step(cfg, by_policy, max_len, before)
            finally:
                replicas.group.shutdown()
        finally:
            ray.shutdown()
    check(got, after, before, "lora, one worker on each of 2 nodes")
    assert max(moved(before[n], after[n]) for n in before) > 1e-4  # the step did something


def test_a_lost_node_stops_the_run_in_one_line_and_resume_continues_exactly(
    tmp_path, nodes_env, monkeypatch
):
    cfg_path, run, whole = tmp_path / "config.yaml", tmp_path / "run", tmp_path / "whole"
    with TwoNodes(tmp_path / "nodes") as nodes:
        cfg = ray_cfg(nodes.address, "lora", 3, 2, **{"env.name": pausing_task.NAME, **SPREAD})
        dump_config(cfg, cfg_path)
        # uninterrupted: 3 steps, one rank on each node (the run's placement line says so)
        done = cli(cfg_path, whole, "--import", TASK)
        assert done.wait(timeout=600) == 0, done.stderr.read()
        placed = re.findall(r"rank (\d) on node (\w+) ", done.stderr.read())
        assert sorted(node for _, node in placed) == sorted([nodes.head_id, nodes.worker_id])

        # the same run, its worker node lost while step 2 runs (its reward waits for "go")
        signals = tmp_path / "signals"
        signals.mkdir()
        monkeypatch.setenv("TEAMRL_TEST_PAUSE_AFTER", str(run / "checkpoints" / "step-1"))
        monkeypatch.setenv("TEAMRL_TEST_SIGNALS", str(signals))
        killed = cli(cfg_path, run, "--import", TASK)
        wait_for(signals / "paused", killed)
        nodes.kill_worker()
        (signals / "go").touch()
        try:
            code = killed.wait(timeout=EXIT_S)
        except subprocess.TimeoutExpired:
            killed.send_signal(signal.SIGKILL)
            raise AssertionError(f"the run did not end within {EXIT_S:g} s of the loss") from None
        stderr = killed.stderr.read()
        assert code == 1, stderr
        assert "Traceback" not in stderr, stderr
        errors = [line for line in stderr.splitlines() if line.startswith("teamrl: error:")]
        assert len(errors) == 1, stderr
        line = errors[0]
        assert re.search(rf"worker \d of 2 of policy group 'lora' .*node {nodes.worker_id} ", line)
        assert "its node was lost" in line, line
        assert f"last checkpoint: {run / 'checkpoints' / 'step-1'};" in line, line
        assert line.endswith(f"resume with: teamrl train {run} --resume"), line
        assert not (run / "checkpoints" / "step-2").exists()  # at most the step in flight lost
    monkeypatch.delenv("TEAMRL_TEST_PAUSE_AFTER")

    # a fresh two-node cluster (another address): --resume continues from step-1
    with TwoNodes(tmp_path / "nodes-again") as again:
        address = f"distributed.address={again.address}"
        resumed = cli(cfg_path, run, "--resume", "--import", TASK, address)
        assert resumed.wait(timeout=600) == 0, resumed.stderr.read()
    assert [r["step"] for r in metrics(run)] == [1, 2, 3]
    assert metrics(run) == metrics(whole)
    got, want = weights(run, 3), weights(whole, 3)
    for name in want:
        for key in want[name]:
            assert torch.equal(got[name][key], want[name][key]), (name, key)


def wait_for(path, proc: subprocess.Popen, timeout: float = 600) -> None:
    """Until ``path`` exists (the run's reward wrote it); the run must still be going."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, f"no {path} within {timeout:g} s"
        time.sleep(0.05)
