"""Run a simultaneous-turn env sequentially (for AT-GRPO): agents act one at a time.

Each agent sees what the agents before it committed in the same turn. The wrapped env's reward
is only defined once every agent has acted, so the step of a non-final agent returns
``Step.pending = True`` and no reward; the AT-GRPO rollout then scores each of that agent's
candidates by completing the turn on a copy with one sampled action of each later agent
(a one-sample Monte-Carlo lookahead), so every candidate is rewarded on its own successor.

A teammate's answer reaches a later agent through the env's ``relay`` (``teamrl.envs.messages``:
as written, unless the message ablation replaces it); the label line ``[agent wrote]`` is the
message's unused part (the receiver knows its teammates from its role prompt).
"""

from __future__ import annotations

from collections.abc import Callable

from teamrl.envs.base import Env, NamesItsReward, Step, check_observation
from teamrl.envs.messages import PASS_THROUGH, Message, Relay, RelaysMessages


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
        self.turn = 0  # joint steps taken: the turn a message is sent in
        self._relay: Relay = PASS_THROUGH

    @property
    def relay(self) -> Relay:
        return self._relay

    @relay.setter
    def relay(self, relay: Relay) -> None:
        """This wrapper's relay, and the wrapped env's where it shows messages of its own."""
        self._relay = relay
        if isinstance(self.env, RelaysMessages):
            self.env.relay = relay

    def reset(self, example: dict) -> dict[str, str]:
        self.pending, self.turn = {}, 0
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
            obs = {
                a: f"{o}\n\nYour teammates' answers so far this turn:\n\n{self._seen_by(a)}"
                for a, o in self.observations.items()
            }
            return Step(observations=obs, reward=0.0, pending=True)
        joint, self.pending = dict(self.pending), {}
        out = self.env.step(joint)
        self.turn += 1
        self.observations = (
            dict(out.observations) if out.done else self._checked(out.observations, "step")
        )
        return out

    def _seen_by(self, receiver: str) -> str:
        """This turn's answers so far as ``receiver`` is shown them: its own as written, each
        teammate's through the relay."""
        shown = []
        for sender, text in self.pending.items():
            label = f"[{sender} wrote]\n"
            if sender == receiver:
                shown.append(label + text)
            else:
                message = Message(sender, receiver, self.turn, label + text, "turn", label)
                shown.append(self.relay.show(message))
        return "\n\n".join(shown)
