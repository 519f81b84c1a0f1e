"""Run a simultaneous-turn env sequentially (for AT-GRPO): agents act one at a time.

Each agent sees what the agents before it committed in the same turn. The wrapped env's reward
is only defined once every agent has acted, so the step of a non-final agent returns
``Step.pending = True`` and no reward; the AT-GRPO rollout then scores each of that agent's
candidates by completing the turn on a copy with one sampled action of each later agent
(a one-sample Monte-Carlo lookahead), so every candidate is rewarded on its own successor.
"""

from __future__ import annotations

from collections.abc import Callable

from teamrl.envs.base import Env, NamesItsReward, Step, check_observation


class SequentialTurns:
    def __init__(self, env: Env, order: list[str] | None = None):
        self.env = env
        self.agents = list(env.agents)
        self.turn_order = list(order or env.agents)
        if sorted(self.turn_order) != sorted(self.agents):
            raise ValueError(
                f"env.turn_order: {self.turn_order} must list each of the env's agents "
                f"{self.agents} once"
            )
        self.pending: dict[str, str] = {}
        self.observations: dict[str, str] = {}

    def reset(self, example: dict) -> dict[str, str]:
        self.pending = {}
        self.observations = self._checked(self.env.reset(example), "reset")
        return dict(self.observations)

    def reward_function(self) -> Callable:
        """The wrapped env's reward function where it names one, else its ``step``."""
        env = self.env
        return env.reward_function() if isinstance(env, NamesItsReward) else type(env).step

    def _checked(self, obs: dict, where: str) -> dict[str, str]:
        """The wrapped env's observations, each a str: this wrapper writes them into the later
        agents' prompts, where a None would become the text "None"."""
        return {a: check_observation(a, o, f"the env's {where}") for a, o in dict(obs).items()}

    def step(self, actions: dict[str, str]) -> Step:
        self.pending.update(actions)
        if len(self.pending) < len(self.agents):
            seen = "\n\n".join(f"[{a} wrote]\n{t}" for a, t in self.pending.items())
            obs = {
                a: f"{o}\n\nYour teammates' answers so far this turn:\n\n{seen}"
                for a, o in self.observations.items()
            }
            return Step(observations=obs, reward=0.0, pending=True)
        joint, self.pending = dict(self.pending), {}
        out = self.env.step(joint)
        self.observations = (
            dict(out.observations) if out.done else self._checked(out.observations, "step")
        )
        return out
