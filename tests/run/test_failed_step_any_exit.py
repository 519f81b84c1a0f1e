"""One net under every step (issue 53, case 2): whatever ends a step, not only teamrl's own
one-line errors, ends the command line with one line naming the step, the cause, the checkpoint
of the last completed step (written on the way out) and the pasteable resume command, with exit
status 2; a resume after the fix ends as the uninterrupted run.

The cases: ``sys.exit(0)`` and ``sys.exit("...")`` in a reward (on a reward worker thread too)
and in an evaluation's reward (``sys.exit`` in user code is an error of that code, never a clean
exit), a ``KeyboardInterrupt`` the user's code raises (not a signal: no claim of a checkpoint
that is not there), a task's ``make_env`` that raises at a later step, an env that cannot be
deep-copied once it holds a lock, and a log append that fails on a full disk or on descriptors
(retried once, then a ``RunError`` line with the step's checkpoint and its unwritten lines)."""

from __future__ import annotations

import errno
import json
import os
import shlex
import uuid
from pathlib import Path

import pytest
from helpers.runs import tiny_overrides

from teamrl.cli import main
from teamrl.rollout.common import RewardError
from teamrl.run import files as run_files
from teamrl.run import logging as run_logging
from teamrl.run.checkpoints import checkpoint_folders, verify_checkpoint
from teamrl.run.interrupt import StepFailed
from teamrl.trainer import Trainer

STEPS = 4  # the user's code breaks at step 3: steps 1 and 2 complete, no periodic save
KEYS = ("step", "reward/mean", "loss/shared", "lr/shared", "completion_length/alice")
TRACEBACK = " (--traceback or TEAMRL_TRACEBACK=1 shows the stack)"

TASK_FILE = """
import os
import sys
import threading

from teamrl.envs.base import Task, register_task
from teamrl.envs.functional import FunctionEnv
from teamrl.tasks.toy import digits_reward

FLAG = {flag!r}  # the user's code is broken while this file exists
MODE = {mode!r}


def reward(completions, example):
    if os.path.exists(FLAG):
        if MODE == "exit_thread" and threading.current_thread() is threading.main_thread():
            raise AssertionError("the reward was to run on a reward worker thread")
        if MODE == "exit_0":
            sys.exit(0)
        if MODE in ("exit_message", "exit_thread"):
            sys.exit("the reward gave up")
        if MODE == "interrupt":
            raise KeyboardInterrupt
    return digits_reward(completions, example)


class Env(FunctionEnv):
    def reset(self, example):
        if MODE == "lock" and os.path.exists(FLAG):
            self.guard = threading.Lock()  # copy.deepcopy cannot copy a lock
        return super().reset(example)


def make_env():
    if MODE == "make_env" and os.path.exists(FLAG):
        raise RuntimeError("the simulator has no licence left")
    if MODE == "make_env_exit" and os.path.exists(FLAG):
        sys.exit(0)
    return Env(["alice", "bob"], reward, prompt=lambda ex, agent: f"Count to {{ex['n']}}.")


@register_task("{name}", "A task whose user code breaks while FLAG exists.")
def build():
    rows = [{{"n": 3 + i}} for i in range(40)]
    return Task("{name}", make_env, rows[:32], rows[32:])
"""


class Setup:
    """A task file in ``tmp_path`` whose code breaks in ``mode`` while ``flag`` exists, and the
    command line that trains it."""

    def __init__(self, tmp_path: Path, mode: str, *extra: str):
        self.name = f"broken_{mode}_{uuid.uuid4().hex[:8]}"
        self.flag = tmp_path / "broken"
        self.file = tmp_path / f"{self.name}_tasks.py"
        self.file.write_text(TASK_FILE.format(name=self.name, flag=str(self.flag), mode=mode))
        self.tmp = tmp_path
        cfg = tmp_path / "c.yaml"
        cfg.write_text("run_name: run\n")
        tiny = [o for o in tiny_overrides("shared", STEPS) if not o.startswith("env.name")]
        self.argv = [
            "train",
            str(cfg),
            *tiny,
            f"env.name={self.name}",
            f"log.output_dir={tmp_path}",
            "train.prompts_per_step=2",
            "log.save_steps=100",
            "log.save_total_limit=10",
            *extra,
            "--import",
            str(self.file),
        ]
        self.run = tmp_path / "run"

    def train(self, capsys, *more: str) -> tuple[object, list[str]]:
        """The command line's exit status (a ``SystemExit`` that escaped it, as such) and its
        stderr lines."""
        capsys.readouterr()
        try:
            code: object = main([*self.argv, *more])
        except SystemExit as escaped:  # the user's sys.exit ended the command line itself
            code = f"SystemExit({escaped.code!r}) escaped"
        return code, capsys.readouterr().err.strip().splitlines()

    def reference(self, capsys) -> Path:
        """The uninterrupted run, the user's code never broken, every step kept."""
        code, err = self.train(capsys, "run_name=ref", "log.save_steps=1")
        assert code == 0, err
        return self.tmp / "ref"

    def resume(self, line: str) -> None:
        """The user fixes their code and pastes the resume command of ``line``."""
        self.flag.unlink(missing_ok=True)
        command = shlex.split(line.split("resume with: ", 1)[1].removesuffix(TRACEBACK))
        assert command == ["teamrl", "train", str(self.run), "--resume"], line
        assert main(command[1:]) == 0


def break_at_step(monkeypatch, setup: Setup, step: int) -> None:
    """The user's code breaks from 1-based step ``step`` on (after the preflight's trial)."""
    real = Trainer.train_step

    def train_step(self):
        if self.step + 1 == step:
            setup.flag.touch()
        return real(self)

    monkeypatch.setattr(Trainer, "train_step", train_step)


def one_line(code, err: list[str]) -> str:
    assert code == 2, (code, err)
    assert len(err) == 1, err
    assert err[0].startswith("teamrl: error: "), err
    return err[0]


def assert_last_checkpoint(run: Path, step: int) -> Path:
    """The newest checkpoint is ``step-<step>``, intact, holding that step."""
    ckpt = run / "checkpoints" / f"step-{step}"
    assert [p.name for p in checkpoint_folders(run)] == [f"step-{step}"]
    assert verify_checkpoint(ckpt) is None
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["step"] == step
    return ckpt


def rows(run: Path) -> list[dict]:
    return [{k: r.get(k) for k in KEYS} for r in run_files.read_jsonl(run / "metrics.jsonl")]


def weights(run: Path, step: int) -> dict:
    from safetensors.torch import load_file

    path = run / "checkpoints" / f"step-{step}" / "policies" / "shared" / "model.safetensors"
    return {k: v.tolist() for k, v in load_file(str(path)).items()}


def assert_same_as(run: Path, ref: Path) -> None:
    assert rows(run) == rows(ref)
    assert weights(run, STEPS) == weights(ref, STEPS)


# --- the user's code ends a step --------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, cause, extra",
    [
        ("exit_0", r"env\.step raised SystemExit\(0\) at {file}:\d+ in reward; ", ()),
        (
            "exit_message",
            r"env\.step raised SystemExit\('the reward gave up'\) at {file}:\d+ in reward; ",
            (),
        ),
        # four reward workers: the sys.exit is raised on a worker thread
        (
            "exit_thread",
            r"env\.step raised SystemExit\('the reward gave up'\) at {file}:\d+ in reward; ",
            ("env.reward_workers=4",),
        ),
        ("interrupt", r"not applied: KeyboardInterrupt at {file}:\d+ in reward; ", ()),
        (
            "make_env",
            r"not applied: RuntimeError at {file}:\d+ in make_env: the simulator has no licence",
            (),
        ),
        ("make_env_exit", r"not applied: SystemExit\(0\) at {file}:\d+ in make_env; ", ()),
        ("lock", r"not applied: Env cannot be copied to branch a rollout", ()),
    ],
)
def test_whatever_the_users_code_raises_ends_in_one_line_with_the_checkpoint(
    tmp_path, capsys, monkeypatch, mode, cause, extra
):
    import re

    setup = Setup(tmp_path, mode, *extra)
    break_at_step(monkeypatch, setup, 3)
    code, err = setup.train(capsys)
    line = one_line(code, err)
    ckpt = assert_last_checkpoint(setup.run, 2)  # not a save step: written on the way out
    assert line.startswith("teamrl: error: step 3 failed and was not applied: "), line
    assert re.search(cause.format(file=re.escape(setup.file.name)), line), line
    assert line.endswith(
        f"; checkpoint of step 2 written to {ckpt}; after fixing it, resume with: "
        f"teamrl train {setup.run} --resume" + TRACEBACK
    ), line
    assert [r["step"] for r in rows(setup.run)] == [1, 2]


def test_sys_exit_in_make_env_before_training_is_an_error_too(tmp_path, capsys):
    """The command line calls the task's make_env before any step: its sys.exit(0) is one
    error line and exit status 2, not a silent clean exit."""
    import re

    setup = Setup(tmp_path, "make_env_exit")
    setup.flag.touch()
    line = one_line(*setup.train(capsys))
    assert re.fullmatch(
        rf"teamrl: error: SystemExit\(0\) at {re.escape(setup.file.name)}:\d+ in make_env: "
        rf"sys\.exit in the user's code is an error, not a clean exit{re.escape(TRACEBACK)}",
        line,
    ), line
    assert not setup.run.exists()


@pytest.mark.parametrize("mode", ["exit_0", "interrupt", "make_env"])
def test_a_resume_after_the_fix_is_the_uninterrupted_run(tmp_path, capsys, monkeypatch, mode):
    """The checkpoint written on the way out is the uninterrupted run's after step 2 (its RNG
    streams and data position put back to where step 3 began)."""
    setup = Setup(tmp_path, mode)
    ref = setup.reference(capsys)
    break_at_step(monkeypatch, setup, 3)
    line = one_line(*setup.train(capsys))
    assert weights(setup.run, 2) == weights(ref, 2)
    monkeypatch.undo()
    setup.resume(line)
    assert_same_as(setup.run, ref)


@pytest.mark.parametrize(
    "mode, cause",
    [
        ("exit_0", "env.step raised SystemExit(0) at "),
        ("exit_message", "env.step raised SystemExit('the reward gave up') at "),
    ],
)
def test_sys_exit_in_an_evaluation_keeps_its_step(tmp_path, capsys, monkeypatch, mode, cause):
    """The evaluation after step 2 calls sys.exit in its reward: step 2 completed, so its
    metrics are logged and its checkpoint written; one line says so."""
    setup = Setup(tmp_path, mode, "eval.eval_steps=2", "eval.num_examples=2")
    real = Trainer.evaluate

    def evaluate(self):  # broken in the evaluation after step 2 only
        if self.step == 2:
            setup.flag.touch()
        return real(self)

    monkeypatch.setattr(Trainer, "evaluate", evaluate)
    line = one_line(*setup.train(capsys))
    ckpt = assert_last_checkpoint(setup.run, 2)
    assert line.startswith("teamrl: error: the evaluation after step 2 failed: example "), line
    assert cause + f"{setup.file.name}:" in line, line
    assert f"; step 2 itself completed and its checkpoint is {ckpt} (" in line, line
    assert line.endswith(f"resume with: teamrl train {setup.run} --resume" + TRACEBACK), line
    assert [r["step"] for r in rows(setup.run)] == [0, 1, 2]


@pytest.mark.parametrize(
    "mode, error, cause",
    [
        ("exit_0", RewardError, SystemExit),  # in a reward: the reward's error, as any other
        ("interrupt", StepFailed, KeyboardInterrupt),
        ("make_env", StepFailed, RuntimeError),
    ],
)
def test_the_python_api_raises_one_error_caused_by_the_users_exception(
    tmp_path, monkeypatch, mode, error, cause
):
    """In Python, what the user's code raised is the ``__cause__`` of the one-line error
    ``Trainer.train()`` raises, never a clean exit; the checkpoint of step 2 is written."""
    from teamrl.config import load_config
    from teamrl.plugins import import_tasks

    setup = Setup(tmp_path, mode)
    import_tasks([str(setup.file)])
    cfg = load_config(None, [o for o in setup.argv[2:] if o != "--import" and "=" in o])
    break_at_step(monkeypatch, setup, 3)
    try:  # a KeyboardInterrupt that escaped would end the whole pytest session: caught here
        Trainer(cfg, run_dir=setup.run).train()
    except BaseException as raised:
        failed = raised
    else:
        pytest.fail("the run did not fail")
    assert isinstance(failed, error), repr(failed)
    assert str(failed).startswith("step 3 failed and was not applied: "), failed
    assert isinstance(failed.__cause__, cause)
    assert_last_checkpoint(setup.run, 2)


def test_an_update_that_fails_half_way_writes_nothing_and_says_so(tmp_path, capsys, monkeypatch):
    """An interrupt raised inside the update leaves weights of no step: nothing is written, and
    the one line names the last checkpoint there is (none here) and the resume command."""
    setup = Setup(tmp_path, "none")
    real = Trainer.update_team

    def update_team(self, work):
        if self.step + 1 == 3:
            raise KeyboardInterrupt
        return real(self, work)

    monkeypatch.setattr(Trainer, "update_team", update_team)
    line = one_line(*setup.train(capsys))
    assert line.startswith(
        "teamrl: error: step 3 failed while its update was being applied: KeyboardInterrupt "
    ), line
    assert "so nothing was written; no checkpoint was written (a resume starts from step 0)" in line
    assert not checkpoint_folders(setup.run)


# --- the run's own log lines cannot be written ------------------------------------------------


def fail_appends(monkeypatch, setup: Setup, file: str, code: int, times: int) -> list[Path]:
    """From step 3 on, the next ``times`` appends to ``file`` raise OSError(``code``) (the
    logger retries once); returns the paths every failed append was for."""
    real = run_logging.append_line
    failed: list[Path] = []
    left = [times]

    def append_line(path, line):
        if path.name == file and setup.flag.exists() and left[0] > 0:
            left[0] -= 1
            failed.append(path)
            raise OSError(code, os.strerror(code))
        return real(path, line)

    monkeypatch.setattr(run_logging, "append_line", append_line)
    break_at_step(monkeypatch, setup, 3)  # the flag: the user's code never reads it here
    return failed


@pytest.mark.parametrize(
    "file, code, why",
    [
        ("samples.jsonl", errno.ENOSPC, r"ENOSPC \(No space left on device\), .+ free"),
        (
            "metrics.jsonl",
            errno.EMFILE,
            r"EMFILE \(Too many open files\), the soft limit is \d+ open files",
        ),
    ],
)
def test_a_log_append_that_fails_twice_keeps_the_step_and_its_lines(
    tmp_path, capsys, monkeypatch, file, code, why
):
    """Step 3's update is applied when its log line cannot be written (tried twice): one
    ``RunError`` line, the checkpoint of step 3 written with the lines it could not write, and a
    resume that writes them ends with the uninterrupted run's metrics, samples and weights."""
    import re

    setup = Setup(tmp_path, "none")
    ref = setup.reference(capsys)
    failed = fail_appends(monkeypatch, setup, file, code, times=2)
    line = one_line(*setup.train(capsys))
    assert failed == [setup.run / file] * 2  # the retry
    ckpt = assert_last_checkpoint(setup.run, 3)
    expected = (
        rf"^teamrl: error: step 3 was applied, then failed: cannot append a line to "
        rf"{re.escape(str(setup.run / file))}: {why}, again after freeing what the run held; "
        rf"checkpoint of step 3 written to {re.escape(str(ckpt))}, with the \d+ log line\(s\) "
        rf"not written \(a resume writes them\); after fixing it, resume with: "
        rf"teamrl train {re.escape(str(setup.run))} --resume$"
    )
    assert re.match(expected, line), line
    assert weights(setup.run, 3) == weights(ref, 3)

    monkeypatch.undo()
    setup.resume(line)
    assert_same_as(setup.run, ref)
    samples = run_files.read_jsonl(setup.run / "samples.jsonl")
    assert samples == run_files.read_jsonl(ref / "samples.jsonl")


def test_a_log_append_that_fails_once_is_retried(tmp_path, capsys, monkeypatch):
    """One EMFILE on metrics.jsonl: the retry writes the line and the run goes on."""
    setup = Setup(tmp_path, "none")
    failed = fail_appends(monkeypatch, setup, "metrics.jsonl", errno.EMFILE, times=1)
    code, err = setup.train(capsys)
    assert code == 0, err
    assert failed == [setup.run / "metrics.jsonl"]
    assert [r["step"] for r in rows(setup.run)] == [1, 2, 3, 4]


def test_an_append_that_fails_half_way_leaves_whole_lines(tmp_path, monkeypatch):
    """A write cut short by a full disk is cut off again: the retry appends to whole lines."""
    path = tmp_path / "metrics.jsonl"
    run_files.append_line(path, '{"step": 1}')
    real = os.write

    def write(fd, data):  # a short write, then a full disk
        if len(data) > 4:
            return real(fd, data[:4])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(run_files.os, "write", write)
    with pytest.raises(OSError):
        run_files.append_line(path, '{"step": 2, "reward": 0.5}')
    monkeypatch.undo()
    assert path.read_text() == '{"step": 1}\n'


# --- the run's checkpoint cannot be written, a second signal -----------------------------------


def test_a_checkpoint_that_cannot_be_written_names_the_last_one(tmp_path, capsys, monkeypatch):
    """The save after step 2 fails (no descriptor left): one line naming step 2, the cause and
    the checkpoint of step 1, from which the resume ends as the uninterrupted run."""
    from teamrl.run import checkpoints

    setup = Setup(tmp_path, "none", "log.save_steps=1")
    ref = setup.reference(capsys)
    real = checkpoints.save_checkpoint

    def save_checkpoint(run_dir, cfg, team, state, *args, **kwargs):
        if state["step"] == 2:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real(run_dir, cfg, team, state, *args, **kwargs)

    monkeypatch.setattr(checkpoints, "save_checkpoint", save_checkpoint)
    line = one_line(*setup.train(capsys))
    ckpt = assert_last_checkpoint(setup.run, 1)
    assert line.startswith(
        "teamrl: error: step 2 completed, but its checkpoint could not be written: OSError at "
    ), line
    assert "in save_checkpoint: [Errno 24] Too many open files; " in line, line
    assert f"; the last checkpoint is {ckpt} (a resume trains the steps after it again); " in line
    monkeypatch.undo()
    setup.resume(line)
    assert_same_as(setup.run, ref)


def test_a_second_signal_aborts_without_claiming_a_checkpoint(tmp_path, capsys, monkeypatch):
    """Two SIGINTs during step 3 of a run with no checkpoint yet: exit 130 at once, one line
    that says no checkpoint was written (not that one is intact)."""
    import signal

    setup = Setup(tmp_path, "none")
    real = Trainer.train_step

    def train_step(self):
        if self.step + 1 == 3:
            os.kill(os.getpid(), signal.SIGINT)  # finish the step, then stop
            os.kill(os.getpid(), signal.SIGINT)  # no: abort at once
        return real(self)

    monkeypatch.setattr(Trainer, "train_step", train_step)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        code, err = setup.train(capsys)
    finally:
        signal.signal(signal.SIGINT, before)
    assert code == 130, err
    assert err[-1] == (
        "teamrl: second SIGINT: aborted without a final checkpoint; no checkpoint was written"
    ), err
    assert not checkpoint_folders(setup.run)
