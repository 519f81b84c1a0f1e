"""A resume that changes a setting of the training maths says so, each change named
(issue 44, item 4): per-agent entries included, where, before, only the algorithm section (as
one unnamed line) and the schedule were compared."""

from __future__ import annotations

import warnings

import pytest
from helpers.runs import tiny_overrides

from teamrl.config import load_config
from teamrl.run.checkpoints import setting_changes
from teamrl.trainer import Trainer


def changes(**extra) -> list[str]:
    base = load_config(None, tiny_overrides("lora"))
    return setting_changes(base, load_config(None, tiny_overrides("lora", **extra)))


def test_a_per_agent_setting_changed_on_resume_is_named_in_one_warning(tmp_path):
    run = tmp_path / "run"
    Trainer(
        load_config(None, tiny_overrides("shared", 1, **{"log.save_steps": 1})), run_dir=run
    ).train()
    more = {
        "log.save_steps": 1,
        "team.agents.0.num_iterations": 2,
        "team.agents.1.num_iterations": 2,
    }
    again = Trainer(load_config(None, tiny_overrides("shared", 2, **more)), run_dir=run)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        again.train(resume=True)
    texts = [str(w.message) for w in seen if "changed training settings" in str(w.message)]
    assert len(texts) == 1, [str(w.message) for w in seen]
    assert "team.agents[alice].num_iterations: None -> 2; " in texts[0]
    assert "team.agents[bob].num_iterations: None -> 2)" in texts[0]
    assert "max_steps" not in texts[0]  # the schedule's own warning names that


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({"team.agents.1.temperature": 0.5}, ["team.agents[bob].temperature: 1.0 -> 0.5"]),
        ({"algorithm.beta": 0.1}, ["algorithm.beta: 0.0 -> 0.1"]),
        ({"train.num_mini_batches": 2}, ["train.num_mini_batches: 1 -> 2"]),
        ({"train.shuffle": False}, ["train.shuffle: True -> False"]),
        ({"env.max_turns": 2}, ["env.max_turns: 1 -> 2"]),
        ({"seed": 3}, ["seed: 0 -> 3"]),
        # where and how it runs, logs and evaluates: not the maths
        ({"log.save_steps": 7, "eval.eval_steps": 2, "train.micro_batch_size": 2}, []),
        # the schedule's fields, per-agent LR included, are schedule_changes's
        ({"train.learning_rate": 0.5, "team.agents.0.learning_rate": 0.5}, []),
    ],
)
def test_which_settings_a_resume_compares(extra, expected):
    assert changes(**extra) == expected
