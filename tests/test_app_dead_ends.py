"""The dead ends a new user met on fe09340 (issue 54, item 7), each walked through as the user
did: an app task's dry run, an app agent never called, a run started from Python whose task
module sat by the script (or shadowed a teamrl task), the printed resume command, `teamrl
play` of an app's calls, `teamrl export` over an earlier export, a dry run of a model that
train refuses, and the OpenAI Agents SDK on docs/apps.md. (The report's turns: tests/commands/
test_report_turns.py and tests/browser/test_report_page_turns.py.)"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import sys
import uuid
import warnings
from pathlib import Path

import pytest
from helpers.cli import one_line_error
from helpers.runs import tiny_overrides

from teamrl.cli import main
from teamrl.config import load_config
from teamrl.team import policies as team_module
from teamrl.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.fixture(autouse=True)
def forget_tasks():
    """The tasks (and which --import registered them), the task modules and the sys.path
    entries a test adds are forgotten after it."""
    from teamrl import plugins
    from teamrl.envs import base
    from teamrl.tasks.registry import registered_tasks

    registered_tasks()
    before, modules, path = dict(base._REGISTRY), set(sys.modules), list(sys.path)
    imported = {spec: list(names) for spec, names in plugins._REGISTERED_BY.items()}
    yield
    base._REGISTRY.clear()
    base._REGISTRY.update(before)
    plugins._REGISTERED_BY.clear()
    plugins._REGISTERED_BY.update(imported)
    for name in set(sys.modules) - modules:
        if name.startswith(("sum_task_", "teamrl_user_")):
            del sys.modules[name]
    sys.path[:] = path


@pytest.fixture
def no_model(monkeypatch):
    """Any model load fails the test: a dry run loads none."""

    def refuse(*args, **kwargs):
        raise AssertionError("the dry run loaded a model")

    monkeypatch.setattr(team_module, "load_model", refuse)


def _needs_apps():
    pytest.importorskip("openai", reason="the apps extra: pip install 'teamrl[apps]'")


# --- `train --dry-run` of an app task ---------------------------------------------------------

URL_APP = """
from teamrl.apps import app_task
from teamrl.envs.base import register_task


async def episode(example, base_url, api_key):
    return 0.0


@register_task("{name}", "An app of the base_url form.")
def build():
    return app_task("{name}", episode, ["left", "right"], train=[{{"x": 1}}, {{"x": 2}}])
"""


@pytest.fixture
def fresh_example(monkeypatch):
    """The example module imported anew and its task forgotten afterwards: another test of the
    session may have imported the file (then an import of it again is a no-op) and dropped
    its task from the table."""
    from teamrl.envs import base
    from teamrl.tasks.registry import registered_tasks

    for name in [m for m in sys.modules if m.startswith("teamrl_user_tldr_app_")]:
        monkeypatch.delitem(sys.modules, name)  # --import FILE's module (teamrl.plugins)
    registered_tasks()
    before = dict(base._REGISTRY)
    base._REGISTRY.pop("tldr_app", None)
    yield
    base._REGISTRY.clear()
    base._REGISTRY.update(before)


def test_the_dry_run_of_an_app_task_passes_where_train_runs(
    tmp_path, capsys, no_model, fresh_example
):
    """`teamrl train examples/tldr_app.yaml --import examples/tldr_app.py --dry-run` was
    refused ("train it with algorithm.name=app", which the config sets): the dry run stepped
    the app's env with a dummy reply, as it does an env's. It now checks what train checks and
    says that the app's episodes compute its reward; so for an app of the base_url form."""
    _needs_apps()
    argv = ["train", str(EXAMPLES / "tldr_app.yaml"), "--import", str(EXAMPLES / "tldr_app.py")]
    assert main([*argv, "--dry-run", "model.name_or_path=tiny-llama"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("task tldr_app: rows ") and out[0].endswith("agents concise, detailed")
    assert out[2].startswith("algorithm app (app_groups=joint): 1 prompt(s) a step x 8 episodes")
    assert out[4].startswith("the reward: the app's own, returned by its episodes")
    assert any(line.startswith("placement plan:") for line in out)

    name = f"url_app_{uuid.uuid4().hex[:8]}"
    path = tmp_path / "url_app.py"
    path.write_text(URL_APP.format(name=name))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"env: {{name: {name}}}\nalgorithm: {{name: app}}\n")
    argv = ["train", str(cfg), "--import", str(path), "model.name_or_path=tiny-llama"]
    assert main([*argv, "--dry-run"]) == 0
    assert "the reward: the app's own" in capsys.readouterr().out
    # and the algorithm check still holds: an app under an env's algorithm is one line
    line = one_line_error(capsys, *argv, "algorithm.name=magrpo", "--dry-run")
    assert f"task {name!r} is an app" in line


# --- `--dry-run` resolves the model as train does -----------------------------------------------


def test_the_dry_run_refuses_a_model_train_refuses(tmp_path, capsys, monkeypatch, no_model):
    """A hub id that is not cached, with the hub off: `train` refused it before its model
    loaded, and `--dry-run` passed it with a note. Both now give the same one line."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: r\n")
    argv = [
        "train",
        str(cfg),
        *tiny_overrides("shared", 1),
        "model.name_or_path=teamrl-tests/not-cached-anywhere",
        f"log.output_dir={tmp_path}",
    ]
    trained = one_line_error(capsys, *argv)
    assert "cannot load 'teamrl-tests/not-cached-anywhere'" in trained
    assert "not in the local cache while the hub is offline" in trained
    assert one_line_error(capsys, *argv, "--dry-run") == trained
    assert one_line_error(capsys, *argv, "--print-config") == trained
    assert not (tmp_path / "r").exists()  # refused before anything was written


# --- an app's agent that is never called ----------------------------------------------------


def only_alice(client, example):
    """bob is an agent of the task, but the app never calls him."""
    reply = client.chat.completions.create(
        model="alice", messages=[{"role": "user", "content": example["text"]}]
    )
    return len(reply.choices[0].message.content) / 10


def test_an_agent_the_app_never_calls_is_one_warning(tmp_path):
    """Under app_groups=call an agent the app never calls had no sample: it trained silently
    (app/silent_agents only). After log.warn_after_steps steps it is one NotLearningWarning,
    said once and noted in that step's metrics row, as a run of flat groups is."""
    _needs_apps()
    from helpers.apps import tiny_cfg

    from teamrl.apps import app_task
    from teamrl.run.files import read_jsonl
    from teamrl.run.watch import NotLearningWarning

    rows = [{"text": f"post {i}"} for i in range(4)]
    task = app_task("only_alice", only_alice, ["alice", "bob"], train=rows)
    cfg = tiny_cfg("algorithm.app_groups=call", "train.max_steps=3", "log.warn_after_steps=2")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(cfg, task=task, run_dir=tmp_path / "run").train()
    silent = [
        str(w.message)
        for w in caught
        if issubclass(w.category, NotLearningWarning) and "of the app had no call" in str(w.message)
    ]
    assert len(silent) == 1, silent
    assert silent[0].startswith("agent 'bob' of the app had no call to train on for 2 consecutive")
    assert "never called model='bob'" in silent[0] and "the agents: alice, bob" in silent[0]
    metrics = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    noted = [[w for w in row.get("warnings", []) if "of the app had" in w] for row in metrics]
    assert noted == [[], silent, []]  # at the k-th step, once
    assert all(row["app/silent_agents"] > 0 for row in metrics)


# --- a run started from Python: its task module, and a name teamrl uses --------------------------

SUM_TASK = """
from teamrl.envs.base import Task, register_task
from teamrl.envs.functional import FunctionEnv


def reward(completions, example):
    return min(1.0, len(completions["left"]) / 10)


@register_task("{name}", "A task in a module beside the script.")
def build():
    rows = [{{"prompt": f"sum {{i}}"}} for i in range(3)]
    return Task("{name}", lambda: FunctionEnv(["left", "right"], reward), rows, test=rows[:2])
"""

TINY = [
    o for o in tiny_overrides("shared", 1) if not o.startswith(("env.name=", "team.agents="))
] + ["log.save_steps=1", "algorithm.num_generations=2"]


def test_a_python_run_finds_its_task_module_from_any_folder(tmp_path, capsys, monkeypatch):
    """A script imported its task module from its own folder (the first entry of sys.path)
    and trained. From another folder, `teamrl play/eval/export RUN` and `train RUN --resume`
    said "--import sum_task: no module named 'sum_task'", a flag the user never typed, and an
    --import FILE did not help. run.json now records the module's file, and the commands
    import it from there; when it has moved, the one line says to pass --import FILE, which
    wins over the record."""
    module = f"sum_task_{uuid.uuid4().hex[:8]}"
    tmp_path = tmp_path.resolve()  # as run.json records files
    project, work, elsewhere = tmp_path / "project", tmp_path / "work", tmp_path / "elsewhere"
    for folder in (project, work, elsewhere):
        folder.mkdir()
    (project / f"{module}.py").write_text(SUM_TASK.format(name=module))

    # `python project/train.py` run from work/: sys.path[0] is the script's folder
    sys.path.insert(0, str(project))
    monkeypatch.chdir(work)
    __import__(module)
    run = tmp_path / "runs" / "r"
    Trainer(load_config(None, [*TINY, f"env.name={module}"]), run_dir=run).train()
    origin = json.loads((run / "run.json").read_text())
    assert origin["task_source"] == "registry" and origin["imports"] == [module]

    # a new process in another folder: neither the module nor its folder is known there
    sys.path.remove(str(project))
    del sys.modules[module]
    from teamrl.envs import base

    base._REGISTRY.pop(module)
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["play", str(run)]) == 0, capsys.readouterr().err
    assert main(["eval", str(run), "--limit", "1", "--num-samples", "1", "--ks", "1"]) == 0
    assert main(["export", str(run), str(tmp_path / "team")]) == 0
    assert main(["train", str(run), "--resume", "train.max_steps=2"]) == 0
    assert (run / "checkpoints" / "step-2").is_dir()
    # what run.json records for that (the resume wrote it again)
    origin = json.loads((run / "run.json").read_text())
    assert origin["module_files"] == {module: str(project / f"{module}.py")}

    # the project moved: the record cannot be followed; the user's --import FILE wins
    moved = tmp_path / "moved"
    shutil.move(str(project), str(moved))
    sys.path[:] = [p for p in sys.path if p != str(project)]
    del sys.modules[module]
    base._REGISTRY.pop(module)
    line = one_line_error(capsys, "play", str(run))
    assert line == (
        f"teamrl: error: {run / 'run.json'}: the run's task module {module!r} "
        f"({project / f'{module}.py'}, no longer there) cannot be found from here: pass "
        "--import FILE (the .py file that registers the task, where it is now), or --import "
        "MODULE from the folder that holds it"
    )
    assert main(["play", str(run), "--import", str(moved / f"{module}.py")]) == 0


def test_a_python_task_named_like_a_teamrl_task_is_the_users(tmp_path, capsys):
    """A Task object the user made in Python under a name teamrl's registry also has
    ('digits') was recorded as the registry's, so `teamrl play` rebuilt teamrl's digits task
    instead. It is the user's: run.json says so, and the commands say in one line that they
    cannot rebuild it. The registry's own task, passed as an object (as the CLI does), stays
    the registry's."""
    from teamrl.envs.base import Task
    from teamrl.envs.functional import FunctionEnv
    from teamrl.tasks.registry import task_from_config

    rows = [{"prompt": f"p{i}"} for i in range(3)]
    mine = Task("digits", lambda: FunctionEnv(["left", "right"], lambda c, ex: 1.0), rows)
    run = tmp_path / "mine"
    Trainer(load_config(None, TINY), task=mine, run_dir=run).train()
    origin = json.loads((run / "run.json").read_text())
    assert origin["task_source"] == "python"
    assert origin["task_file"] == str(Path(__file__).resolve())
    for argv in (["play", str(run)], ["export", str(run), str(tmp_path / "t")]):
        line = one_line_error(capsys, *argv)
        assert f"{run}: trained on task 'digits', a Task object passed in Python" in line
        assert "whose name is also teamrl's own task 'digits'" in line
        assert "load_run(run, task=...)" in line
    # Python loads it with the task
    from teamrl.commands.play import load_run

    assert load_run(run, task=mine)[1] == "step-1"

    cfg = load_config(None, tiny_overrides("shared", 1))
    theirs = tmp_path / "theirs"
    Trainer(cfg, task=task_from_config(cfg.env), run_dir=theirs).train()
    assert json.loads((theirs / "run.json").read_text())["task_source"] == "registry"
    assert main(["play", str(theirs)]) == 0


# --- the printed resume command --------------------------------------------------------------


def test_every_printed_resume_command_works_from_another_folder(tmp_path, monkeypatch):
    """A run folder given relative (`--run-dir runs/r`) was printed as is in every resume
    command, which then failed from any other folder; it is now the absolute path."""
    from teamrl.cli import worker_died_line
    from teamrl.run import interrupt
    from teamrl.scale.group import WorkerDiedError

    monkeypatch.chdir(tmp_path)
    rel = Path("runs") / "r"
    lines = [
        str(interrupt.TrainingInterrupted(3, None, 15, rel)),
        interrupt.failed_step_message("boom", 2, None, rel),
        interrupt.failed_after_update_message("boom", 2, "could not be written", 0, rel),
        interrupt.failed_update_message("boom", 2, None, rel),
        interrupt.failed_save_message("boom", 2, None, rel),
        interrupt.failed_eval_message("boom", 0, "n/a", rel),
        interrupt.aborted_message(KeyboardInterrupt("second SIGINT"), rel / "c", rel),
        worker_died_line(WorkerDiedError("worker 0 died"), rel),
    ]
    want = ["teamrl", "train", str(tmp_path / "runs" / "r"), "--resume"]
    for line in lines:
        assert shlex.split(line.split("resume with: ", 1)[1]) == want, line
    # a folder whose name needs quoting is still one word of the command
    spaced = interrupt.resume_command(Path("my runs") / "r 1")
    assert shlex.split(spaced)[2] == os.path.join(tmp_path, "my runs", "r 1")


# --- `teamrl play` of an app: its calls in order -----------------------------------------------


def draft_twice_then_review(client, example):
    """alice drafts, then revises her draft; bob reviews the revision (he quotes her second
    call, which comes after his own first call's place in a sort by each agent's call count)."""

    def ask(agent, text):
        reply = client.chat.completions.create(
            model=agent, messages=[{"role": "user", "content": text}]
        )
        return reply.choices[0].message.content

    draft = ask("alice", example["text"])
    revision = ask("alice", "Revise: " + draft)
    ask("bob", "Review: " + revision)
    return len(revision) / 10


def test_play_prints_an_apps_calls_in_the_order_they_were_made(tmp_path):
    """alice twice, then bob quoting alice's second reply: play printed alice, bob, alice (its
    turns are each agent's own call count), so bob quoted a reply shown after him."""
    _needs_apps()
    from helpers.apps import tiny_cfg

    from teamrl.apps import app_task
    from teamrl.commands.play import format_episode, play_episode

    rows = [{"text": "the library opens late"}]
    task = app_task("drafts", draft_twice_then_review, ["alice", "bob"], train=rows, test=rows)
    tr = Trainer(tiny_cfg("train.max_steps=1"), task=task, run_dir=tmp_path / "run")
    episode = play_episode(tr, 0)
    assert [(t.agent, t.turn) for t in episode.turns] == [("alice", 0), ("alice", 1), ("bob", 0)]
    assert "Revise: " in episode.turns[1].prompt and "Review: " in episode.turns[2].prompt
    printed = format_episode(episode, None)
    heads = re.findall(r"^--- turn (\d+) \| (\w+) ---$", printed, flags=re.M)
    assert heads == [("0", "alice"), ("1", "alice"), ("0", "bob")]


# --- `teamrl export` over an existing folder -------------------------------------------------


def test_export_refuses_to_replace_an_earlier_export_unless_asked(tmp_path, capsys):
    """`teamrl export RUN OUT` wrote over an existing OUT in silence. An earlier export is now
    refused in one line unless --overwrite, which replaces it whole (no file of the old export
    left to be uploaded with it); a folder that is not an export is never replaced."""
    run = tmp_path / "run"
    Trainer(load_config(None, tiny_overrides("lora", 1)), run_dir=run).train()
    out = tmp_path / "team"
    assert main(["export", str(run), str(out)]) == 0
    (out / "left_over.txt").write_text("from the export before")
    line = one_line_error(capsys, "export", str(run), str(out))
    assert line == (
        f"teamrl: error: {out}: already holds an exported team (team.yaml): pass --overwrite "
        "to replace it, or name another folder"
    )
    assert main(["export", str(run), str(out), "--overwrite"]) == 0
    assert (out / "team.yaml").is_file() and not (out / "left_over.txt").exists()
    assert sorted(p.name for p in out.iterdir()) == ["alice", "bob", "team.yaml"]

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "mine.txt").write_text("keep me")
    line = one_line_error(capsys, "export", str(run), str(notes), "--overwrite")
    assert line.startswith(f"teamrl: error: {notes}: holds files but no team.yaml")
    assert (notes / "mine.txt").read_text() == "keep me"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", str(run), str(empty)]) == 0


# --- docs/apps.md: the OpenAI Agents SDK -------------------------------------------------------


def test_the_apps_page_shows_the_agents_sdk_on_the_endpoint_with_tracing_off():
    """docs/apps.md had no OpenAI Agents SDK snippet. Its section shows the SDK's
    chat-completions model class on an AsyncOpenAI client at the episode's base URL, with
    tracing off (no training call goes to a tracing service); the block is valid Python that
    imports no package teamrl depends on but the SDK and openai."""
    text = (ROOT / "docs" / "apps.md").read_text()
    assert "\n## The OpenAI Agents SDK\n" in text
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (code,) = [b for b in blocks if "OpenAIChatCompletionsModel" in b]
    tree = ast.parse(code)
    calls = {
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert "set_tracing_disabled(True)" in calls
    assert "AsyncOpenAI(base_url=base_url, api_key=api_key)" in calls
    assert any(c.startswith("OpenAIChatCompletionsModel(model=") for c in calls)
    episode = next(n for n in tree.body if getattr(n, "name", "") == "episode")
    assert isinstance(episode, ast.AsyncFunctionDef)
    assert [a.arg for a in episode.args.args] == ["example", "base_url", "api_key"]
    imported = {
        (n.module or n.names[0].name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
    }
    assert imported <= {"agents", "openai", "teamrl"}
