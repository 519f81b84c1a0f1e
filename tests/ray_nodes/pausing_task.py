"""The task of the two-node runs (``teamrl train ... --import`` this file): the toy digits task,
whose reward pauses once, in the first step after a given checkpoint was written, until the
test says go. So the test kills a node while a step runs, with no race: the trainer wrote
``step-1`` before step 2 began, and the reward of step 2 waits for the test.

    TEAMRL_TEST_PAUSE_AFTER  a checkpoint folder (unset: never pause)
    TEAMRL_TEST_SIGNALS      a folder: the reward writes ``paused`` in it, the test ``go``

The pause changes no value: runs with and without it train alike.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from teamrl.envs.base import Task, register_task
from teamrl.envs.functional import FunctionEnv
from teamrl.tasks.toy import digits_reward

NAME = "digits_pausing"
WAIT_S = 300.0  # the test says go within seconds; this only ends a forgotten run
_paused = False


def pausing_reward(completions: dict[str, str], example: dict):
    global _paused
    after = os.environ.get("TEAMRL_TEST_PAUSE_AFTER")
    if after and not _paused and Path(after).is_dir():
        _paused = True
        signals = Path(os.environ["TEAMRL_TEST_SIGNALS"])
        (signals / "paused").write_text(str(os.getpid()))
        deadline = time.monotonic() + WAIT_S
        while not (signals / "go").exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {signals / 'go'} within {WAIT_S:g} s")
            time.sleep(0.05)
    return digits_reward(completions, example)


@register_task(NAME, "Test: the digits task, whose reward can pause once (tests/ray_nodes).")
def digits_pausing(n_train: int = 32, agents: tuple = ("alice", "bob")) -> Task:
    def make_env():
        return FunctionEnv(
            agents=list(agents),
            prompt=lambda ex, agent: f"Count to {ex['n']}.",
            reward=pausing_reward,
        )

    examples = [{"n": 3 + i} for i in range(n_train)]
    return Task(NAME, make_env, examples, agents={a: f"You are {a}." for a in agents})
