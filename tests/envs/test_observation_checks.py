"""A prompt (an observation) that is not a str is refused in one line, never prompted as the
text "None": in FunctionEnv (naming the user's function), in the rollouts' observation check,
in the sequential wrapper (which writes observations into later agents' prompts), and before
any training in a tiny run."""

from __future__ import annotations

import pytest

from teamrl.config import ConfigError, load_config
from teamrl.envs.base import ObservationError, Step, Task
from teamrl.envs.functional import FunctionEnv
from teamrl.envs.sequential import SequentialTurns
from teamrl.rollout.common import check_observations
from teamrl.trainer import Trainer
from tests.helpers.runs import tiny_overrides

AGENTS = ["alice", "bob"]


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def no_prompt(example, agent):
    if agent == "alice":
        return f"Write about {example['topic']}."
    # bob's prompt is forgotten: the function returns None


def reward(completions, example):
    return float(len(completions["alice"]) > 3)


def test_a_prompt_function_returning_none_is_refused_naming_it():
    env = FunctionEnv(agents=AGENTS, prompt=no_prompt, reward=reward)
    with pytest.raises(ObservationError) as err:
        env.reset({"topic": "bees"})
    text = one_line(err)
    assert "prompt=no_prompt (test_observation_checks.py:" in text
    assert "agent 'bob'" in text and "None of type NoneType" in text
    assert "must return each agent's prompt text as a str" in text and "`return`" in text
    assert isinstance(err.value, ConfigError)  # the command line prints it as one error line


@pytest.mark.parametrize("bad", [3, ["a", "list"], b"bytes"])
def test_any_non_str_prompt_is_refused_with_its_type(bad):
    env = FunctionEnv(agents=AGENTS, prompt=lambda example, agent: bad, reward=reward)
    with pytest.raises(ObservationError, match=f"of type {type(bad).__name__}, not a str"):
        env.reset({})
    row_env = FunctionEnv(agents=AGENTS, reward=reward)  # no prompt=: the row's field
    with pytest.raises(ObservationError, match="the example's 'prompt' field"):
        row_env.reset({"prompt": None})


def test_a_transition_returning_none_is_refused_unless_the_episode_ends():
    def transition(example, completions, history):
        return {"alice": "again", "bob": None}

    start = lambda example, agent: "start"  # noqa: E731
    env = FunctionEnv(AGENTS, reward, prompt=start, transition=transition)
    env.reset({})
    with pytest.raises(ObservationError, match=r"transition=.*transition.*agent 'bob'"):
        env.step({"alice": "a", "bob": "b"})
    ends = lambda reward, example: True  # noqa: E731
    last = FunctionEnv(AGENTS, reward, prompt=start, transition=transition, done=ends)
    last.reset({})
    assert last.step({"alice": "a", "bob": "b"}).done  # its observations are never prompted


class NoneForBob:
    """Not a FunctionEnv: any env whose reset gives bob None."""

    agents = AGENTS

    def reset(self, example):
        return {"alice": "hi", "bob": None}

    def step(self, actions):
        return Step(observations={"alice": "x", "bob": "y"}, reward=1.0)


def test_the_rollouts_refuse_a_non_str_observation_of_any_env():
    with pytest.raises(ObservationError, match=r"reset\(example 0\): the env gave agent 'bob'"):
        check_observations(NoneForBob().reset({}), AGENTS, "reset(example 0)")
    # the sequential wrapper writes earlier observations into later prompts: it checks first
    with pytest.raises(ObservationError, match="the env's reset gave agent 'bob'"):
        SequentialTurns(NoneForBob()).reset({})


def test_a_run_whose_prompt_returns_none_stops_before_training(tmp_path):
    """End to end: the trainer's preflight resets the env on the first rows, so the error comes
    before the model loads; without preflight the rollout refuses it before any update."""
    task = Task(
        "forgetful", lambda: FunctionEnv(AGENTS, reward, prompt=no_prompt), [{"topic": "t"}]
    )
    overrides = {"algorithm.num_generations": 2, "env.name": "forgetful"}
    cfg = load_config(None, tiny_overrides(steps=1, **overrides))
    with pytest.raises(ObservationError, match="agent 'bob' the observation None"):
        Trainer(cfg, task=task, run_dir=tmp_path / "a")
    trainer = Trainer(cfg, task=task, run_dir=tmp_path / "b", preflight=False)
    with pytest.raises(ObservationError, match="prompt=no_prompt"):
        trainer.train()
    assert trainer.step == 0 and not (tmp_path / "b" / "checkpoints").exists()
    with pytest.raises(ObservationError, match="the env gave agent 'alice' the observation None"):
        trainer.team.encode_prompt("alice", None)  # every prompt of every rollout passes here


def test_a_next_prompt_that_is_not_a_str_stays_one_error_line_in_a_rollout_step():
    """The env runner wraps what a step raises in a RewardError; a bad next prompt keeps its
    own type (one line on the command line) with the example and agents prefixed."""
    from teamrl.rollout.common import step_env

    def transition(example, completions, history):
        return {"alice": "again", "bob": 7}

    env = FunctionEnv(AGENTS, reward, prompt=lambda e, a: "p", transition=transition)
    env.reset({})
    with pytest.raises(ObservationError, match=r"^example 4, turn 0, agents .*agent 'bob'.* 7"):
        step_env(env, {"alice": "a", "bob": "b"}, "example 4, turn 0")
