"""Issue 11, items 9 and 13: rewards enter a rollout validated and on time.

* Item 13: a non-finite or non-numeric reward (team, local or component) from an env or a
  user reward function is a RewardError naming the example, the turn and the agents, raised
  where the reward enters the rollout (joint tree and agent-turn tree alike), and safe numeric
  types are converted to float.
* Item 9: an env step past ``step_timeout`` ends its episode as failed (reward 0), counted as
  ``episodes/timeouts``; with 2 reward workers and a hung reward, SIGINT ends the process
  within seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from helpers.rollout_joint import _joint
from helpers.rollout_turns import _turns

from teamrl.envs.base import Step
from teamrl.rollout.common import EnvRunner, RewardError, as_reward

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


BAD = {
    "string": "1.0",
    "none": None,
    "inf": float("inf"),
    "nan": float("nan"),
    "minus_inf": -float("inf"),
    "tensor_2": torch.tensor([1.0, 2.0]),
    "list": [1.0],
    "numpy_nan": np.float64("nan"),
}


@pytest.mark.parametrize("name", sorted(BAD))
@pytest.mark.parametrize("rollout", [_joint, _turns])
def test_bad_team_reward_is_a_reward_error_naming_example_turn_agent(name, rollout):
    with pytest.raises(RewardError, match=r"example 3, turn 0.*agents \['a'.*reward error"):
        rollout(lambda c, e: BAD[name], max_turns=1)


def test_bad_component_and_local_rewards_are_named():
    with pytest.raises(RewardError, match=r"reward_components\['style'\]"):
        _joint(lambda c, e: (1.0, {"style": float("inf")}), max_turns=1)
    step = Step(observations={}, reward=1.0, local_rewards={"b": "0.5"})
    with pytest.raises(RewardError, match=r"local_rewards\['b'\] \(agent b\)"):
        from teamrl.rollout.common import check_rewards

        check_rewards(step, "example 0, turn 1")


@pytest.mark.parametrize(
    "value, expected",
    [
        (1, 1.0),
        (True, 1.0),
        (np.float32(0.5), 0.5),
        (np.int64(2), 2.0),
        (torch.tensor(0.25), 0.25),
        (torch.tensor([0.75]), 0.75),
    ],
)
def test_safe_numbers_become_floats(value, expected):
    got = as_reward(value, "the team reward", "here")
    assert type(got) is float and got == expected
    result = _joint(lambda c, e: value, max_turns=1)
    assert [s.reward for s in result.samples] == [expected] * 4
    assert all(type(s.reward) is float for s in result.samples)


def _hang(completions, example):
    threading.Event().wait()  # never returns


def test_a_hung_reward_times_out_and_the_episode_counts_as_failed():
    start = time.monotonic()
    result = _joint(_hang, max_turns=2, step_timeout=1.0, reward_workers=2)
    assert time.monotonic() - start < 10
    assert result.metrics["episodes/timeouts"] == 2.0  # both joint actions of the root
    assert [s.reward for s in result.samples] == [0.0] * 4
    result = _turns(_hang, max_turns=1, step_timeout=0.5)
    assert result.metrics["episodes/timeouts"] >= 1.0
    assert all(s.reward == 0.0 for s in result.samples)


def test_runner_without_timeouts_counts_none():
    result = _joint(lambda c, e: 1.0, max_turns=1, step_timeout=1.0)
    assert result.metrics["episodes/timeouts"] == 0.0
    assert EnvRunner(3).map(lambda x: x * 2, [1, 2, 3, 4]) == [2, 4, 6, 8]
    with pytest.raises(ZeroDivisionError):
        EnvRunner(2).map(lambda x: 1 / x, [1, 0, 2])


SCRIPT = """
import signal, sys, threading
# As a terminal does: a test runner started in the background (nohup, CI) ignores SIGINT, and
# the child would inherit that.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {repo!r})
from teamrl.envs.functional import FunctionEnv
from teamrl.algorithms.magrpo import joint_rollout
from tests.helpers.rollout_joint import ScriptedTeam

first = threading.Lock()

def hang(completions, example):
    if first.acquire(blocking=False):  # two workers hang: say "ready" once, not interleaved
        print("ready", flush=True)
    threading.Event().wait()

env = lambda: FunctionEnv(["a", "b"], hang)
try:
    joint_rollout(ScriptedTeam(), env, [(0, {{"prompt": "p"}})], num_generations=2,
                  max_turns=1, reward_workers=2, step_timeout=0)
except KeyboardInterrupt:
    print("interrupted: the reward was still running", file=sys.stderr)
    sys.exit(130)
"""


def test_ctrl_c_ends_a_two_worker_run_with_a_hung_reward():
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT.format(repo=REPO)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=90)  # a hang is forever; a busy machine is slow
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and took < 45, (took, err)
    assert err.strip() == "interrupted: the reward was still running"


def test_env_sandbox_isolation_reaches_the_sandbox(monkeypatch, tmp_path):
    from helpers.runs import tiny_overrides

    from teamrl.config import EnvConfig, load_config
    from teamrl.envs.base import Task
    from teamrl.envs.functional import FunctionEnv
    from teamrl.tasks import run_program as rp
    from teamrl.tasks.registry import task_from_config
    from teamrl.trainer import Trainer

    seen = {}
    monkeypatch.setattr("teamrl.sandbox.run_python", lambda code, **kw: seen.update(kw))
    try:
        # looking a task up has no side effect on the sandbox ...
        task_from_config(EnvConfig(name="digits", sandbox_isolation="userns"))
        rp.run_program("print(1)")
        assert seen["isolation"] == "auto"
        # ... the run sets it, explicitly, also for a task built in Python
        task = Task(
            "mine", lambda: FunctionEnv(["alice", "bob"], lambda c, ex: 0.0), [{"prompt": "p"}]
        )
        cfg = load_config(
            None, tiny_overrides(**{"env.sandbox_isolation": "userns", "env.name": "mine"})
        )
        # (no preflight: it refuses "userns" as root, tests/sandbox/test_sandbox_disk.py)
        Trainer(cfg, task=task, run_dir=tmp_path, preflight=False)
        rp.run_program("print(1)")
        assert seen["isolation"] == "userns" and rp._pool.cache_info().currsize == 0
    finally:
        rp.set_isolation("auto")
    with pytest.raises(ValueError, match="env.sandbox_isolation"):
        rp.set_isolation("chroot")
    from teamrl.sandbox import ISOLATION_MODES

    assert rp.ISOLATION_CHOICES == ("auto", *ISOLATION_MODES)  # every mode can be set
    for mode in ISOLATION_MODES:
        rp.set_isolation(mode)
    rp.set_isolation("auto")
    with pytest.raises(Exception, match="sandbox_isolation"):
        load_config(None, ["env.sandbox_isolation=chroot"])
