"""Refuse early, warn once (issue 44, item 4): settings that would silently do less than they
say are one-line errors when the config shows it, else one warning at the first step."""

from __future__ import annotations

import warnings

import pytest
from helpers.runs import tiny_overrides

from teamrl.config import ConfigError, load_config
from teamrl.trainer import Trainer


def test_more_minibatches_than_a_policy_ever_has_samples_is_refused():
    # magrpo, 1 prompt, G=4, 1 turn: each LoRA policy (one agent) has 4 samples a step; the
    # shared policy has both agents' 8
    assert load_config(None, tiny_overrides("lora", **{"train.num_mini_batches": 4}))
    assert load_config(None, tiny_overrides("shared", **{"train.num_mini_batches": 8}))
    with pytest.raises(ConfigError) as err:
        load_config(None, tiny_overrides("lora", **{"train.num_mini_batches": 5}))
    assert str(err.value).startswith(
        "train.num_mini_batches: 5 is more than the 4 samples policy 'alice' trains on per "
        "step at most (algorithm magrpo, prompts_per_step 1, num_generations 4, env.max_turns 1)"
    )
    with pytest.raises(ConfigError, match=r"^train\.num_mini_batches: 9 .* the 8 samples"):
        load_config(None, tiny_overrides("shared", **{"train.num_mini_batches": 9}))
    # AT-GRPO over 2 turns: K=4 candidates per (turn, agent), 8 per agent
    at = {"algorithm.name": "at_grpo", "env.kwargs": "{sequential: true}", "env.max_turns": 2}
    assert load_config(None, tiny_overrides("lora", **at, **{"train.num_mini_batches": 8}))
    with pytest.raises(ConfigError, match=r"^train\.num_mini_batches: 9 .* the 8 samples"):
        load_config(None, tiny_overrides("lora", **at, **{"train.num_mini_batches": 9}))


def test_fewer_samples_than_minibatches_at_run_time_is_warned_once_per_policy(tmp_path):
    # two turns allow 20 samples per agent, but every node stops after its first turn (any
    # reward exceeds the threshold): 4 samples, 4 optimizer steps per pass, not 8
    extra = {
        "env.max_turns": 2,
        "algorithm.early_termination_threshold": -1.0,
        "train.num_mini_batches": 8,
    }
    tr = Trainer(load_config(None, tiny_overrides("lora", 2, **extra)), run_dir=tmp_path / "r")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tr.train()
    capped = [str(w.message) for w in seen if "train.num_mini_batches" in str(w.message)]
    assert capped == [
        f"train.num_mini_batches=8, but policy {name!r} had 4 samples at step 1: it made 4 "
        "optimizer steps per pass, not 8 (said once per policy)"
        for name in ("alice", "bob")
    ]


def test_bias_corrected_kl_without_a_kl_term_is_refused():
    with pytest.raises(ConfigError) as err:
        load_config(None, tiny_overrides(**{"algorithm.use_bias_correction_kl": "true"}))
    assert str(err.value) == (
        "algorithm.use_bias_correction_kl: true has no effect with algorithm.beta=0 (no KL "
        "term to correct); set algorithm.beta > 0 or remove it"
    )
    on = {"algorithm.use_bias_correction_kl": "true", "algorithm.beta": 0.1}
    assert load_config(None, tiny_overrides(**on)).algorithm.use_bias_correction_kl
