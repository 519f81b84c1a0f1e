"""No silent non-learning: ``LearningWatch`` on hand-written metrics, then a tiny run whose
reward is constant.

A run that trains but cannot learn (every group flat, every completion truncated, a policy's
gradient 0) warns once per condition, at the ``log.warn_after_steps``-th consecutive step,
naming the setting to change."""

from __future__ import annotations

import json
import warnings

import pytest

from teamrl.config import ConfigError, load_config
from teamrl.envs.base import Task
from teamrl.envs.functional import FunctionEnv
from teamrl.run.logging import RunLogger
from teamrl.run.watch import LearningWatch, NotLearningWarning
from teamrl.trainer import Trainer
from tests.helpers.runs import tiny_overrides

FLAT = {"frac_zero_std_groups": 1.0, "grad_norm/shared": 0.0, "reward/mean": 0.25}
LEARNING = {"frac_zero_std_groups": 0.5, "grad_norm/shared": 0.7}


def watch(k: int = 3, **extra) -> LearningWatch:
    overrides = {"log.warn_after_steps": k, "algorithm.num_generations": 2, **extra}
    return LearningWatch(load_config(None, tiny_overrides(**overrides)))


def observed(w: LearningWatch, rows: list[dict]) -> list[list[str]]:
    """The warnings of each step, in order."""
    return [w.observe({"step": i + 1, **row}) for i, row in enumerate(rows)]


def test_a_flat_run_warns_once_at_step_k_naming_the_knobs():
    out = observed(watch(), [FLAT] * 6)
    assert [len(w) for w in out] == [0, 0, 1, 0, 0, 0]  # at step 3, not before, never again
    (text,) = out[2]
    assert "for 3 consecutive steps" in text and "frac_zero_std_groups=1.0" in text
    assert "reward/mean=0.25" in text and "the task is solved" in text  # a saturated reward
    assert "algorithm.num_generations (now 2)" in text and "temperature" in text
    assert "\n" not in text
    # the zero gradient of those steps is what flat groups give: not a second warning
    assert "grad_norm" not in text


def test_a_run_that_recovers_starts_its_count_again():
    rows = [FLAT, FLAT, LEARNING, FLAT, FLAT, LEARNING, FLAT, FLAT, FLAT]
    out = observed(watch(), rows)
    assert [len(w) for w in out] == [0, 0, 0, 0, 0, 0, 0, 0, 1]
    missing = [FLAT, FLAT, {"grad_norm/shared": 0.0}, FLAT, FLAT]  # no group metric: no count
    assert not any(observed(watch(), missing))


def test_truncation_names_the_agent_and_its_length_setting():
    rows = [{"truncated_fraction/alice": 0.5, "truncated_fraction/bob": 1.0, **LEARNING}] * 3
    out = observed(watch(), rows)
    assert out[:2] == [[], []]
    (text,) = out[2]
    assert "agent 'bob'" in text and "alice" not in text
    assert "max_completion_length=8" in text  # bob's, from tiny_overrides
    assert "team.agents.1.max_completion_length" in text and "team.agents.1.stop" in text


def test_a_zero_gradient_names_the_policy_that_had_samples():
    row = {"frac_zero_std_groups": 0.5, "grad_norm/alice": 0.4, "grad_norm/bob": 0.0}
    out = observed(watch(k=2, **{"team.policies": "separate"}), [row, row, row])
    assert out[0] == [] and out[2] == []
    (text,) = out[1]
    assert "policy 'bob'" in text and "grad_norm/bob=0.0" in text and "alice" not in text
    # a step where bob has no samples (no grad_norm/bob) is no zero gradient: the count restarts
    gap = {"frac_zero_std_groups": 0.5, "grad_norm/alice": 0.4}
    assert not any(observed(watch(k=2), [row, gap, row]))


def test_k_is_a_setting_and_zero_turns_the_warnings_off():
    assert load_config(None, tiny_overrides()).log.warn_after_steps == 3
    assert not any(observed(watch(k=0), [FLAT] * 5))
    assert [len(w) for w in observed(watch(k=1), [FLAT, FLAT])] == [1, 0]
    with pytest.raises(ConfigError, match="log.warn_after_steps"):
        load_config(None, tiny_overrides(**{"log.warn_after_steps": -1}))


def test_check_warns_and_records_the_warning_in_the_row(tmp_path):
    w = watch(k=1)
    row = dict(FLAT, step=1)
    with pytest.warns(NotLearningWarning, match="algorithm.num_generations"):
        w.check(row)
    assert row["warnings"] and "frac_zero_std_groups" in row["warnings"][0]
    quiet = dict(FLAT, step=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w.check(quiet)  # said once: no second warning, nothing recorded
    assert "warnings" not in quiet


def test_a_resumed_run_counts_the_steps_it_logged(tmp_path):
    """On resume the watch replays metrics.jsonl: two flat steps logged, one more warns."""
    cfg = load_config(None, tiny_overrides())
    logger = RunLogger(tmp_path)
    for step in (1, 2):
        logger.log({"step": step, **FLAT})
    w = LearningWatch(cfg, logger)
    assert len(w.observe({"step": 3, **FLAT})) == 1
    # and one already warned before the interruption is not said again
    logger.log({"step": 3, **FLAT})
    assert LearningWatch(cfg, logger).observe({"step": 4, **FLAT}) == []


def test_a_constant_reward_run_warns_with_the_knob_named(tmp_path):
    """End to end on tiny-llama: a reward that never varies trains 3 steps, and the third
    step's warning names the setting, on stderr (Python's warnings) and in metrics.jsonl."""
    env = lambda: FunctionEnv(agents=["alice", "bob"], reward=lambda completions, example: 1.0)  # noqa: E731
    task = Task("constant", env, train=[{"prompt": "Say hi."}] * 4)
    overrides = {"algorithm.num_generations": 2, "env.name": "constant"}
    cfg = load_config(None, tiny_overrides(steps=3, **overrides))
    trainer = Trainer(cfg, task=task, run_dir=tmp_path)
    with pytest.warns(NotLearningWarning) as caught:
        trainer.train()
    texts = [str(w.message) for w in caught if issubclass(w.category, NotLearningWarning)]
    flat = [t for t in texts if "frac_zero_std_groups=1.0" in t]
    assert len(flat) == 1 and "algorithm.num_generations (now 2)" in flat[0]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert ["warnings" in r for r in rows] == [False, False, True]
    assert flat[0] in rows[2]["warnings"]


# --- issue 44, item 4: a gradient shrunk by the importance weights ------------------------------


def test_a_mean_importance_weight_below_the_floor_warns_at_once_naming_the_mode():
    w = watch(k=3, **{"algorithm.importance_sampling_mode": "sequence_truncate"})
    rows = [{"is_weight/shared": 0.5, **LEARNING}, {"is_weight/shared": 0.002, **LEARNING}]
    out = observed(w, rows + [{"is_weight/shared": 0.001, **LEARNING}])
    assert [len(x) for x in out] == [0, 1, 0]  # the first step below 0.1, once
    (text,) = out[1]
    assert text.startswith(
        "policy 'shared': the mean importance weight was 0.002 (is_weight/shared < 0.1), which "
        "scales its policy gradient down 500x; algorithm.importance_sampling_mode="
        "'sequence_truncate' multiplies"
    )
    assert "use a token_* or geometric_* mode" in text
    # other modes: the sampler is far off; a missing or NaN weight is nothing to judge
    (text,) = observed(watch(), [{"is_weight/alice": 0.05}])[0]
    assert "is_weight/alice < 0.1" in text and "check logp_diff/alice" in text
    assert observed(watch(), [{"is_weight/shared": None}, {"is_weight/shared": 0.1}]) == [[], []]


def test_sequence_weights_under_top_p_warn_in_a_tiny_run(tmp_path):
    top_p = {"team.agents.0.top_p": 0.5, "team.agents.1.top_p": 0.5}

    def run(mode: str) -> list[str]:
        extra = {"algorithm.importance_sampling_mode": mode, **top_p}
        tr = Trainer(
            load_config(None, tiny_overrides("shared", 1, **extra)), run_dir=tmp_path / mode
        )
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            (m,) = tr.train()
        texts = [str(x.message) for x in seen if "importance weight" in str(x.message)]
        return m["is_weight/shared"], texts

    weight, texts = run("sequence_truncate")
    assert weight < 0.1 and len(texts) == 1 and "'sequence_truncate'" in texts[0]
    weight, texts = run("token_truncate")  # each token's weight is its nucleus mass, >= top_p
    assert weight > 0.1 and texts == []
