"""Self-describing run folders (issue 40, item 1): a run records the task it trained and what
it imported (run.json), so eval, play, export and resume need the run folder alone, for runs
started from the command line and from Python."""

from __future__ import annotations

import json
import shlex
import sys
import uuid
from pathlib import Path

import pytest
from helpers.cli import one_line_error
from helpers.runs import tiny_overrides

from teamrl.cli import main
from teamrl.config import ConfigError, load_config
from teamrl.envs.base import Task
from teamrl.envs.functional import FunctionEnv
from teamrl.trainer import Trainer

TASK_FILE = """
from teamrl.envs.base import Task, register_task
from teamrl.envs.functional import FunctionEnv


def reward(completions, example):
    return min(1.0, len(completions["left"]) / 10)


@register_task("{name}", "A user task from a file.")
def build():
    rows = [{{"prompt": f"say {{i}}"}} for i in range(3)]
    return Task("{name}", lambda: FunctionEnv(["left", "right"], reward), rows, test=rows[:2])
"""

# tiny-llama, 2 steps, a checkpoint each step, no env.name and no team.agents: the task's
TINY = [
    o for o in tiny_overrides("shared", 2) if not o.startswith(("env.name=", "team.agents="))
] + ["log.save_steps=1", "algorithm.num_generations=2"]


def user_task_file(tmp_path: Path) -> tuple[Path, str]:
    name = f"pair_{uuid.uuid4().hex[:8]}"  # the registry is per process: one name per test
    path = tmp_path / "user_tasks.py"
    path.write_text(TASK_FILE.format(name=name))
    return path, name


def python_task() -> Task:
    rows = [{"prompt": f"p{i}"} for i in range(3)]
    return Task(
        f"mine_{uuid.uuid4().hex[:8]}",
        lambda: FunctionEnv(["left", "right"], lambda c, ex: float(len(c["left"]) % 3)),
        rows,
        test=rows[:2],
    )


def test_a_run_from_import_needs_the_run_folder_alone(tmp_path, capsys, monkeypatch):
    path, name = user_task_file(tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: r\n")
    out = tmp_path / "out"
    argv = ["train", str(cfg), *TINY, f"env.name={name}", f"log.output_dir={out}"]
    assert main([*argv, "train.max_steps=1", "--import", str(path)]) == 0
    run = out / "r"
    origin = json.loads((run / "run.json").read_text())
    assert origin["task"] == name and origin["task_source"] == "registry"
    assert origin["imports"] == [str(path.resolve())]
    assert origin["command"][:2] == ["teamrl", "train"]
    # team.agents was empty: the task's agents, recorded in the run's config
    assert [a.name for a in load_config(run / "config.yaml").team.agents] == ["left", "right"]

    # from another folder, in a process that never imported the file: no --import anywhere
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    sys.modules.pop(next(m for m in sys.modules if m.startswith("teamrl_user_user_tasks")))
    from teamrl.envs import base

    base._REGISTRY.pop(name)
    capsys.readouterr()
    assert main(["train", str(run), "--resume", "train.max_steps=2"]) == 0
    assert (run / "checkpoints" / "step-2").is_dir()
    assert main(["eval", str(run), "--limit", "1", "--num-samples", "1", "--ks", "1"]) == 0
    assert main(["play", str(run), "--example", "0"]) == 0
    assert main(["export", str(run), str(tmp_path / "team")]) == 0
    assert (tmp_path / "team" / "team.yaml").is_file()
    # a run folder needs --resume to be trained again
    line = one_line_error(capsys, "train", str(run))
    assert line == f"teamrl: error: {run}: a run folder: pass --resume to continue it"


def test_a_python_task_names_the_run_and_disagreeing_names_are_refused(tmp_path, capsys):
    task = python_task()
    run = tmp_path / "py"
    # env.name unset: the run records the task's own name, never a default it did not use
    trainer = Trainer(load_config(None, TINY), task=task, run_dir=run)
    trainer.train()
    saved = load_config(run / "config.yaml")
    assert saved.env.name == task.name
    assert [a.name for a in saved.team.agents] == ["left", "right"]
    origin = json.loads((run / "run.json").read_text())
    assert origin["task_source"] == "python"
    assert origin["task_file"] == str(Path(__file__).resolve())
    # the command line cannot rebuild a Task object: one line that says what to do
    line = one_line_error(capsys, "play", str(run))
    assert f"trained on task {task.name!r}, a Task object passed in Python" in line
    assert "@register_task" in line and "load_run(run, task=...)" in line
    # Python can, with the task
    from teamrl.commands.play import load_run, play_episode

    again, ckpt = load_run(run, task=task)
    assert ckpt == "step-2" and play_episode(again, 0, "test").turns
    # a config that names another task is refused in one line
    cfg = load_config(None, [*TINY, "env.name=digits"])
    with pytest.raises(ConfigError) as err:
        Trainer(cfg, task=task, run_dir=tmp_path / "x")
    assert str(err.value) == (
        f"env.name: 'digits', but the task passed in is {task.name!r}: set "
        f"env.name={task.name} (or leave env.name unset to take the task's)"
    )


def test_the_command_line_needs_a_task_name(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: r\n")
    line = one_line_error(capsys, "train", str(cfg), *TINY, f"log.output_dir={tmp_path}")
    assert line.startswith("teamrl: error: env.name: not set: name a registered task")


def test_the_interrupt_message_is_a_pasteable_command():
    from teamrl.run.interrupt import TrainingInterrupted

    stop = TrainingInterrupted(3, Path("/r/checkpoints/step-3"), 2, Path("/r"))
    command = str(stop).split("resume with: ", 1)[1]
    assert shlex.split(command) == ["teamrl", "train", "/r", "--resume"]


SPLITS_FILE = """
from teamrl.envs.base import Task, register_task
from teamrl.envs.functional import FunctionEnv

ROWS = [{{"prompt": f"p{{i}}"}} for i in range(4)]


def reward(completions, example):
    return float(len(completions["left"]) % 3)


@register_task("{name}_nt", "train and eval only")
def no_test():
    return Task("{name}_nt", lambda: FunctionEnv(["left", "right"], reward), ROWS[:3], eval=ROWS[3:])


@register_task("{name}_to", "train only")
def train_only():
    return Task("{name}_to", lambda: FunctionEnv(["left", "right"], reward), ROWS)
"""


def test_eval_of_a_run_takes_its_held_out_split_or_says_which_exist(tmp_path, capsys):
    """A task with train and eval only (no test): `teamrl eval RUN_DIR` scores eval, the
    held-out split it has; `--split test` and a task with no held-out split are one line naming
    the splits there are (never a traceback, never the training data silently)."""
    name = f"splits_{uuid.uuid4().hex[:8]}"
    path = tmp_path / "split_tasks.py"
    path.write_text(SPLITS_FILE.format(name=name))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: r\n")
    for task, run in ((f"{name}_nt", "nt"), (f"{name}_to", "to")):
        argv = ["train", str(cfg), *TINY, f"env.name={task}", f"run_name={run}"]
        assert (
            main([*argv, f"log.output_dir={tmp_path}", "train.max_steps=1", "--import", str(path)])
            == 0
        )
    capsys.readouterr()
    run = tmp_path / "nt"
    assert main(["eval", str(run), "--num-samples", "1", "--ks", "1"]) == 0
    report = json.loads((run / "eval" / "step-1" / "eval.json").read_text())
    assert [r["split"] for r in report.values()] == ["eval", "eval"]  # untrained, step-1
    line = one_line_error(capsys, "eval", str(run), "--split", "test")
    assert line == (
        f"teamrl: error: --split test: task '{name}_nt' has no 'test' split to evaluate "
        "on; its splits: train (3), eval (1)"
    )
    line = one_line_error(capsys, "eval", str(tmp_path / "to"))
    assert line == (
        f"teamrl: error: task '{name}_to' has no held-out split (test or eval) to "
        "evaluate on; its splits: train (4); pass --split train to score the training data"
    )
