"""Fuzzed overrides: every outcome is a valid Config or a ConfigError, never another exception.

Random field paths from the config's own schema (per-agent ones and list indices included),
random values of the wrong type, huge, negative, NaN and infinite numbers, malformed YAML and
malformed keys go through ``load_config`` and then through the CLI's checks that need no model
(``preflight`` without a task). Seeded, a few hundred cases, a few seconds.

Then a sweep (issue 20): every leaf field with every hostile value of its own type and values
of the other types, and the kwargs of the tasks whose data ``env.kwargs.source`` names, built
with the hub offline: a valid config (task) or one ConfigError line, never a traceback.
"""

from __future__ import annotations

import math
import random
import types
import typing

import pytest
from helpers.runs import tiny_overrides

import teamrl.preflight as preflight
from teamrl.config import Config, ConfigError, load_config
from teamrl.config.reference import field_paths

BASE = tiny_overrides(steps=2)

VALUES = [
    "0", "1", "-1", "2", "3", "7", "-7", "0.5", "-0.5", "1.0", "1.5", "1e-6", "1e400", "-1e400",
    ".inf", "-.inf", ".nan", "nan", "inf", str(2**70), str(-(2**70)), "1180591620717411303424",
    "99999999999", "100000", "true", "false", "null", "~", "", "''", "abc", "../x", "/etc",
    "a/b", "..", ".", "cuda", "cuda:7", "cpu", "auto", "gpu", "[1", "]", "{a: 1", "}", ": :",
    "'unterminated", "\"x", "[]", "{}", "[a, b]", "[1, 2]", "[[[[1]]]]", "{a: {b: {c: 1}}}",
    "[{name: x}]", "[{name: alice}, {name: alice}]", "[{}]", "[foo]", "[q_proj, nope]",
    "!!python/object/apply:os.system ['true']", "*alias", "&a [1]", "- a\n- b", "2020-01-01",
    "0x10", "0o7", "1_000", "+1", "0.0.1", "[alice]", "[bob, alice]", "[alice, bob, carol]",
    "{name: x, bogus: 1}", "\t", "é", "\x00", "a" * 300,
]  # fmt: skip

BAD_KEYS = [
    "a..b", ".x", "train.", "", "team.agents.x.name", "team.agents.-1.name", "train.max_steps.0",
    "team.agents.0.name.x", "team.agents.99.top_p", "nosuch", "train.nosuch", "team.agents.0.x",
    "env.kwargs.0.a", "run_name.x", "log.wandb.x.y", "team.agents.00.name", "model..device",
]  # fmt: skip


def random_override(rng: random.Random, paths: list[str]) -> str:
    if rng.random() < 0.1:
        key = rng.choice(BAD_KEYS)
    else:
        key = rng.choice(paths).replace("<i>", str(rng.choice([0, 1, 1, 2, 5])))
    if rng.random() < 0.03:
        return key  # no '='
    return f"{key}={rng.choice(VALUES)}"


def outcome(overrides: list[str]) -> str:
    """'ok' or 'error'; any other exception fails the test (with the overrides that caused it)."""
    try:
        cfg = load_config(None, overrides)
        assert isinstance(cfg, Config)
        for value in (cfg.train.learning_rate, cfg.algorithm.epsilon, cfg.model.lora_dropout):
            assert math.isfinite(value)
        preflight.preflight(cfg, task=None)
    except ConfigError as err:
        assert "\n" not in str(err), (overrides, str(err))
        return "error"
    return "ok"


@pytest.fixture
def fast_meta(monkeypatch):
    # Building a meta model per case is the slow part; the same name gives the same modules.
    cache: dict = {}
    real = preflight.meta_model

    def cached(model_cfg):
        key = model_cfg.to_json_string()
        if key not in cache:
            cache[key] = real(model_cfg)
        return cache[key]

    monkeypatch.setattr(preflight, "meta_model", cached)


def test_fuzzed_overrides_give_a_config_or_a_config_error(fast_meta):
    rng = random.Random(20261123)
    paths = sorted(field_paths())
    counts = {"ok": 0, "error": 0}
    for _ in range(400):
        overrides = [random_override(rng, paths) for _ in range(rng.choice([1, 1, 2, 3]))]
        counts[outcome(BASE + overrides)] += 1
    # both outcomes occur: the fuzzer reaches valid configs and refused ones
    assert counts["ok"] >= 10 and counts["error"] >= 200, counts


def test_the_known_bad_values_are_refused():
    for override in (
        "train.learning_rate=.inf",
        "log.save_total_limit=-1",
        "model.lora_dropout=-1",
        "run_name=",
        "run_name=../../../x",
        "seed=1180591620717411303424",
        "team.agents.5.name=x",
        "env.turn_order=[alice]",
        "train.max_steps=[1",
        # issue 20, item 5
        "train.micro_batch_size=0",
        "train.micro_batch_size=-3",
        'run_name="a\\nb"',  # YAML's escape: a real newline in the name
        'run_name="run\\t1"',
        "team.agents.0.prompt='{observation.__class__.__mro__}'",
        "team.agents.0.prompt='{x[0]}'",
        "team.agents.0.prompt='{observation:>999999999}'",
        # found by the sweep below: a path part past 255 bytes made pathlib raise ENAMETOOLONG
        "model.name_or_path=" + "a" * 256,
    ):
        assert outcome([*BASE, override]) == "error", override
    # and the huge G is refused by the memory estimate, before anything is allocated
    with pytest.raises(ConfigError, match="this config needs an estimated"):
        preflight.preflight(load_config(None, [*BASE, "algorithm.num_generations=1000000"]))


# --- every field, every hostile value of its type (issue 20) -----------------------------------
# A sweep, not a sample: each leaf field of the schema gets the values of its own type that
# break code (0, negatives, huge, nan, inf, empty and blank strings, newlines, control
# characters, very long strings, empty and duplicate lists) and values of the other types;
# each is a valid config or a one-line ConfigError.

INTS = ["0", "-1", "1", "-2147483649", str(2**63), str(2**70), str(-(2**70)), "10**400"]
FLOATS = ["0.0", "-0.0", "-1.0", "5e-324", "1e-300", "1e300", "1.7e308", "1e400", ".nan",
          ".inf", "-.inf", "1e999999"]  # fmt: skip
STRINGS = ["''", "' '", '"\\n"', '"a\\nb"', '"a\\rb"', '"\\t"', '"a\\0b"', '"\\x1b[2J"',
           '"\\u2028"', '"\\u202e"', "'{observation.__class__}'", "'{x[0]}'", "'{}'", "'{'",
           "'../x'", "/etc", "'" + "a" * 5000 + "'", "é", "'None'", "'0'"]  # fmt: skip
LISTS = ["[]", "['']", "[' ']", '["a\\nb"]', "[a, a]", "[[a]]", "[1]", "[null]", "[{a: 1}]"]
OTHERS = ["null", "true", "false", "{}", "{a: 1}", "[]", "0", "''"]  # wrong types for any field


def hostile_values(tp) -> list[str]:
    """YAML texts of hostile values of ``tp`` (a field's type hint), and of other types."""
    origin, args = typing.get_origin(tp), [a for a in typing.get_args(tp) if a is not type(None)]
    if origin is typing.Literal:
        own = [repr(a) for a in args] + ["''", "'nope'", '"\\n"', "'" + "x" * 300 + "'"]
    elif origin in (typing.Union, types.UnionType):  # X | None: X's values (null is in OTHERS)
        own = [v for a in args for v in hostile_values(a)]
    else:
        kinds = {int: INTS, float: INTS + FLOATS, bool: ["true", "false", "yes", "1"]}
        own = {**kinds, str: STRINGS}.get(tp, LISTS)  # list[str] and the rest: lists
    return own + OTHERS


def sweep_cases() -> list[tuple[str, str]]:
    cases = []
    for path, tp in sorted(field_paths().items()):
        key = path.replace("<i>", "1")
        if path == "team.agents":
            values = ["[]", "[{}]", "[{name: ''}]", '[{name: "a\\nb"}]', "[{name: x}, {name: x}]"]
        elif path == "env.kwargs":
            continue  # a task's kwargs: test_every_task_kwarg_value_is_a_task_or_one_line
        else:
            values = hostile_values(tp)
        cases += [(key, v) for v in dict.fromkeys(values)]
    return cases


def test_every_field_takes_every_hostile_value_of_its_type_as_a_config_or_one_line(fast_meta):
    counts = {"ok": 0, "error": 0}
    for key, value in sweep_cases():
        counts[outcome([*BASE, f"{key}={value}"])] += 1
    # every field was reached: most values are refused, the valid ones pass
    assert counts["error"] > 1000 and counts["ok"] > 100, counts


@pytest.fixture
def hub_offline(monkeypatch):
    """No network: the hub in offline mode, so a hub id fails at once and in one line."""
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


SMALL_MATH = {"n_train": 4, "n_eval": 2, "n_test": 2}
TASK_KWARGS = [  # (task, the other kwargs, a field, its values): the tasks a source names
    ("tldr", {}, "source", ["offline", "hub", "/etc", "''", "' '", '"hub\\n"', "null", "1", "[hub]"]),
    ("tldr", {}, "limit", ["1", "0", "-1", str(2**70), "1.5", "abc", "true", "null", "[]", "{}"]),
    ("tldr", {"source": "hub"}, "dataset_id",
     ["LOCAL", "/etc", "/nonexistent", "''", "' '", "null", "7", "teamrl-tests/none", "[a]"]),
    ("tldr", {"source": "hub", "dataset_id": "LOCAL"}, "splits",
     ["[train, validation, test]", "x", "[]", "[a, b]", "[a, b, c]", "[1, 2, 3]", "null"]),
    ("math", SMALL_MATH, "source", ["arithmetic", "aime2024", "/etc", "''", "null", "[gsm8k]", "7"]),
    ("math", {"source": "aime2024"}, "train_source", ["arithmetic", "x", "null", "[]"]),
    ("math", SMALL_MATH, "limit", ["1", "0", "-1", str(2**70), "abc", "true", "[]"]),
    ("math", {"source": "gsm8k"}, "dataset_id", ["/etc", "/nonexistent", "''", "7", "null"]),
]  # fmt: skip


@pytest.fixture
def local_tldr(tmp_path):
    """A local copy of a tiny TLDR set (the hub's columns and split names), for dataset_id."""
    import json

    folder = tmp_path / "tldr"
    folder.mkdir()
    for split in ("train", "validation", "test"):
        row = {"prompt": "SUBREDDIT: r/x TITLE: t POST: a post. TL;DR:", "completion": " short"}
        (folder / f"{split}.jsonl").write_text(json.dumps(row) + "\n")
    return str(folder)


def task_outcome(task: str, kwargs: dict) -> str:
    """'ok' or 'error' for ``env.kwargs`` of ``task``, through load_config and the task build."""
    from teamrl.tasks.registry import task_from_config

    text = "{" + ", ".join(f"{k}: {v}" for k, v in kwargs.items()) + "}"
    try:
        cfg = load_config(None, [*BASE, f"env.name={task}", f"env.kwargs={text}"])
        task_from_config(cfg.env)
    except ConfigError as err:
        assert "\n" not in str(err), (task, text, str(err))
        return "error"
    return "ok"


def test_every_task_kwarg_value_is_a_task_or_one_line(
    hub_offline, local_tldr, tmp_path, monkeypatch
):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    counts = {"ok": 0, "error": 0}
    for task, base, name, values in TASK_KWARGS:
        for value in values:
            kwargs = {
                k: local_tldr if v == "LOCAL" else v for k, v in {**base, name: value}.items()
            }
            counts[task_outcome(task, kwargs)] += 1
    # the valid values build a task (the local copy included), the rest are one line each
    assert counts["ok"] >= 8 and counts["error"] >= 40, counts
