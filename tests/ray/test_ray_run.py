"""Whole runs under Ray: a 3-step run killed (kill -9) after its first checkpoint resumes to
the same metrics and weights as an uninterrupted run; a worker killed mid-step ends the run
with an error naming its policy group and rank, and --resume continues; sandboxed programs
run as Ray tasks with their limits."""

from __future__ import annotations

import os
import signal

import pytest

pytest.importorskip("ray.util")  # not the tests/ray folder itself

import torch  # noqa: E402
from helpers.runs import kill_at_checkpoint  # noqa: E402
from ray_cluster import ray_cluster  # noqa: E402, F401
from ray_helpers import cli, metrics, ray_cfg, weights  # noqa: E402

from teamrl.config import dump_config  # noqa: E402
from teamrl.scale import shutdown_team  # noqa: E402
from teamrl.scale.group import WorkerDiedError  # noqa: E402
from teamrl.trainer import Trainer  # noqa: E402


def test_a_killed_run_resumes_exactly(ray_cluster, tmp_path):  # noqa: F811
    cfg = ray_cfg(ray_cluster, "lora", 3, 1)
    whole = Trainer(cfg, run_dir=tmp_path / "whole")
    try:
        whole.train()
    finally:
        shutdown_team(whole.team)

    cfg_path = tmp_path / "config.yaml"
    dump_config(cfg, cfg_path)
    run = tmp_path / "killed"
    kill_at_checkpoint(cli(cfg_path, run), run, 1)
    assert not (run / "checkpoints" / "step-3").exists()  # it really stopped before the end

    resumed = cli(cfg_path, run, "--resume")
    assert resumed.wait(timeout=240) == 0, resumed.stderr.read()
    assert metrics(run) == metrics(tmp_path / "whole")
    assert [r["step"] for r in metrics(run)] == [1, 2, 3]
    got, want = weights(run, 3), weights(tmp_path / "whole", 3)
    for name in want:
        for k in want[name]:
            assert torch.equal(got[name][k], want[name][k]), (name, k)


def test_a_worker_killed_mid_step_names_it_and_resume_continues(ray_cluster, tmp_path):  # noqa: F811
    cfg = ray_cfg(ray_cluster, "shared", 2, 2)
    tr = Trainer(cfg, run_dir=tmp_path / "run")
    (group,) = tr.team.worker_groups
    pid = group.info[1]["pid"]
    rollout = tr.execution.rollout  # what the execution samples each step with

    def rollout_then_kill(team, examples, step):  # step 2: rollout done, update not yet
        out = rollout(team, examples, step)
        if tr.step == 1:
            os.kill(pid, signal.SIGKILL)
        return out

    tr.execution.rollout = rollout_then_kill
    with pytest.raises(WorkerDiedError) as err:
        tr.train()
    msg = str(err.value)
    assert msg.startswith(f"worker 1 of 2 of policy group 'shared' (policies ['shared'], pid {pid}")
    assert "died during update" in msg and "--resume" in msg
    assert f"node {group.info[1]['node_id']} (" in msg  # Ray's node id, then its address
    assert "its node was lost" not in msg  # a process died; its node lives on
    assert group.workers == []  # the whole group was shut down

    again = Trainer(cfg, run_dir=tmp_path / "run")
    try:
        history = again.train(resume=True)
    finally:
        shutdown_team(again.team)
    assert [h["step"] for h in history] == [2]
    assert [r["step"] for r in metrics(tmp_path / "run")] == [1, 2]


def test_sandboxed_programs_run_as_ray_tasks_with_their_limits(ray_cluster, monkeypatch):  # noqa: F811
    from teamrl.scale import sandbox
    from teamrl.tasks import run_program

    monkeypatch.setattr(run_program, "sandbox_runner", run_program.sandbox_runner)  # restored
    sandbox.install()  # what distributed.sandbox_tasks=true does: code rewards go to Ray
    assert run_program.sandbox_runner is sandbox.ray_sandbox_runner
    out = run_program.run_programs(["print(6 * 7)", "while True:\n    pass\n"], ["", ""], 1.0)
    assert out[0].stdout == "42\n" and out[0].ok
    assert out[1].timed_out and not out[1].ok


def test_code_rewards_under_ray_read_the_report_channel_and_keep_the_isolation(ray_cluster):  # noqa: F811
    # The coding rewards open the sandbox's report channel (report=True): the Ray runner
    # must take it, and run each program under the isolation this process set
    # (env.sandbox_isolation), not the remote task's default.
    from teamrl.scale import sandbox
    from teamrl.tasks import run_program
    from teamrl.tasks.coding.reward import leveled_reward

    aux = "def aux(x):\n    return x * x\n"
    main = (
        "def f(xs):\n    total = 0\n    for x in xs:\n        total += aux(x)\n    return total\n"
    )
    test = (
        "def check(candidate):\n    assert candidate([1, 2]) == 5\n    assert candidate([]) == 0\n"
    )
    prompt = "def f(xs):\n    '''Sum of squares.'''\n"
    try:
        sandbox.install()
        r = leveled_reward(aux, main, prompt=prompt, test=test, entry_point="f")
        assert r.all_passed and r.score > 0  # the harness's report came back through Ray
        # a mode this process may not use is refused inside the task: the mode travelled
        refused = "userns" if os.geteuid() == 0 else "namespaces"
        run_program.set_isolation(refused)
        with pytest.raises(Exception, match=refused):
            run_program.run_programs(["print(1)"], [""], 5.0)
    finally:
        run_program.set_isolation("auto")
        sandbox.uninstall()
    assert run_program.sandbox_runner is run_program.pool_runner  # the pool again
