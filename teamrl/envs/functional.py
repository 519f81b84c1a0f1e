"""Build an environment from plain functions: the few-line path for a user's own task.

    env = FunctionEnv(
        agents=["writer", "critic"],
        prompt=lambda example, agent: f"{agent}, write about {example['topic']}",
        reward=lambda completions, example: len(set(completions["writer"].split())) / 50,
    )

``from_comlrl`` adapts CoMLRL-style callables: ``reward_func(*completions, batch_items=...,
prompts=...)``, formatters ``f(item)`` or ``f(item, external_prompts=...)``, and
``external_transition(prompt, agent_completions, num_agents, prompt_history_per_agent,
response_history_per_agent)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from teamrl.envs.base import Step

RewardFn = Callable[[dict[str, str], dict], Any]


class FunctionEnv:
    """A simultaneous-turn team env made of a prompt, a reward and an optional transition.

    reward(completions, example) -> float, or (float, {component: float}).
    transition(example, completions, history) -> {agent: next observation}; without one, the
    next observation repeats the prompt with the agent's previous answer appended.
    sequential=True sets ``turn_order``: agents act one at a time (AT-GRPO) and the reward is
    called on the actions committed so far in the turn.
    """

    def __init__(
        self,
        agents: Sequence[str],
        reward: RewardFn,
        prompt: Callable[[dict, str], str] | None = None,
        transition: Callable[[dict, dict[str, str], list], dict[str, str]] | None = None,
        done: Callable[[float, dict], bool] | None = None,
        sequential: bool = False,
    ):
        self.agents = list(agents)
        if sequential:  # agents act one at a time, each seeing this turn's earlier actions
            self.turn_order = list(agents)
        self.pending: dict[str, str] = {}
        self.reward_fn, self.prompt_fn = reward, prompt or (lambda ex, agent: ex["prompt"])
        self.transition_fn, self.done_fn = transition, done
        self.example: dict = {}
        self.history: list[dict[str, str]] = []
        self.observations: dict[str, str] = {}

    def reset(self, example: dict) -> dict[str, str]:
        self.example, self.history, self.pending = dict(example), [], {}
        self.observations = {a: self.prompt_fn(self.example, a) for a in self.agents}
        return dict(self.observations)

    def step(self, actions: dict[str, str]) -> Step:
        self.pending.update(actions)
        # Sequential turns: the reward is that of the successor state, i.e. of the actions
        # committed so far this turn; the turn ends when every agent has acted.
        out = self.reward_fn(dict(self.pending), self.example)
        reward, components = out if isinstance(out, tuple) else (out, {})
        if set(self.pending) != set(self.agents):
            seen = "\n".join(f"{a} answered: {t}" for a, t in self.pending.items())
            obs = {a: f"{self.observations[a]}\n\nThis turn so far:\n{seen}" for a in self.agents}
            return Step(
                observations=obs,
                reward=float(reward),
                terminations={a: False for a in self.agents},
                truncations={a: False for a in self.agents},
                infos={"reward_components": dict(components)},
            )
        actions, self.pending = dict(self.pending), {}
        self.history.append(dict(actions))
        if self.transition_fn is not None:
            nxt = self.transition_fn(self.example, dict(actions), list(self.history))
        else:
            nxt = {
                a: f"{self.observations[a]}\n\nYour previous answer:\n{actions[a]}\n\nImprove it."
                for a in self.agents
            }
        self.observations = nxt
        finished = bool(self.done_fn(float(reward), self.example)) if self.done_fn else False
        return Step(
            observations=dict(nxt),
            reward=float(reward),
            terminations={a: finished for a in self.agents},
            truncations={a: False for a in self.agents},
            infos={"reward_components": dict(components)},
        )


def _accepts(fn: Callable, name: str) -> bool:
    params = inspect.signature(fn).parameters
    return name in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def from_comlrl(
    reward_func: Callable,
    agents: Sequence[str] = ("agent_0", "agent_1"),
    formatters: Callable | Sequence[Callable] | None = None,
    external_transition: Callable | None = None,
) -> FunctionEnv:
    """An env from CoMLRL-style reward, formatters and external transition."""
    n = len(agents)
    fmts = list(formatters) if isinstance(formatters, (list, tuple)) else [formatters] * n
    if len(fmts) != n:
        raise ValueError(f"formatters: expected {n} (one per agent), got {len(fmts)}")

    def fmt(i: int, item: dict, external: str | None = None) -> str:
        f = fmts[i]
        if f is None:
            return external if external is not None else item["prompt"]
        if external is not None and _accepts(f, "external_prompts"):
            return f(item, external_prompts=external)
        return f(item)

    def reward(completions: dict[str, str], example: dict) -> float:
        lists = [[completions[a]] for a in agents]
        kwargs = {}
        if _accepts(reward_func, "batch_items"):
            kwargs["batch_items"] = [example]
        if _accepts(reward_func, "prompts"):
            kwargs["prompts"] = [example.get("prompt", "")]
        out = reward_func(*lists, **kwargs)
        if hasattr(out, "tolist"):
            out = out.tolist()
        return float(out[0] if isinstance(out, (list, tuple)) else out)

    transition = None
    if external_transition is not None:
        prompt_hist: list[list[str]] = []

        def transition(example, completions, history):
            responses = [[h[a] for h in history] for a in agents]
            prompts = [[fmt(i, example)] for i in range(n)] if not prompt_hist else prompt_hist
            nxt = external_transition(
                prompt=example.get("prompt", ""),
                agent_completions=[completions[a] for a in agents],
                num_agents=n,
                prompt_history_per_agent=prompts,
                response_history_per_agent=responses,
            )
            return {a: fmt(i, example, nxt[i]) for i, a in enumerate(agents)}

    return FunctionEnv(
        agents=agents,
        reward=reward,
        prompt=lambda ex, agent: fmt(list(agents).index(agent), ex),
        transition=transition,
    )
