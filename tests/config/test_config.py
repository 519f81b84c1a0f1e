"""Config validation: every out-of-range value is a ConfigError naming the field and value."""

from __future__ import annotations

import dataclasses
import re

import pytest

from teamrl.config import AlgorithmConfig, ConfigError, TrainConfig, load_config
from teamrl.config.reference import describe, field_paths
from teamrl.config.step_shape import step_shape
from teamrl.tasks.registry import make_task, task_from_config
from teamrl.team.models import resolve

AGENTS = "team.agents=[{name: alice}, {name: bob}]"


def load(*overrides: str):
    return load_config(None, [AGENTS, *overrides])


@pytest.mark.parametrize(
    "override, field",
    [
        ("train.micro_batch_size=-1", "train.micro_batch_size"),
        ("train.micro_batch_size=0", "train.micro_batch_size"),  # issue 20: None = whole
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
        ("model.lora_dropout=1.0", "model.lora_dropout"),
        ("model.lora_dropout=-0.1", "model.lora_dropout"),
        ("model.lora_alpha=0", "model.lora_alpha"),
        ("train.adam_beta1=1.0", "train.adam_beta1"),
        ("train.adam_beta2=-0.1", "train.adam_beta2"),
        ("train.weight_decay=-1", "train.weight_decay"),
        ("train.learning_rate=0", "train.learning_rate"),
        ("log.save_total_limit=0", "log.save_total_limit"),
        ("log.num_groups_to_log=-1", "log.num_groups_to_log"),
        ("seed=-1", "seed"),
        ("seed=4294967296", "seed"),
        ("algorithm.selection_temperature=0", "algorithm.selection_temperature"),
        ("env.reward_workers=0", "env.reward_workers"),
        ("team.agents.1.max_completion_length=0", "team.agents[1].max_completion_length"),
        ("team.agents.0.top_p=1.5", "team.agents[0].top_p"),
        ("model.device='gpu'", "model.device"),
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
        "train.micro_batch_size=1",
        "train.min_lr_ratio=1.0",
        "train.max_grad_norm=null",
        "algorithm.epsilon_high=0.28",
        "team.agents.0.top_k=0",
        "eval.eval_steps=0",
        "log.save_steps=0",
        "model.lora_r=1",
    )
    assert cfg.train.micro_batch_size == 1 and cfg.train.max_grad_norm is None
    assert load("train.micro_batch_size=null").train.micro_batch_size is None
    # greedy agents are fine when nothing is trained (an eval-only config)
    assert load("team.agents.0.temperature=0", "train.max_steps=0").team.agents[0].temperature == 0


def test_help_strings_say_what_the_special_values_mean():
    helps = {f.name: f.metadata["help"] for f in dataclasses.fields(TrainConfig)}
    assert "None = the whole minibatch" in helps["micro_batch_size"]
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


def test_a_close_miss_gets_did_you_mean_first_for_keys_tasks_and_builtins():
    from teamrl.team.models import model_config

    with pytest.raises(ConfigError) as err:
        load("train.max_step=3")
    assert str(err.value).startswith(
        "train.max_step: unknown key; did you mean 'train.max_steps'? valid keys here: "
    )
    with pytest.raises(ConfigError) as err:
        load("team.agents=[{name: alice}, {name: bob, temprature: 0.5}]")
    assert str(err.value).startswith(
        "team.agents[1].temprature: unknown key; did you mean 'team.agents[1].temperature'? "
    )
    with pytest.raises(ConfigError) as err:  # top level: the suggestion has no section
        load("sed=3")
    assert str(err.value).startswith("sed: unknown key; did you mean 'seed'? valid keys here: ")
    # nothing close: the list alone, as before
    with pytest.raises(ConfigError, match=r"^train\.zzz: unknown key; valid keys here: "):
        load("train.zzz=1")
    with pytest.raises(ConfigError) as err:
        make_task("tdlr")
    assert str(err.value).startswith("env.name: unknown task 'tdlr'; did you mean 'tldr'? known")
    with pytest.raises(ConfigError) as err:
        resolve("tiny-lama")
    assert str(err.value).startswith(
        "model.name_or_path: unknown builtin 'tiny-lama'; did you mean 'tiny-llama'? builtins: "
    )
    # a hub-shaped name close to a builtin (the hub is offline in the tests)
    with pytest.raises(ConfigError) as err:
        model_config("smollm2-135")
    assert str(err.value).startswith(
        "model.name_or_path: cannot load 'smollm2-135': did you mean the builtin 'smollm2-135m'? "
    )
    assert "\n" not in str(err.value)


# --- overrides as one string or a mapping -----------------------------------------------------


def test_load_config_takes_one_override_string_or_a_mapping():
    # one string is one override (it was read as a list of one-letter overrides: 't')
    cfg = load_config(None, "train.max_steps=1")  # the agents and task: the task's, later
    assert (cfg.train.max_steps, cfg.team.agents, cfg.env.name) == (1, [], None)
    assert load_config("quickstart", "train.max_steps=3").train.max_steps == 3
    assert load_config(None, AGENTS).team.agents[1].name == "bob"
    agents = [{"name": "alice"}, {"name": "bob"}]
    cfg = load_config(
        None,
        {"train.max_steps": 1, "run_name": "007", "team.agents": agents, "team.agents.1.top_k": 5},
    )
    assert cfg.train.max_steps == 1
    assert cfg.run_name == "007"  # a mapping's values are taken as they are, not read as YAML
    assert [a.name for a in cfg.team.agents] == ["alice", "bob"] and cfg.team.agents[1].top_k == 5
    assert agents == [{"name": "alice"}, {"name": "bob"}]  # the caller's list is left alone
    # the same as the list form, and the same checks
    assert load_config(None, {"seed": 3, "team.agents": agents}) == load(*["seed=3"])
    with pytest.raises(ConfigError, match=r"^train\.max_steps: expected an int, got '1'$"):
        load_config(None, {"team.agents": agents, "train.max_steps": "1"})
    with pytest.raises(ConfigError, match=r"^train\.max_step: unknown key; did you mean"):
        load_config(None, {"team.agents": agents, "train.max_step": 1})
    with pytest.raises(ConfigError, match=r"^override 'train\.max_steps': expected key=value"):
        load_config(None, "train.max_steps")
    with pytest.raises(ConfigError, match=r"^override key 1: expected a dotted name"):
        load_config(None, {1: 2})


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


# --- values that are not numbers, names that are paths, lists that do not fit -----------------


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "nan", "1e400"])
def test_every_float_field_refuses_non_finite_values(value):
    floats = [p for p, tp in field_paths().items() if tp in (float, float | None)]
    assert "train.learning_rate" in floats and "team.agents.<i>.temperature" in floats
    for path in floats:
        key = path.replace("<i>", "0")
        shown = key.replace("team.agents.0", "team.agents[0]")
        with pytest.raises(ConfigError, match=rf"^{re.escape(shown)}: expected a finite float"):
            load(f"{key}={value}")


@pytest.mark.parametrize(
    "name",
    ["", " ", ".", "..", "../../../x", "a/b", "/tmp/x", "a\\b"]
    # issue 20: the run folder's name, and a line of every log that names it
    + ["a\nb", "run\n", "a\rb", "a\tb", "a\x00b", "a\x1b[31mb", "a\u2028b", "a\u202eb"]
    + ["x" * 256, "é" * 128],  # longer than a file name (255 bytes; é is 2 bytes)
)
def test_run_name_is_a_plain_folder_name(name):
    with pytest.raises(ConfigError, match=r"^run_name: expected a non-empty folder name") as err:
        _load_data({"run_name": name})
    assert "\n" not in str(err.value) and repr(name) in str(err.value)


def test_ordinary_run_names_stay_valid():
    for name in ("my-run_2.v1", "x" * 255, "é" * 127, "run 3 (lr=1e-4)", "日本語"):
        assert _load_data({"run_name": name}).run_name == name


def _load_data(data: dict):
    """A config from a YAML document (what a config file holds), so that any string, control
    characters included, reaches the check as itself."""
    import yaml

    from teamrl.config import Config, from_dict

    text = yaml.safe_dump({"team": {"agents": [{"name": "alice"}, {"name": "bob"}]}, **data})
    return from_dict(Config, yaml.safe_load(text)).validate()


def test_seed_range_and_save_total_limit_none():
    assert load(f"seed={2**32 - 1}").seed == 2**32 - 1
    assert load("log.save_total_limit=null").log.save_total_limit is None
    with pytest.raises(ConfigError, match=r"^seed: expected an int in \[0, 2\*\*32\)"):
        load(f"seed={2**70}")


def test_turn_order_must_list_every_agent_once():
    assert load("env.turn_order=[bob, alice]").env.turn_order == ["bob", "alice"]
    for order in ("[alice]", "[alice, alice]", "[alice, bob, carol]"):
        with pytest.raises(
            ConfigError, match=r"^env\.turn_order: expected each agent .*alice, bob"
        ):
            load(f"env.turn_order={order}")


def test_the_rollout_tree_is_bounded():
    # cross: G^N joint actions per node, over max_turns levels: 10^2 + 10^4 + 10^6 > 10^6
    assert (
        step_shape(load("algorithm.joint_mode=cross", "algorithm.num_generations=10")).env_steps
        == 100
    )
    cfg = load("algorithm.joint_mode=cross", "algorithm.num_generations=10", "env.max_turns=2")
    assert step_shape(cfg).env_steps == 100 + 100**2
    with pytest.raises(ConfigError, match=r"^algorithm\.num_generations: expected a rollout tree"):
        load("algorithm.joint_mode=cross", "algorithm.num_generations=10", "env.max_turns=3")
    # AT-GRPO: K branches per (turn, agent) and prompt
    at = load("algorithm.name=at_grpo", "algorithm.num_generations=8", "env.max_turns=3")
    assert step_shape(at).env_steps == 1 * 8 * 2 * 3


@pytest.mark.parametrize(
    "override, words",
    [
        ("team.agents.2.name=x", "index 2 out of range (team.agents has 2 entries; indices 0..1)"),
        ("team.agents.x.name=y", "team.agents.x indexes a list; expected a number"),
        ("train.max_steps=[1", "cannot parse value '[1' as YAML"),
        ("train.max_steps={a: 1", "cannot parse value '{a: 1' as YAML"),
        ("a..b=1", "malformed key 'a..b'"),
        ("train.max_steps", "expected key=value"),
        ("run_name.x.y=1", "run_name is 'run', not a section or a list"),
    ],
)
def test_malformed_overrides_name_the_key(override, words):
    with pytest.raises(ConfigError) as err:
        load_config(None, [AGENTS, "run_name=run", override])
    assert words in str(err.value)


def test_an_index_into_an_unset_list_says_to_set_the_whole_list():
    with pytest.raises(ConfigError, match=r"index 0 out of range \(team\.agents is not set"):
        load_config(None, ["team.agents.0.name=x"])


def test_yaml_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  max_steps: [1, 2\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(bad))}, line 3, column 1: invalid"):
        load_config(bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match=r"expected a YAML mapping at the top level, got a list"):
        load_config(bad)
    with pytest.raises(ConfigError, match=r"cannot read config file"):
        load_config(tmp_path)  # a folder
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config(empty, [AGENTS]).run_name == "run"


def test_describe_lists_per_agent_fields_with_help_and_defaults():
    text = "\n".join(describe())
    assert "[team.agents.<i>]" in text
    assert "  team.agents.<i>.name = 'REQUIRED'\n      Role name" in text
    assert "  team.agents.<i>.max_completion_length = 64\n      Maximum new tokens" in text
    assert "  team.agents.<i>.response_prefix = ''" in text


# --- prompt templates (issue 20) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "template, field, problem",
    [
        ("{observation.__class__.__mro__}", "{observation.__class__.__mro__}", "an attribute"),
        ("Q: {question.__init__.__globals__}", "{question.__init__.__globals__}", "attribute"),
        ("{x[0]}", "{x[0]}", "an index"),
        ("{observation[__builtins__]}", "{observation[__builtins__]}", "an index"),
        ("{observation:>99999999}", "{observation:>99999999}", "format spec"),
        ("{observation:{question}}", "{observation:{question}}", "format spec"),
        ("{observation!r}", "{observation!r}", "conversion"),
        ("{}", "{}", "positional"),
        ("see {0}", "{0}", "positional"),
    ],
)
def test_prompt_templates_may_only_name_fields(template, field, problem):
    with pytest.raises(ConfigError) as err:
        _load_data({"team": {"agents": [{"name": "alice", "prompt": template}]}})
    msg = str(err.value)
    assert msg.startswith(f"team.agents[0].prompt: field {field} in template {template!r}")
    assert problem in msg and "\n" not in msg


def test_a_config_built_in_code_is_checked_by_the_trainer(tmp_path):
    # The Python API path: a Config changed after load_config never went through the rules.
    import dataclasses

    from helpers.runs import tiny_overrides

    from teamrl.config import load_config
    from teamrl.trainer import Trainer

    cfg = load_config(None, tiny_overrides("shared", 1))
    agent = dataclasses.replace(cfg.team.agents[0], prompt="{observation.__class__.__mro__}")
    team = dataclasses.replace(cfg.team, agents=[agent, *cfg.team.agents[1:]])
    with pytest.raises(ConfigError, match=r"^team.agents\[0\].prompt: field"):
        Trainer(dataclasses.replace(cfg, team=team), run_dir=tmp_path)


def test_plain_prompt_templates_stay_valid():
    for template in ("{observation}", "Q: {question}\n{observation}", "{{literal}} {a_b}", "x"):
        agents = [{"name": "alice", "prompt": template}]
        assert _load_data({"team": {"agents": agents}}).team.agents[0].prompt == template


def test_unmatched_brace_in_a_template_is_one_line():
    with pytest.raises(ConfigError, match=r"^team.agents\[0\].prompt: malformed template '\{q'"):
        _load_data({"team": {"agents": [{"name": "alice", "prompt": "{q"}]}})


def test_a_model_name_with_a_part_longer_than_a_file_name_is_one_line():
    # The file system refuses such a lookup (ENAMETOOLONG), which pathlib raised as a traceback.
    want = "expected a non-empty model name or path whose every '/' part is at most 255 bytes"
    for override, field in (
        ("model.name_or_path=" + "a" * 256, "model.name_or_path"),
        ("team.agents.1.model=org/" + "é" * 128, "team.agents[1].model"),
    ):
        with pytest.raises(ConfigError, match=rf"^{re.escape(field)}: {want}"):
            load("team.policies=separate", override)
    long_ok = "org/" + "a" * 255
    assert load(f"model.name_or_path={long_ok}").model.name_or_path == long_ok


def test_a_config_files_yaml_aliases_are_bounded(tmp_path):
    """A user's config is read as a run's config.yaml is (teamrl.config.yaml_file): a few
    hundred bytes of aliases of aliases are refused in one line, a merge key still reads."""
    levels = ["a0: &a0 " + '"' + "x" * 9 + '"']
    for i in range(1, 7):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        levels.append(f"a{i}: &a{i} [{refs}]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(["x_anchors:", *("  " + line for line in levels)]) + "\n")
    assert bomb.stat().st_size < 1000
    with pytest.raises(ConfigError, match=r"aliases expand it from .* an alias bomb\?"):
        load_config(bomb)
    ok = tmp_path / "ok.yaml"
    ok.write_text("base: &b {max_steps: 3}\ntrain:\n  <<: *b\n  prompts_per_step: 2\n")
    with pytest.raises(ConfigError, match=r"base"):  # read, then refused as an unknown section
        load_config(ok)
