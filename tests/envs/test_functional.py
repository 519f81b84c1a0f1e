"""FunctionEnv and the CoMLRL adapter ``from_comlrl``; joint trees of a repeated example.

No model is involved: a scripted team stands in for Team, as in test_magrpo_tree.py.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from teamrl.algorithms.magrpo import joint_rollout
from teamrl.envs.base import clone
from teamrl.envs.functional import FunctionEnv, from_comlrl
from teamrl.generation import Generation

ITEM = {"prompt": "P", "test": "assert f() == 1"}


class ScriptedTeam:
    """Agent a's g-th sample at a node is the text f"{a}{g}"; prompts are recorded."""

    def __init__(self, agents=("a", "b")):
        self.agents = {a: SimpleNamespace(temperature=1.0) for a in agents}
        self.policy_of = {a: a for a in agents}
        self.seen: list[tuple[str, str]] = []  # (agent, observation) per encoded prompt

    def encode_prompt(self, agent, observation, example):
        self.seen.append((agent, observation))
        return [len(observation)]

    def request(self, agent, ids, n, greedy=False):
        return (agent, n)

    def generate(self, jobs, ignore_eos=False):
        return [
            [Generation([1], [ord(agent), g], [0.0, 0.0], False) for g in range(n)]
            for agent, (agent, n) in jobs
        ]

    def decode(self, agent, ids):
        return f"{chr(ids[0])}{ids[1]}"


def recording_transition(calls: list, prompts=("next-0", "next-1")):
    """A CoMLRL external transition that records its arguments and returns fixed prompts."""

    def external_transition(
        prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent
    ):
        calls.append(
            {
                "prompt": prompt,
                "completions": list(agent_completions),
                "num_agents": num_agents,
                "prompts": [list(h) for h in prompt_history_per_agent],
                "responses": [list(h) for h in response_history_per_agent],
            }
        )
        turn = len(prompt_history_per_agent[0])
        return [f"{p}@{turn}" for p in prompts]

    return external_transition


# --- from_comlrl: the reward ------------------------------------------------------------------


def test_reward_gets_one_list_per_agent_and_the_keywords_it_declares():
    calls = []

    def reward_func(*completions, batch_items=None, prompts=None):
        calls.append((completions, batch_items, prompts))
        return [0.5, 99.0]  # only the first value counts

    env = from_comlrl(
        reward_func, agents=["a", "b"], formatters=lambda item: f"Q: {item['prompt']}"
    )
    env.reset(ITEM)
    step = env.step({"a": "x", "b": "y"})
    assert step.reward == 0.5
    assert calls == [((["x"], ["y"]), [ITEM], ["Q: P"])]


def test_reward_keywords_follow_its_signature():
    plain, kw = [], []

    def positional_only(c0, c1):
        plain.append((c0, c1))
        return 1.0

    def with_kwargs(*completions, **kwargs):
        kw.append(kwargs)
        return 2.0

    env = from_comlrl(positional_only, agents=["a", "b"])
    env.reset(ITEM)
    assert env.step({"a": "x", "b": "y"}).reward == 1.0
    assert plain == [(["x"], ["y"])]

    env = from_comlrl(with_kwargs, agents=["a", "b"])
    env.reset(ITEM)
    assert env.step({"a": "x", "b": "y"}).reward == 2.0
    assert kw == [{"batch_items": [ITEM], "prompts": ["P"]}]


# --- from_comlrl: formatters and the external transition ---------------------------------------


def plain_formatter(item):
    return f"plain: {item['prompt']}"


def external_formatter(item, external_prompts=None):
    return f"ext: {external_prompts} / {item['prompt']}"


def test_turn_two_observations_come_from_the_transition_through_the_formatters():
    calls = []
    env = from_comlrl(
        lambda *c: 0.0,
        agents=["a", "b"],
        formatters=[plain_formatter, external_formatter],
        external_transition=recording_transition(calls),
    )
    assert env.reset(ITEM) == {"a": "plain: P", "b": "ext: None / P"}
    step = env.step({"a": "a-1", "b": "b-1"})
    # The transition's prompt replaces item["prompt"]; a formatter that declares
    # external_prompts also receives it.
    assert step.observations == {"a": "plain: next-0@1", "b": "ext: next-1@1 / next-1@1"}
    assert calls[0]["prompt"] == "P"  # the dataset prompt, as CoMLRL passes it
    assert calls[0]["completions"] == ["a-1", "b-1"] and calls[0]["num_agents"] == 2


def test_without_a_formatter_or_with_passthrough_the_transition_prompt_is_used_as_is():
    for formatters, passthrough in ((None, False), (plain_formatter, True)):
        env = from_comlrl(
            lambda *c: 0.0,
            agents=["a", "b"],
            formatters=formatters,
            external_transition=recording_transition([]),
            external_prompt_passthrough=passthrough,
        )
        env.reset(ITEM)
        obs = env.step({"a": "a-1", "b": "b-1"}).observations
        assert obs == {"a": "next-0@1", "b": "next-1@1"}


def test_prompt_and_response_histories_grow_by_one_per_turn():
    calls, rewards = [], []

    def reward_func(*completions, prompts=None):
        rewards.append(prompts)
        return 0.0

    env = from_comlrl(
        reward_func,
        agents=["a", "b"],
        formatters=plain_formatter,
        external_transition=recording_transition(calls),
    )
    env.reset(ITEM)
    env.step({"a": "a-1", "b": "b-1"})
    env.step({"a": "a-2", "b": "b-2"})
    env.step({"a": "a-3", "b": "b-3"})
    assert [c["prompts"] for c in calls] == [
        [["plain: P"], ["plain: P"]],
        [["plain: P", "plain: next-0@1"], ["plain: P", "plain: next-1@1"]],
        [
            ["plain: P", "plain: next-0@1", "plain: next-0@2"],
            ["plain: P", "plain: next-1@1", "plain: next-1@2"],
        ],
    ]
    assert [c["responses"] for c in calls] == [
        [["a-1"], ["b-1"]],
        [["a-1", "a-2"], ["b-1", "b-2"]],
        [["a-1", "a-2", "a-3"], ["b-1", "b-2", "b-3"]],
    ]
    # the reward's prompt is agent 0's prompt of the turn being scored
    assert rewards == [["plain: P"], ["plain: next-0@1"], ["plain: next-0@2"]]


def test_clones_keep_their_own_history():
    calls = []
    env = from_comlrl(
        lambda *c: 0.0, agents=["a"], external_transition=recording_transition(calls, ["n"])
    )
    env.reset(ITEM)
    env.step({"a": "first"})
    left, right = clone(env), clone(env)
    left.step({"a": "left"})
    right.step({"a": "right"})
    assert [c["responses"] for c in calls[1:]] == [[["first", "left"]], [["first", "right"]]]
    assert [len(c["prompts"][0]) for c in calls[1:]] == [2, 2]


def test_transition_must_return_one_prompt_per_agent():
    env = from_comlrl(lambda *c: 0.0, agents=["a", "b"], external_transition=lambda **kw: ["one"])
    env.reset(ITEM)
    with pytest.raises(ValueError, match="list of 2 prompts"):
        env.step({"a": "x", "b": "y"})


def test_two_turn_joint_tree_prompts_turn_two_with_the_transition():
    calls = []
    team = ScriptedTeam()

    def make_env():
        return from_comlrl(
            lambda *c: 0.0,
            agents=["a", "b"],
            formatters=[plain_formatter, external_formatter],
            external_transition=recording_transition(calls),
        )

    joint_rollout(team, make_env, [(0, ITEM)], num_generations=2, max_turns=2)
    # Turn 1: one node; turn 2: one child per joint action (G = 2), each prompted by the
    # transition applied to its own joint action.
    assert team.seen[:2] == [("a", "plain: P"), ("b", "ext: None / P")]
    assert team.seen[2:] == [("a", "plain: next-0@1"), ("b", "ext: next-1@1 / next-1@1")] * 2
    first = [c["responses"] for c in calls if len(c["responses"][0]) == 1]
    assert sorted(first) == [[["a0"], ["b0"]], [["a1"], ["b1"]]]
    # every turn-2 step sees its own branch's history: its parent's action, then its own
    second = [c["responses"] for c in calls if len(c["responses"][0]) == 2]
    assert sorted(second) == [[["a0", f"a{j}"], ["b0", f"b{j}"]] for j in range(2)] + [
        [["a1", f"a{j}"], ["b1", f"b{j}"]] for j in range(2)
    ]


# --- FunctionEnv ------------------------------------------------------------------------------


def test_function_env_passes_prompts_to_callables_that_declare_them():
    seen = []

    def reward(completions, example, prompts):
        seen.append(prompts)
        return 1.0

    env = FunctionEnv(
        ["a"], reward, prompt=lambda ex, a: "start", transition=lambda ex, c, h: {"a": "again"}
    )
    env.reset({})
    env.step({"a": "x"})
    env.step({"a": "y"})
    assert seen == [[{"a": "start"}], [{"a": "start"}, {"a": "again"}]]


# --- joint tree: one example twice in a step ---------------------------------------------------


def test_repeated_example_in_one_step_keeps_its_trees_groups_apart():
    team = ScriptedTeam()
    env = lambda: FunctionEnv(["a", "b"], lambda c, ex: float(c["a"][1:]))  # noqa: E731
    g = 3
    # The same dataset example (index 7) twice, as when an epoch wraps mid-step.
    out = joint_rollout(team, env, [(7, ITEM), (7, ITEM)], num_generations=g, max_turns=2)
    sizes = Counter(s.group for s in out.samples)
    # per tree: 1 root + G children, times 2 agents; two trees
    assert len(sizes) == 2 * (1 + g) * 2
    assert set(sizes.values()) == {g}
    assert {grp[:2] for grp in sizes} == {(7, 0), (7, 1)}
