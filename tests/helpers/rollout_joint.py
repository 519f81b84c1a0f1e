"""A scripted team and reward tables for joint-action (MAGRPO) rollouts: no model involved."""

from __future__ import annotations

from types import SimpleNamespace

from teamrl.algorithms.magrpo import joint_rollout
from teamrl.envs.functional import FunctionEnv
from teamrl.generation import Generation


class ScriptedTeam:
    """Stands in for Team: agent a's g-th sample at a node is the text f"{a}{g}"."""

    def __init__(self, agents=("a", "b")):
        self.agents = {a: SimpleNamespace(temperature=1.0) for a in agents}
        self.policy_of = {a: a for a in agents}
        self.generate_calls = 0

    def encode_prompt(self, agent, observation, example):
        return [len(observation)]

    def request(self, agent, ids, n, greedy=False):
        return (agent, n)

    def generate(self, jobs, ignore_eos=False):
        self.generate_calls += 1
        return [
            [Generation([1], [ord(agent), g], [0.0, 0.0], False) for g in range(n)]
            for agent, (agent, n) in jobs
        ]

    def decode(self, agent, ids):
        return f"{chr(ids[0])}{ids[1]}"


def reward_table(values):
    """Team reward looked up from the joint action's indices (a's index, b's index)."""

    def reward(completions, example):
        return values[(int(completions["a"][1:]), int(completions["b"][1:]))]

    return reward


def two_turn_reward(completions, example):
    """Turn 0 pays (1, 2) by a's sample; the child of branch j pays 10 j + k for joint action k."""
    g = int(completions["a"][1:])
    if example.get("turn", 0) == 0:
        return [1.0, 2.0][g]
    return 10.0 * example["parent"] + g


class TwoTurnEnv(FunctionEnv):
    def step(self, actions):
        step = super().step(actions)
        if self.example.get("turn", 0) == 0:
            self.example = {**self.example, "turn": 1, "parent": int(actions["a"][1:])}
        return step


def two_turn_env():
    return TwoTurnEnv(["a", "b"], two_turn_reward)


def _joint(reward, **kw):
    env = lambda: FunctionEnv(["a", "b"], reward)  # noqa: E731
    return joint_rollout(ScriptedTeam(), env, [(3, {"prompt": "p"})], num_generations=2, **kw)
