"""Config validation: every out-of-range value is a ConfigError naming the field and value."""

from __future__ import annotations

import dataclasses
import re

import pytest

from teamrl.config import AlgorithmConfig, ConfigError, TrainConfig, load_config
from teamrl.envs.base import make_task, task_from_config
from teamrl.models import resolve

AGENTS = "team.agents=[{name: alice}, {name: bob}]"


def load(*overrides: str):
    return load_config(None, [AGENTS, *overrides])


@pytest.mark.parametrize(
    "override, field",
    [
        ("train.micro_batch_size=-1", "train.micro_batch_size"),
        ("algorithm.epsilon_high=0", "algorithm.epsilon_high"),
        ("algorithm.epsilon_high=-0.1", "algorithm.epsilon_high"),
        ("team.agents.1.top_k=-1", "team.agents[1].top_k"),
        ("train.warmup_steps=-1", "train.warmup_steps"),
        ("train.min_lr_ratio=-0.1", "train.min_lr_ratio"),
        ("train.min_lr_ratio=1.5", "train.min_lr_ratio"),
        ("log.save_steps=-1", "log.save_steps"),
        ("eval.eval_steps=-1", "eval.eval_steps"),
        ("eval.num_examples=0", "eval.num_examples"),
        ("model.lora_r=0", "model.lora_r"),
        ("train.max_grad_norm=0", "train.max_grad_norm"),
        ("train.max_grad_norm=-1.0", "train.max_grad_norm"),
        ("team.agents.0.temperature=0", "team.agents[0].temperature"),
    ],
)
def test_out_of_range_values_name_the_field_and_value(override, field):
    value = override.split("=", 1)[1]
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(field)}: expected .*got {re.escape(value)}"
    ):
        load(override)


def test_edge_values_that_stay_valid():
    cfg = load(
        "train.micro_batch_size=0",  # 0, like None, is the whole minibatch
        "train.min_lr_ratio=1.0",
        "train.max_grad_norm=null",
        "algorithm.epsilon_high=0.28",
        "team.agents.0.top_k=0",
        "eval.eval_steps=0",
        "log.save_steps=0",
        "model.lora_r=1",
    )
    assert cfg.train.micro_batch_size == 0 and cfg.train.max_grad_norm is None
    # greedy agents are fine when nothing is trained (an eval-only config)
    assert load("team.agents.0.temperature=0", "train.max_steps=0").team.agents[0].temperature == 0


def test_help_strings_say_what_the_special_values_mean():
    helps = {f.name: f.metadata["help"] for f in dataclasses.fields(TrainConfig)}
    assert "0 = the whole minibatch" in helps["micro_batch_size"]
    helps = {f.name: f.metadata["help"] for f in dataclasses.fields(AlgorithmConfig)}
    for words in ("'magrpo'", "mean(R of the child", "'at_grpo'", "return-to-go", "'grpo'"):
        assert words in helps["discount"]
    for words in ("'group' divides by the group's std", "'batch'", "all raw rewards", "'none'"):
        assert words in helps["scale_rewards"]


# --- unknown names ----------------------------------------------------------------------------


def test_unknown_task_and_model_are_config_errors_listing_the_options():
    assert issubclass(ConfigError, ValueError)  # callers catching ValueError still work
    with pytest.raises(ConfigError, match=r"env\.name: unknown task 'nope'; known tasks: .*tldr"):
        make_task("nope")
    with pytest.raises(ConfigError, match=r"env\.kwargs for task 'digits'"):
        make_task("digits", bogus=1)
    with pytest.raises(ConfigError, match=r"model\.name_or_path: unknown builtin .*tiny-llama"):
        resolve("tiny-nope")


# --- env.max_turns reaches the task -----------------------------------------------------------


def test_env_max_turns_is_passed_to_builders_that_take_it():
    # The game's own default is 5 turns; the run's env.max_turns is what its prompts must say.
    cfg = load(
        "env.name=sokoban",
        "env.kwargs={n_train: 1, n_eval: 1, n_test: 1}",
        "env.max_turns=2",
        "team.agents=[{name: tool}, {name: plan}]",
    )
    task = task_from_config(cfg.env)
    env = task.make_env()
    obs = env.reset(task.train[0])
    assert all("of 2)" in o for o in obs.values()), obs
    # a builder without a max_turns argument is called without it
    assert task_from_config(load("env.name=digits").env).train


def test_env_max_turns_and_env_kwargs_max_turns_must_agree():
    same = load(
        "env.name=sokoban_single",
        "env.kwargs={max_turns: 3, n_train: 1, n_eval: 1, n_test: 1}",
        "env.max_turns=3",
    )
    assert task_from_config(same.env).make_env().max_turns == 3
    with pytest.raises(ConfigError, match=r"env\.kwargs\.max_turns=5 .*env\.max_turns=2"):
        load("env.name=sokoban_single", "env.kwargs={max_turns: 5}", "env.max_turns=2")
    # also when the config was built without validate()
    same.env.kwargs["max_turns"] = 4
    with pytest.raises(ConfigError, match=r"env\.kwargs\.max_turns=4 .*env\.max_turns=3"):
        task_from_config(same.env)
