"""The CLI with a user's bad inputs: exit code 2 and ONE line on stderr that names the field or
file and the value; every check that needs no model runs before the model loads.

Also: --resume among overrides, --help-config on both levels, --import and entry points, the
hub left as the user set it, and one wandb run per run folder.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest
from helpers.cli import one_line_error
from helpers.runs import tiny_overrides

import teamrl.preflight as preflight
import teamrl.team.policies as team_module
from teamrl.cli import main

BASE = tiny_overrides(steps=2)  # tiny-llama, digits, two agents


@pytest.fixture
def no_model(monkeypatch):
    """Any model load fails the test: these errors must come before it."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the error")

    monkeypatch.setattr(team_module, "load_model", refuse)


def train_args(tmp_path, *extra: str) -> list[str]:
    cfg = tmp_path / "c.yaml"
    if not cfg.exists():
        cfg.write_text("run_name: r\n")
    return ["train", str(cfg), *BASE, f"log.output_dir={tmp_path}", *extra]


# --- the bad inputs of issue 13, each one line ------------------------------------------------


def test_malformed_yaml_file_names_the_file_line_and_column(tmp_path, capsys, no_model):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run_name: x\ntrain:\n  max_steps: 3\n   prompts_per_step: 2\n")
    line = one_line_error(capsys, "train", str(bad))
    assert f"{bad}, line 4, column" in line and "invalid YAML" in line


def test_malformed_override_value_names_the_key_and_value(tmp_path, capsys, no_model):
    line = one_line_error(capsys, *train_args(tmp_path, "train.max_steps=[1"))
    assert "train.max_steps" in line and "'[1'" in line


def test_index_out_of_range_names_the_list_length(tmp_path, capsys, no_model):
    line = one_line_error(capsys, *train_args(tmp_path, "team.agents.5.temperature=1"))
    assert "team.agents.5.temperature" in line and "index 5" in line
    assert "team.agents has 2 entries" in line


def test_unknown_lora_target_is_named_with_the_modules_that_exist(tmp_path, capsys, no_model):
    line = one_line_error(
        capsys, *train_args(tmp_path, "team.policies=lora", "model.lora_target_modules=[foo]")
    )
    assert "model.lora_target_modules: 'foo' matches no module of 'tiny-llama'" in line
    assert "q_proj" in line and "down_proj" in line
    # one bad name among good ones is refused too (PEFT alone would skip it silently)
    line = one_line_error(
        capsys,
        *train_args(tmp_path, "model.use_peft=true", "model.lora_target_modules=[q_proj, qproj]"),
    )
    assert "'qproj' matches no module" in line


@pytest.mark.parametrize("flag", ["tensorboard", "wandb"])
def test_missing_optional_logger_says_what_to_install(
    tmp_path, capsys, no_model, monkeypatch, flag
):
    real = preflight.importlib.util.find_spec
    monkeypatch.setattr(
        preflight.importlib.util, "find_spec", lambda name, *a: None if name == flag else real(name)
    )
    line = one_line_error(capsys, *train_args(tmp_path, f"log.{flag}=true"))
    assert f"log.{flag}=true" in line and f"pip install {flag}" in line


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda(tmp_path, capsys, no_model):
    line = one_line_error(capsys, *train_args(tmp_path, "model.device=cuda"))
    assert line.endswith(
        "model.device=cuda but torch.cuda.is_available() is False (use model.device=auto or cpu)"
    )


def test_config_values_out_of_range_from_the_cli(tmp_path, capsys, no_model):
    cases = {
        "train.learning_rate=.inf": "train.learning_rate: expected a finite float, got inf",
        "log.save_total_limit=-1": "log.save_total_limit: expected >= 1",
        "model.lora_dropout=-1": "model.lora_dropout: expected in [0, 1), got -1.0",
        "model.lora_dropout=1.5": "model.lora_dropout: expected in [0, 1), got 1.5",
        "run_name=": "run_name: expected a non-empty folder name",
        "run_name=../../../x": "got '../../../x'",
        "seed=1180591620717411303424": "seed: expected an int in [0, 2**32)",
        "train.adam_beta2=1.0": "train.adam_beta2: expected in [0, 1), got 1.0",
        "train.weight_decay=-0.1": "train.weight_decay: expected >= 0, got -0.1",
        "team.agents.5.name=x": "index 5 out of range (team.agents has 2 entries",
        "env.turn_order=[alice]": "env.turn_order: expected each agent of team.agents",
        "train.max_steps=ten": "train.max_steps: expected an int, got 'ten'",
        "team.agents.0.top_p=0": "team.agents[0].top_p: expected in (0, 1], got 0.0",
        "team.agents.1.max_completion_length=4096": (
            "team.agents[1].max_completion_length: expected < 2048 (the context length of "
            "'tiny-llama'), got 4096"
        ),
    }
    for override, words in cases.items():
        line = one_line_error(capsys, *train_args(tmp_path, override))
        assert words in line, (override, line)
    assert not (tmp_path.parent / "x").exists()


def test_memory_estimate_refuses_a_config_that_cannot_fit(tmp_path, capsys, no_model, monkeypatch):
    # G = 100000 on a host with 16 GiB free: 1 prompt x 2 agents x G sequences, refused with
    # the estimate instead of being killed by the kernel
    monkeypatch.setattr(preflight, "available_memory", lambda device: (16 * 2**30, "host RAM"))
    line = one_line_error(capsys, *train_args(tmp_path, "algorithm.num_generations=100000"))
    assert "this config needs an estimated" in line and "GiB" in line
    assert "200,000 sequences" in line and "only 16.0 GiB is free on host RAM" in line
    assert "lower algorithm.num_generations" in line
    monkeypatch.undo()
    # ten times more fits on no machine this runs on
    line = one_line_error(capsys, *train_args(tmp_path, "algorithm.num_generations=1000000"))
    assert "this config needs an estimated" in line


def test_memory_estimate_by_hand_and_against_the_free_memory(monkeypatch):
    from teamrl.config import load_config

    cfg = load_config(None, [*BASE, "team.policies=shared"])
    models = {"tiny-llama": preflight.meta_model(preflight.model_config_of(cfg, "tiny-llama"))}
    est = preflight.estimate_memory(cfg, models, prompt_len=24)
    params = sum(p.numel() for p in models["tiny-llama"].parameters())
    assert est.weights == params * 4 and est.optimizer == 3 * params * 4  # full fine-tune, fp32
    sgd = load_config(None, [*BASE, "team.policies=shared", "train.optim=sgd"])
    assert preflight.estimate_memory(sgd, models, prompt_len=24).optimizer == params * 4  # grads
    assert est.rows == 1 * 2 * 4 and est.seq == 24 + 8
    # KV cache: rows * seq * 2 (k, v) * layers 2 * kv heads 2 * head dim 16 * 4 bytes, plus two
    # fp32 vocab rows per sequence, plus the sampler's packed copy of the (trainable) weights
    kv_logits = 8 * 32 * 2 * 2 * 2 * 16 * 4 + 8 * 512 * 8
    assert est.generation == kv_logits + params * 4
    # training: the 8 samples in one micro-batch; their 2 distinct prompts (a group of G=4
    # shares one) of 24 tokens and 8 completions of 8 tokens keep 2 layers x (16 * 64 + 4 * 128)
    # fp32 activations per token (the measured constants), and each completion token six fp32
    # vocab rows
    tokens = 2 * 24 + 8 * 8
    logits = 8 * 8 * 512 * 4 * 6
    # packed rows (the default): each completion attends to its prompt in place
    assert est.training == tokens * 2 * (16 * 64 + 4 * 128) * 4 + logits
    # padded: each sample also keeps a copy of its prompt's KV cache
    padded = load_config(None, [*BASE, "team.policies=shared", "train.padding_free=false"])
    prompt_kv = 8 * 24 * 2 * 2 * 2 * 16 * 4
    assert preflight.estimate_memory(padded, models, prompt_len=24).training == (
        tokens * 2 * (16 * 64 + 4 * 128) * 4 + prompt_kv + logits
    )
    # no packing: cpu_prepack=off; under LoRA the frozen base's packed copy is kept (weights)
    off = load_config(None, [*BASE, "team.policies=shared", "generation.cpu_prepack=off"])
    assert preflight.estimate_memory(off, models, prompt_len=24).generation == kv_logits
    lora = load_config(None, [*BASE, "team.policies=lora"])
    est_lora = preflight.estimate_memory(lora, models, prompt_len=24)
    adapters = est_lora.weights - 2 * params * 4
    lora_off = load_config(None, [*BASE, "team.policies=lora", "generation.cpu_prepack=off"])
    assert (
        preflight.estimate_memory(lora_off, models, prompt_len=24).weights == params * 4 + adapters
    )
    preflight.check_fits(est, (est.total + 1, "host RAM"))
    with pytest.raises(preflight.ConfigError, match=r"only 0\.0 GiB is free on host RAM"):
        preflight.check_fits(est, (est.total - 1, "host RAM"))


def test_an_uncached_hub_id_offline_is_one_line(tmp_path, capsys, no_model, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    line = one_line_error(capsys, *train_args(tmp_path, "model.name_or_path=someorg/no-such-lm"))
    assert "model.name_or_path: cannot load 'someorg/no-such-lm'" in line
    assert "not in the local cache" in line and "HF_HUB_OFFLINE" in line


def test_the_cli_leaves_the_users_hub_setting_alone(tmp_path, capsys, monkeypatch):
    # builtin models never need the hub, so nothing has to switch it off behind the user's back
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    one_line_error(capsys, *train_args(tmp_path, "train.max_steps=[1"))
    assert "HF_HUB_OFFLINE" not in os.environ
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    one_line_error(capsys, *train_args(tmp_path, "train.max_steps=[1"))
    assert os.environ["HF_HUB_OFFLINE"] == "0"


# --- tasks from the user's files and from installed packages ----------------------------------

TASK_FILE = '''
from teamrl.envs.base import Step, Task, register_task


class Echo:
    """Two agents; the reward is the length of alice's reply, capped at 1."""

    agents = ["alice", "bob"]

    def reset(self, example):
        return {a: example["question"] for a in self.agents}

    def step(self, actions):
        done = {a: True for a in self.agents}
        return Step({a: "" for a in self.agents}, min(1.0, len(actions["alice"]) / 10), done)


@register_task("{name}", "A user task from a file.")
def build(rows: int = 3, drop_question_at: int = -1):
    train = [{"question": f"say {i}"} for i in range(rows)]
    if 0 <= drop_question_at < rows:
        train[drop_question_at] = {"q": "nothing"}
    return Task("{name}", Echo, train, eval=train[:1], test=train[:2])
'''


def task_file(tmp_path, stem: str = "my_tasks") -> tuple[str, str]:
    name = f"echo_{uuid.uuid4().hex[:8]}"  # the registry is per process: one name per test
    path = tmp_path / f"{stem}.py"
    path.write_text(TASK_FILE.replace("{name}", name))
    return str(path), name


def test_import_a_task_file_then_train_resume_among_overrides_and_a_finished_run(tmp_path, capsys):
    path, name = task_file(tmp_path)
    args = train_args(tmp_path, f"env.name={name}", "team.agents.0.prompt='Q: {question}'")
    # without --import the task is unknown
    assert f"unknown task {name!r}" in one_line_error(capsys, *args)
    assert main([*args, "train.max_steps=1", "--import", path]) == 0
    run = tmp_path / "r"
    assert (run / "checkpoints" / "step-1").is_dir()
    # --resume sits between overrides, and the override after it applies
    assert main([*args, "--import", path, "--resume", "train.max_steps=2"]) == 0
    assert sorted(p.name for p in (run / "checkpoints").glob("step-*")) == ["step-1", "step-2"]
    # resuming a finished run says so
    line = one_line_error(capsys, *args, "--resume", "--import", path)
    assert "already at step 2" in line and "train.max_steps=2" in line
    assert "raise train.max_steps" in line
    # a second fresh run into the same folder is refused before the model loads
    line = one_line_error(capsys, *args, "--import", path)
    assert f"{run} already holds a run" in line


def test_import_by_module_name_and_envs_lists_it(tmp_path, capsys, monkeypatch):
    path, name = task_file(tmp_path, stem=f"user_tasks_{uuid.uuid4().hex[:6]}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # --import NAME adds the current folder
    module = os.path.basename(path)[:-3]
    assert main(["envs", "--import", module]) == 0
    out = capsys.readouterr().out
    assert any(ln.split() == [name, *"A user task from a file.".split()] for ln in out.splitlines())
    assert "digits" in out
    line = one_line_error(capsys, "envs", "--import", "no_such_module_xyz")
    assert "--import no_such_module_xyz: no module named 'no_such_module_xyz'" in line
    broken = tmp_path / "broken.py"
    broken.write_text("x = 1\ndef f(:\n")
    line = one_line_error(capsys, "envs", "--import", str(broken))
    assert f"--import {broken}: SyntaxError at broken.py:2" in line


def test_a_row_missing_a_template_field_is_named_before_the_model_loads(tmp_path, capsys, no_model):
    path, name = task_file(tmp_path)
    args = train_args(
        tmp_path,
        f"env.name={name}",
        "env.kwargs={drop_question_at: 2}",
        "team.agents.1.prompt='{question}?'",
        "--import",
        path,
    )
    line = one_line_error(capsys, *args)
    assert "team.agents[1].prompt uses {question}" in line
    assert "row 2 of the train split" in line and "has no field 'question'" in line


def test_a_row_missing_a_field_the_env_reads_is_named(tmp_path, capsys, no_model):
    path, name = task_file(tmp_path)
    args = train_args(tmp_path, f"env.name={name}", "env.kwargs={drop_question_at: 1}")
    line = one_line_error(capsys, *args, "--import", path)
    assert f"row 1 of the train split of task {name!r} has no field 'question'" in line
    assert "its fields: q" in line


def test_an_empty_dataset_is_refused_before_the_model_loads(tmp_path, capsys, no_model):
    path, name = task_file(tmp_path)
    args = train_args(tmp_path, f"env.name={name}", "env.kwargs={rows: 0}", "--import", path)
    line = one_line_error(capsys, *args)
    assert f"env.name={name}: the task's training split is empty" in line


@pytest.mark.parametrize(
    "env",
    [
        ["env.name=plan_path", "team.agents=[{name: tool}, {name: plan}]"],
        ["env.name=math", "env.kwargs={source: arithmetic}",
         "team.agents=[{name: tool}, {name: reasoner}]"],
    ],
)  # fmt: skip
def test_magrpo_on_a_sequential_task_is_refused_before_the_model_loads(
    env, tmp_path, capsys, no_model
):
    """MAGRPO sends all agents' actions in one step; a turn-taking env would fail only at its
    first step, after the model loaded and sampled."""
    line = one_line_error(capsys, *train_args(tmp_path, *env, "algorithm.name=magrpo"))
    assert "algorithm.name=magrpo: the team acts jointly" in line
    assert "takes its agents in turn (turn_order [" in line and "at_grpo" in line


@pytest.mark.parametrize("algorithm", ["at_grpo", "grpo"])
def test_turn_taking_algorithms_on_a_simultaneous_task_are_refused(
    algorithm, tmp_path, capsys, no_model
):
    """TLDR's two writers act in one step (MAGRPO's shape): AT-GRPO and trajectory GRPO take
    one agent at a time, so they need env.turn_order, which the error names."""
    tldr = ["env.name=tldr", "env.kwargs={source: offline}"]
    tldr += ["team.agents=[{name: concise}, {name: detailed}]", f"algorithm.name={algorithm}"]
    line = one_line_error(capsys, *train_args(tmp_path, *tldr))
    assert f"algorithm.name={algorithm}: its agents act in turn" in line
    assert "env.turn_order=[concise, detailed]" in line
    # with the turn order the error names, the same config passes the check
    from teamrl.config import load_config
    from teamrl.tasks.registry import task_from_config

    cfg = load_config(None, [*BASE, *tldr, "env.turn_order=[concise, detailed]"])
    preflight.check_task(cfg, task_from_config(cfg.env))


def test_eval_takes_import_too(tmp_path, capsys):
    path, name = task_file(tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: ev\n")
    args = ["eval", str(cfg), "--import", path, *BASE, f"env.name={name}"]
    args += [f"log.output_dir={tmp_path}", "--split", "test", "--num-samples", "1", "--ks", "1"]
    assert main(args) == 0
    assert (tmp_path / "ev" / "eval" / "untrained" / "eval.json").exists()


def test_entry_point_tasks_load_lazily_and_a_broken_one_is_named(
    tmp_path, capsys, monkeypatch, no_model
):
    site = tmp_path / "site"
    pkg = site / "teamrl_plugin_demo"
    pkg.mkdir(parents=True)
    _, name = task_file(pkg)
    (pkg / "__init__.py").write_text("from .my_tasks import build\n")
    dist = site / "teamrl_plugin_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: teamrl-plugin-demo\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[teamrl.tasks]\n{name} = teamrl_plugin_demo\n"
        "broken_demo = teamrl_no_such_module_xyz:build\n"
    )
    monkeypatch.syspath_prepend(str(site))
    # the plugin's task is found through its entry point: the run gets past the task to the
    # next check (a missing optional logger)
    real = preflight.importlib.util.find_spec
    monkeypatch.setattr(
        preflight.importlib.util,
        "find_spec",
        lambda mod, *a: None if mod == "tensorboard" else real(mod),
    )
    line = one_line_error(capsys, *train_args(tmp_path, f"env.name={name}", "log.tensorboard=true"))
    assert "pip install tensorboard" in line
    # asking for the broken one names it, its target and its package
    line = one_line_error(capsys, *train_args(tmp_path, "env.name=broken_demo"))
    assert "entry point broken_demo = teamrl_no_such_module_xyz:build" in line
    assert "ModuleNotFoundError" in line
    # `teamrl envs` lists the good ones and warns about the broken one in one line
    assert main(["envs"]) == 0
    out, err = capsys.readouterr()
    assert name in out
    assert err.strip().startswith("teamrl: warning: entry point broken_demo")
    assert len(err.strip().splitlines()) == 1


# --- --help-config ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv", [["--help-config"], ["train", "--help-config"], ["eval", "--help-config"]]
)
def test_help_config_lists_every_field_per_agent_ones_included(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for agent_field in (
        "name",
        "system",
        "prompt",
        "model",
        "temperature",
        "top_p",
        "top_k",
        "max_completion_length",
        "response_prefix",
    ):
        assert f"  team.agents.<i>.{agent_field} = " in out, agent_field
    assert "  team.agents.<i>.temperature = 1.0\n      Sampling temperature" in out
    assert "  train.learning_rate = 1e-05\n      Peak learning rate" in out


@pytest.mark.parametrize(
    "argv", [["--help-config", "algorithm"], ["train", "x.yaml", "--help-config", "algorithm"]]
)
def test_help_config_section_prints_that_section_only(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("[algorithm]  ")
    assert "  algorithm.num_generations = " in out
    fields = [ln for ln in out.splitlines() if ln.startswith("  ") and ln[2] != " "]
    names = [ln.split(" = ")[0].strip() for ln in fields]
    assert names and all(n.startswith("algorithm.") for n in names), names
    assert "train.max_steps" not in out and "team.agents" not in out


def help_config(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_help_config_of_the_agents_list_and_of_one_field(capsys):
    agents = help_config(capsys, "--help-config", "team.agents")
    assert agents.startswith("  team.agents = []\n")
    assert "  team.agents.<i>.temperature = 1.0" in agents and "\n  algorithm." not in agents
    assert help_config(capsys, "--help-config", "team.agents.0") == agents  # as overrides name it
    # an override or a config after the flag is no section: every field, as before
    everything = help_config(capsys, "--help-config")
    assert help_config(capsys, "train", "--help-config", "train.max_steps=3") == everything
    assert help_config(capsys, "train", "--help-config", "quickstart.yaml") == everything
    assert help_config(capsys, "train", "--help-config", "quickstart") == everything
    one = help_config(capsys, "--help-config", "train.max_steps")
    assert one.startswith("  train.max_steps = 100\n      Training steps")
    assert len(one.splitlines()) == 2


def test_help_config_of_an_unknown_section_is_one_line_listing_the_sections(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "--help-config", "algo"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "teamrl: error: --help-config: unknown section 'algo'; did you mean 'algorithm'? "
        "sections: model, team, team.agents, env, algorithm, train, eval, log, generation, "
        "distributed, endpoint (or a field's dotted name)\n"
    )


# --- wandb ------------------------------------------------------------------------------------


def test_wandb_run_id_is_per_run_folder_and_kept_on_resume(tmp_path):
    from teamrl.run.logging import wandb_run_id

    a, b = tmp_path / "a" / "run", tmp_path / "b" / "run"  # two runs with the same name
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    first = wandb_run_id(a, fresh=True)
    assert wandb_run_id(b, fresh=True) != first  # never merged by name
    assert wandb_run_id(a, fresh=False) == first  # --resume continues the same wandb run
    assert (a / "wandb_id").read_text().strip() == first
    assert wandb_run_id(a, fresh=True) != first  # a fresh start in a used folder: a new run


def test_run_logger_starts_wandb_with_the_folder_id(tmp_path, monkeypatch):
    import types

    from teamrl.run.logging import RunLogger

    calls = []
    fake = types.ModuleType("wandb")
    fake.__spec__ = types.SimpleNamespace(name="wandb")
    fake.init = lambda **kw: (
        calls.append(kw) or types.SimpleNamespace(log=lambda *a, **k: None, finish=lambda: None)
    )
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object())
    for resume_step in (-1, 3):  # a fresh run, then its resume
        logger = RunLogger(tmp_path, wandb=True, run_name="run")
        logger.truncate_after(resume_step)
        logger.log({"step": 4, "x": 1.0})
        logger.close()
    assert calls[0]["id"] == calls[1]["id"] == (tmp_path / "wandb_id").read_text().strip()
    assert calls[0]["id"] != "run" and calls[0]["resume"] == "allow"


def test_a_warning_is_one_line_on_the_command_line(tmp_path):
    """A run that is not learning (tiny-llama's completions all cut at 8 tokens) warns in one
    line, as an error is one line: no source line under it."""
    import subprocess

    from helpers.runs import ROOT

    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: w\n")
    over = [*tiny_overrides("shared", 3), f"log.output_dir={tmp_path}", "log.warn_after_steps=3"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "default"}
    proc = subprocess.run(
        [sys.executable, "-m", "teamrl.cli", "train", str(cfg), *over],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    warned = [ln for ln in lines if ln.startswith("teamrl: warning: every completion of agent")]
    assert warned, proc.stderr
    assert not any("watch.check" in ln for ln in lines), proc.stderr


# --- --dry-run checks what train checks, with no model (issue 40, item 2) ----------------------

DRY_TASK = """
from teamrl.envs.base import Task, register_task
from teamrl.envs.functional import FunctionEnv


def {reward}


@register_task("{name}", "A dry-run task.")
def build():
    rows = [{{"prompt": "p0", "answer": "x"}}, {{"prompt": "p1", "answer": "y"}}]
    return Task("{name}", lambda: FunctionEnv(["left", "right"], reward), rows)
"""


def dry_task(tmp_path, reward: str) -> tuple[str, str]:
    name = f"dry_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.py"
    path.write_text(DRY_TASK.format(name=name, reward=reward))
    return str(path), name


def dry_args(tmp_path, path: str, name: str, *extra: str) -> list[str]:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: d\n")
    return ["train", str(cfg), *BASE_NO_TASK, f"env.name={name}", "--import", path, *extra]


BASE_NO_TASK = [
    o for o in tiny_overrides("shared", 2) if not o.startswith(("env.name=", "team.agents="))
]


@pytest.mark.parametrize(
    "reward, expected",
    [
        ("reward(completions, example):\n    return None", "the team reward"),
        ("reward(completions, example):\n    return '1.0'", "the team reward"),
        ("reward(completions, example):\n    return float('nan')", "the team reward"),
        ("reward(completions):\n    return 1.0", "TypeError at"),
        ("reward(completions, example):\n    return float(example['score'])", "KeyError at"),
    ],
)
def test_dry_run_calls_the_reward_once_and_names_what_is_wrong(
    tmp_path, capsys, no_model, reward, expected
):
    path, name = dry_task(tmp_path, reward)
    line = one_line_error(capsys, *dry_args(tmp_path, path, name, "--dry-run"))
    assert expected in line and f"task {name!r}, train row 0" in line
    if expected == "TypeError at":  # the function, its file, and the call it must take
        assert f"reward=reward ({Path(path).name}:" in line
        assert "cannot be called as reward(completions, example)" in line
    elif expected.endswith(" at"):  # the user's file, line and function
        assert f"{Path(path).name}:" in line and "in reward" in line


def test_dry_run_checks_the_agents_and_prompts_as_train_does(tmp_path, capsys, no_model):
    path, name = dry_task(tmp_path, "reward(completions, example):\n    return 1.0")
    args = dry_args(tmp_path, path, name, "--dry-run")
    line = one_line_error(capsys, *args, "team.agents=[{name: a}, {name: b}]")
    assert "must match the agents of task" in line or "team.agents" in line
    line = one_line_error(
        capsys, *args, "team.agents=[{name: left, prompt: '{nope}'}, {name: right}]"
    )
    assert "{nope}" in line and "no field 'nope'" in line
    # a good task: the resolved setting in a few lines, then the placement plan; exit 0
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"task {name}: rows 2 train, 0 eval, 0 test; agents left, right"
    assert out[3] == (
        "per step: 8 samples to train on, 8 rows in the largest generate call, "
        "4 env steps (no early stop)"
    )
    assert out[4] == "the reward on every agent replying 'A dummy reply.' (train row 0): 1"
    assert any(ln.startswith("placement plan:") for ln in out)


def test_print_config_prints_the_resolved_yaml(tmp_path, capsys, no_model):
    import yaml

    path, name = dry_task(tmp_path, "reward(completions, example):\n    return 1.0")
    assert main(dry_args(tmp_path, path, name, "--print-config", "train.max_steps=7")) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["env"]["name"] == name and printed["train"]["max_steps"] == 7
    assert [a["name"] for a in printed["team"]["agents"]] == ["left", "right"]  # the task's


# --- errors in the user's own code: one line with their frame (issue 40, item 4) --------------


def test_a_reward_that_fails_mid_run_is_one_line_with_the_users_frame(tmp_path, capsys):
    # the dummy joint action of the preflight passes; the model's replies then raise KeyError
    reward = (
        "reward(completions, example):\n"
        "    if completions['left'] == 'A dummy reply.':\n"
        "        return 0.0\n"
        "    return example['score']"
    )
    path, name = dry_task(tmp_path, reward)
    args = dry_args(tmp_path, path, name, f"log.output_dir={tmp_path}")
    line = one_line_error(capsys, *args)
    file = Path(path).name
    assert f"env.step raised KeyError at {file}:9 in reward: 'score'" in line, line
    assert line.endswith("(--traceback or TEAMRL_TRACEBACK=1 shows the stack)")
    # the whole stack on request, the user's frame in it
    from teamrl.errors import UserCodeError

    with pytest.raises(UserCodeError) as err:
        main([*args, "log.overwrite=true", "--traceback"])
    assert isinstance(err.value.__cause__, KeyError)
