"""The learning ladder's lowest rung as tests: a one-token bandit that every trainer must learn.

The bandit pays 1 when an answer's first non-space character is one of ``target``; the prompt
never says which, so only the reward can teach it. On a tiny random model about 15 % of tokens
start with a vowel, so the first steps score near 0.15. A pipeline that samples one thing and
trains another, scores the wrong sample, or drops the advantage's sign cannot pass: the reward
must climb near 1. The Plan-Path rungs above it are the experiment table ``plan_path_ladder``
(docs/results.md).
"""

from __future__ import annotations

import pytest
from helpers.runs import tiny_overrides

from teamrl.config import load_config
from teamrl.tasks.registry import make_task
from teamrl.tasks.toy import first_char_hits
from teamrl.trainer import Trainer

VOWELS = "aeiou"


def bandit_run(tmp_path, algorithm: str, agents: list[str], sequential: bool = False):
    names = ", ".join(agents)
    team = ", ".join(f"{{name: {a}, max_completion_length: 1}}" for a in agents)
    overrides = tiny_overrides(
        "shared",
        30,
        **{
            "env.name": "bandit",
            "env.kwargs": f"{{target: {VOWELS}, agents: [{names}], sequential: {sequential}}}",
            "team.agents": f"[{team}]",
            "algorithm.name": algorithm,
            "algorithm.num_generations": 8,
            "train.prompts_per_step": 2,
            "train.learning_rate": 0.02,
            "seed": 0,
        },
    )
    trainer = Trainer(load_config(None, overrides), run_dir=tmp_path / "run")
    history = trainer.train()
    if algorithm != "at_grpo":  # reward/mean: the mean team reward over every sample
        return [m["reward/mean"] for m in history]
    # AT-GRPO's reward/mean follows the path it continues, the best of K at each node, which
    # hits from the first step; what the policy samples is the first agent's candidates' mean
    # (its reward is its own hit: the bandit scores the answers given so far in the turn).
    return [m[f"reward/agent/{agents[0]}/mean"] for m in history]


@pytest.mark.parametrize(
    "algorithm, agents, sequential",
    [
        ("grpo", ["picker"], False),
        ("magrpo", ["alice", "bob"], False),
        ("at_grpo", ["tool", "plan"], True),
    ],
)
def test_bandit_rung_reward_climbs_near_one(tmp_path, algorithm, agents, sequential):
    rewards = bandit_run(tmp_path, algorithm, agents, sequential)
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert first < 0.5, rewards
    assert last > 0.9, rewards


def test_bandit_reward_and_success_by_hand():
    task = make_task("bandit", target="CD", agents=("a", "b"), n_train=2, n_eval=1, n_test=1)
    env = task.make_env()
    env.reset(task.train[0])
    step = env.step({"a": "  C is mine", "b": "B"})
    assert step.reward == 0.5 and step.success is False
    assert step.reward_components == {"hit_a": 1.0, "hit_b": 0.0}
    env.reset(task.train[1])
    step = env.step({"a": "D", "b": "\nC."})
    assert step.reward == 1.0 and step.success is True
    # splits never share a row
    rows = [tuple(sorted(r.items())) for r in (*task.train, *task.eval, *task.test)]
    assert len(set(rows)) == len(rows) == 4


@pytest.mark.parametrize("text, hit", [("", False), ("   ", False), ("c", False), ("Cat", True)])
def test_first_char_hits(text, hit):
    assert first_char_hits(text, "C") is hit


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"target": ""}, "bandit.target"),
        ({"target": "A B"}, "bandit.target"),
        ({"agents": "ab"}, "bandit.agents"),
        ({"agents": []}, "bandit.agents"),
    ],
)
def test_bandit_bad_input_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        make_task("bandit", **kwargs)
