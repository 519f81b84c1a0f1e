"""A scripted team and a counter env for agent-turn (AT-GRPO) rollouts: no model involved."""

from __future__ import annotations

from types import SimpleNamespace

from teamrl.algorithms.at_grpo import agent_turn_rollout
from teamrl.envs.base import Step
from teamrl.envs.functional import FunctionEnv
from teamrl.generation import Generation


class ScriptedTeam:
    """Candidate k of any agent is the text "<k>"; records every observation it was shown."""

    def __init__(self, agents=("tool", "plan")):
        self.agents = {a: SimpleNamespace(temperature=1.0) for a in agents}
        self.policy_of = {a: a for a in agents}
        self.seen: list[tuple[str, str]] = []
        self.calls = 0

    def encode_prompt(self, agent, observation, example):
        self.seen.append((agent, observation))
        return [1]

    def request(self, agent, ids, n, greedy=False):
        return n

    def generate(self, jobs, ignore_eos=False):
        self.calls += 1
        return [[Generation([1], [k], [0.0], False) for k in range(n)] for _, n in jobs]

    def decode(self, agent, ids):
        return str(ids[0])


class CounterEnv:
    """Shared total; each action adds its digit. Team reward = new total; local = own digit.

    Ends when the total reaches ``goal``. Observations show the running log of actions, so
    later agents see what earlier agents committed this turn.
    """

    def __init__(self, goal=100, agents=("tool", "plan")):
        self.agents = list(agents)
        self.turn_order = list(agents)
        self.goal = goal

    def reset(self, example):
        self.total, self.log = example.get("start", 0), []
        return {a: "start" for a in self.agents}

    def step(self, actions):
        ((agent, text),) = actions.items()
        self.total += int(text)
        self.log.append(f"{agent}:{text}")
        done = self.total >= self.goal
        obs = {a: " ".join(self.log) for a in self.agents}
        return Step(
            observations=obs,
            reward=float(self.total),
            local_rewards={agent: float(text)},
            terminations={a: done for a in self.agents},
            success=done,
            reward_components={"total": float(self.total)},
        )


def run(team=None, env=CounterEnv, examples=((0, {}),), rollout=agent_turn_rollout, **kw):
    args = dict(num_generations=3, max_turns=2, seed=0)
    args.update(kw)
    return rollout(team or ScriptedTeam(), env, list(examples), **args)


def _turns(reward, **kw):
    env = lambda: FunctionEnv(["a", "b"], reward, sequential=True)  # noqa: E731
    return agent_turn_rollout(
        ScriptedTeam(("a", "b")), env, [(3, {"prompt": "p"})], num_generations=2, **kw
    )
