"""Fuzzed overrides: every outcome is a valid Config or a ConfigError, never another exception.

Random field paths from the config's own schema (per-agent ones and list indices included),
random values of the wrong type, huge, negative, NaN and infinite numbers, malformed YAML and
malformed keys go through ``load_config`` and then through the CLI's checks that need no model
(``preflight`` without a task). Seeded, a few hundred cases, a few seconds.
"""

from __future__ import annotations

import math
import random

import pytest
from conftest import tiny_overrides

import teamrl.preflight as preflight
from teamrl.config import Config, ConfigError, load_config
from teamrl.config_help import field_paths

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
    ):
        assert outcome([*BASE, override]) == "error", override
    # and the huge G is refused by the memory estimate, before anything is allocated
    with pytest.raises(ConfigError, match="this config needs an estimated"):
        preflight.preflight(load_config(None, [*BASE, "algorithm.num_generations=1000000"]))
