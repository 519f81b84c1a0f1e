"""Nothing lost to a bad reward (issue 44, item 3): a step that fails in the user's code (a
reward that raises or returns NaN, a prompt function that raises) writes the checkpoint of the
last completed step, exactly as an uninterrupted run has it, and ends with one line naming the
example, turn, agents, the user's function, that checkpoint and the resume command."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pytest
from helpers.cli import one_line_error
from helpers.runs import tiny_overrides

from teamrl.cli import main
from teamrl.config import load_config
from teamrl.envs.functional import FunctionEnv
from teamrl.rollout.common import EnvError, RewardError
from teamrl.run import files as run_files
from teamrl.tasks.toy import digits_reward, digits_task
from teamrl.trainer import Trainer

KEYS = ("step", "reward/mean", "loss/shared", "lr/shared", "completion_length/alice")


class Broken:
    """Whether the user's code is broken now: the tests switch it on at one step."""

    on = False


def reward(completions, example):
    if Broken.on:
        return float("nan")
    return digits_reward(completions, example)


def prompt(example, agent):
    if Broken.on:
        raise ValueError("no such topic")
    return f"Count to {example['n']}."


def fixed_prompt(example, agent):
    return f"Count to {example['n']}."


def task(reward_fn=digits_reward, prompt_fn=fixed_prompt):
    """The digits task (its split and order) with these user functions."""
    env = lambda: FunctionEnv(["alice", "bob"], reward_fn, prompt=prompt_fn)  # noqa: E731
    return dataclasses.replace(digits_task(), make_env=env)


def break_at(monkeypatch, step: int) -> None:
    """The user's code breaks at 1-based step ``step`` (after the preflight's trial of it)."""
    real = Trainer.train_step

    def train_step(self):
        Broken.on = self.step + 1 >= step
        return real(self)

    monkeypatch.setattr(Trainer, "train_step", train_step)
    monkeypatch.setattr(Broken, "on", False)


def config(steps: int, save_steps: int):
    extra = {"train.prompts_per_step": 2, "log.save_steps": save_steps, "log.save_total_limit": 10}
    return load_config(None, tiny_overrides("shared", steps, **extra))


def rows(run: Path) -> list[dict]:
    return [{k: r.get(k) for k in KEYS} for r in run_files.read_jsonl(run / "metrics.jsonl")]


def weights(run: Path, step: int) -> dict:
    from safetensors.torch import load_file

    path = run / "checkpoints" / f"step-{step}" / "policies" / "shared" / "model.safetensors"
    return {k: v.tolist() for k, v in load_file(str(path)).items()}


@pytest.mark.parametrize(
    "broken, fails_at, expected",
    [
        # step 5 fails with a save every 3 steps: step 4 is written on the way out
        (
            "reward",
            5,
            r"example \d+, turn 0, node root, joint 0, agents \['alice', 'bob'\]: "
            r"reward error: the team reward is nan, returned by reward \(test_failed_step\.py:\d+\)",
        ),
        # step 4 fails: step 3 was just saved, and is the one named
        (
            "prompt",
            4,
            r"example \d+, reset: env\.reset raised ValueError at "
            r"test_failed_step\.py:\d+ in prompt: no such topic",
        ),
    ],
)
def test_a_step_that_fails_in_user_code_checkpoints_the_last_completed_step(
    tmp_path, monkeypatch, broken, fails_at, expected
):
    steps, save = 6, 3
    ref = Trainer(config(steps, 1), task=task(), run_dir=tmp_path / "ref")  # every step kept
    ref.train()

    break_at(monkeypatch, fails_at)
    bad = task(
        reward if broken == "reward" else digits_reward,
        prompt if broken == "prompt" else fixed_prompt,
    )
    run = tmp_path / "run"
    error = RewardError if broken == "reward" else EnvError
    with pytest.raises(error) as failed:
        Trainer(config(steps, save), task=bad, run_dir=run).train()
    message = str(failed.value)
    last = fails_at - 1
    ckpt = run / "checkpoints" / f"step-{last}"
    assert message.startswith(f"step {fails_at} failed and was not applied: "), message
    assert __import__("re").search(expected, message), message
    assert message.endswith(
        f"; checkpoint of step {last} written to {ckpt}; after fixing it, "
        f"resume with: teamrl train {run} --resume"
    ), message
    assert "\n" not in message
    assert [r["step"] for r in rows(run)] == list(range(1, fails_at))
    assert sorted(p.name for p in (run / "checkpoints").iterdir())[-1] == f"step-{last}"
    assert weights(run, last) == weights(tmp_path / "ref", last)

    # the user fixes their code; the resumed run is the uninterrupted one, bit for bit
    Broken.on = False
    monkeypatch.undo()
    Trainer(config(steps, save), task=task(), run_dir=run).train(resume=True)
    assert rows(run) == rows(tmp_path / "ref")
    assert weights(run, steps) == weights(tmp_path / "ref", steps)


TASK_FILE = """
import os

from teamrl.envs.base import Task, register_task
from teamrl.envs.functional import FunctionEnv

FLAG = {flag!r}


def reward(completions, example):
    if os.path.exists(FLAG):
        return example["score"]
    return min(1.0, len(completions["left"]) / 10)


@register_task("{name}", "A task whose reward breaks while FLAG exists.")
def build():
    rows = [{{"prompt": f"say {{i}}"}} for i in range(4)]
    return Task("{name}", lambda: FunctionEnv(["left", "right"], reward), rows)
"""


def test_the_command_line_ends_with_one_line_and_the_pasted_resume_works(
    tmp_path, capsys, monkeypatch
):
    import uuid

    name, flag = f"flaky_{uuid.uuid4().hex[:8]}", tmp_path / "broken"
    path = tmp_path / "flaky_tasks.py"
    path.write_text(TASK_FILE.format(name=name, flag=str(flag)))
    real = Trainer.train_step

    def train_step(self):  # the reward breaks at step 2
        if self.step + 1 == 2:
            flag.touch()
        return real(self)

    monkeypatch.setattr(Trainer, "train_step", train_step)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: flaky\n")
    tiny = [o for o in tiny_overrides("shared", 3) if not o.startswith(("env.name", "team.ag"))]
    argv = ["train", str(cfg), *tiny, f"env.name={name}", f"log.output_dir={tmp_path}"]
    line = one_line_error(capsys, *argv, "log.save_steps=100", "--import", str(path))
    run = tmp_path / "flaky"
    assert line.startswith("teamrl: error: step 2 failed and was not applied: example "), line
    assert ", turn 0, node root, joint 0, agents ['left', 'right']: env.step raised " in line
    assert "KeyError at flaky_tasks.py:12 in reward: 'score'" in line, line
    ckpt = run / "checkpoints" / "step-1"  # not a save step: written on the way out
    assert f"; checkpoint of step 1 written to {ckpt}; after fixing it, resume with: " in line
    assert line.endswith(" --resume (--traceback or TEAMRL_TRACEBACK=1 shows the stack)")
    assert ckpt.is_dir()

    flag.unlink()  # the fix; the pasted command needs the run folder alone
    monkeypatch.undo()
    command = shlex.split(line.split("resume with: ", 1)[1].split(" (--traceback")[0])
    assert command == ["teamrl", "train", str(run), "--resume"]
    assert main(command[1:]) == 0
    assert [r["step"] for r in run_files.read_jsonl(run / "metrics.jsonl")] == [1, 2, 3]


def test_a_first_step_that_fails_writes_no_checkpoint_and_says_so(tmp_path, monkeypatch):
    break_at(monkeypatch, 1)
    run = tmp_path / "run"
    with pytest.raises(RewardError) as failed:
        Trainer(config(2, 1), task=task(reward), run_dir=run).train()
    assert str(failed.value).endswith(
        "; no step had completed, so no checkpoint; after fixing it, "
        f"resume with: teamrl train {run} --resume"
    )
    assert not list((run / "checkpoints").glob("step-*"))


def test_an_asynchronous_run_raises_the_users_error_and_checkpoints_what_it_consumed(tmp_path):
    """The generator thread's reward error reaches the trainer as itself (not wrapped), and the
    checkpoint's data position is after the last batch the learner consumed, not after what
    the generator drew ahead."""
    from teamrl.execution.asynchronous import AsyncExecution
    from teamrl.execution.local import LocalExecution
    from teamrl.execution.protocol import TrainingRollout
    from teamrl.run.data_stream import DataStream

    cfg = config(3, 100)
    order = DataStream(digits_task().train, cfg.seed, cfg.train.shuffle)
    first, second = order.next(2), order.next(2)
    bad = {ex["n"] for _, ex in second} - {ex["n"] for _, ex in first}
    assert bad and digits_task().train[0]["n"] not in bad  # the preflight's row is fine

    def nan_on_step_2(completions, example):
        return float("nan") if example["n"] in bad else digits_reward(completions, example)

    def factory(cfg, task, data, recipe):
        return AsyncExecution(LocalExecution(cfg, TrainingRollout(recipe, task, cfg), data), cfg)

    run = tmp_path / "run"
    tr = Trainer(cfg, task=task(nan_on_step_2), run_dir=run, execution=factory)
    with pytest.raises(RewardError, match=r"^step 2 failed and was not applied: example "):
        tr.train()
    state = __import__("json").loads((run / "checkpoints/step-1/trainer_state.json").read_text())
    assert state["step"] == 1 and state["data"] == {"epoch": 0, "index": 2}


def test_an_evaluation_that_fails_in_user_code_keeps_its_step(tmp_path, monkeypatch):
    """The evaluation after step 2 fails (its reward returns NaN): step 2 was complete, so its
    metrics are logged and its checkpoint written (saves are every 5 steps), the message says
    the step completed, and a resume with the fixed reward trains as the uninterrupted run."""
    steps = 4

    def cfg(save_steps: int):
        extra = {"eval.eval_steps": 2, "eval.num_examples": 2}
        extra.update(
            {"train.prompts_per_step": 2, "log.save_steps": save_steps, "log.save_total_limit": 10}
        )
        return load_config(None, tiny_overrides("shared", steps, **extra))

    ref = Trainer(cfg(1), task=task(), run_dir=tmp_path / "ref")
    ref.train()

    real = Trainer.evaluate

    def evaluate(self):  # the user's reward is broken in the evaluation after step 2 only
        Broken.on = self.step == 2
        try:
            return real(self)
        finally:
            Broken.on = False

    monkeypatch.setattr(Trainer, "evaluate", evaluate)
    monkeypatch.setattr(Broken, "on", False)
    run = tmp_path / "run"
    with pytest.raises(RewardError) as failed:
        Trainer(cfg(5), task=task(reward), run_dir=run).train()
    message = str(failed.value)
    ckpt = run / "checkpoints" / "step-2"
    assert message.startswith("the evaluation after step 2 failed: "), message
    assert "the team reward is nan, returned by reward (test_failed_step.py:" in message
    assert f"step 2 itself completed and its checkpoint is {ckpt}" in message
    assert message.endswith(f"resume with: teamrl train {run} --resume"), message
    assert [r["step"] for r in rows(run)] == [0, 1, 2]  # step 0: the evaluation before training
    assert weights(run, 2) == weights(tmp_path / "ref", 2)

    monkeypatch.undo()
    Trainer(cfg(5), task=task(), run_dir=run).train(resume=True)
    # training is the uninterrupted run's; only the failed evaluation's scores are missing
    assert rows(run) == rows(tmp_path / "ref")
    assert weights(run, steps) == weights(tmp_path / "ref", steps)
    evals = [
        r["step"] for r in run_files.read_jsonl(run / "metrics.jsonl") if "eval/reward/mean" in r
    ]
    assert evals == [0, 4]
