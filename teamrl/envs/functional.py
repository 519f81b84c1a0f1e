"""Build an environment from plain functions: the few-line path for a user's own task.

    env = FunctionEnv(
        agents=["writer", "critic"],
        prompt=lambda example, agent: f"{agent}, write about {example['topic']}",
        reward=lambda completions, example: len(set(completions["writer"].split())) / 50,
    )

``from_comlrl`` adapts CoMLRL-style callables: ``reward_func(*completions, batch_items=...,
prompts=...)``, formatters ``f(item)`` or ``f(item, external_prompts=...)``, and
``external_transition(prompt, agent_completions, num_agents, prompt_history_per_agent,
response_history_per_agent)``, whose returned prompts are the next turn's observations.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from teamrl.envs.base import Step, check_observation
from teamrl.errors import named as _named

RewardFn = Callable[[dict[str, str], dict], Any]


class FunctionEnv:
    """A simultaneous-turn team env made of a prompt, a reward and an optional transition.

    prompt(example, agent) -> str (default: the example's "prompt" field); a prompt that is
    not a str, e.g. the None of a function that forgot its return, is an ObservationError
    naming the function, never the prompt text "None" (a transition's prompts likewise).
    reward(completions, example) -> float, or (float, {component: float}).
    transition(example, completions, history) -> {agent: next observation}, where history is
    the joint actions of every turn so far (this one last); without one, the next observation
    repeats the prompt with the agent's previous answer appended.
    A reward or transition that declares a ``prompts`` keyword also gets the observations every
    turn started from, [{agent: text}, ...], this turn's last.
    sequential=True sets ``turn_order``: agents act one at a time (AT-GRPO) and the reward is
    called on the actions committed so far in the turn.
    success(reward, example) -> bool says whether a finished turn solved the task; it fills
    ``Step.success``, which evaluation turns into greedy accuracy and pass@k (without one the
    task reports rewards only).

    ``reward_funcs`` (instead of ``reward``), TRL's way: a list of reward(completions, example)
    -> float, combined into the one team reward sum_i reward_weights[i] * f_i (weights default
    to 1); each function's raw value is logged as the component reward/<its __name__>.
    """

    def __init__(
        self,
        agents: Sequence[str],
        reward: RewardFn | None = None,
        prompt: Callable[[dict, str], str] | None = None,
        transition: Callable[[dict, dict[str, str], list], dict[str, str]] | None = None,
        done: Callable[[float, dict], bool] | None = None,
        sequential: bool = False,
        reward_funcs: Sequence[RewardFn] | None = None,
        reward_weights: Sequence[float] | None = None,
        success: Callable[[float, dict], bool] | None = None,
    ):
        if (reward is None) == (reward_funcs is None):
            raise ValueError("FunctionEnv: give exactly one of reward= or reward_funcs=")
        if reward_funcs is not None:
            reward = weighted_reward(list(reward_funcs), reward_weights)
        self.agents = list(agents)
        if sequential:  # agents act one at a time, each seeing this turn's earlier actions
            self.turn_order = list(agents)
        self.pending: dict[str, str] = {}
        self.reward_fn, self.prompt_fn = reward, prompt or (lambda ex, agent: ex["prompt"])
        self.prompt_given = prompt is not None
        self.transition_fn, self.done_fn, self.success_fn = transition, done, success
        # the callables that declare a `prompts` keyword (looked up once, not every step)
        self.wants_prompts = {
            "reward": _declares(reward, "prompts"),
            "transition": transition is not None and _declares(transition, "prompts"),
        }
        self.example: dict = {}
        self.history: list[dict[str, str]] = []  # joint actions, one dict per turn
        self.prompts: list[dict[str, str]] = []  # observations each turn started from
        self.observations: dict[str, str] = {}

    def reset(self, example: dict) -> dict[str, str]:
        self.example, self.history, self.pending = dict(example), [], {}
        self.observations = {
            a: self._checked(self.prompt_fn(self.example, a), a, "prompt") for a in self.agents
        }
        self.prompts = [dict(self.observations)]
        return dict(self.observations)

    def _checked(self, text: Any, agent: str, which: str) -> str:
        """``text`` if it is a str, else one line naming the function that made it."""
        if which == "prompt" and not self.prompt_given:  # the default: the row's own field
            source, fix = "FunctionEnv: the example's 'prompt' field", "give it text, or a prompt="
        else:
            fn = self.prompt_fn if which == "prompt" else self.transition_fn
            source = f"FunctionEnv: {which}={_named(fn)}"
            fix = f"the task's {which} function must return each agent's prompt text as a str"
            if text is None:
                fix += " (a function that ends without `return` returns None)"
        return check_observation(agent, text, source, fix)

    def reward_function(self) -> Callable:
        """The function that makes this env's rewards (``NamesItsReward``)."""
        return self.reward_fn

    def _call(self, which: str, *args: Any) -> Any:
        """The reward or transition fn(*args), plus ``prompts=`` if it declares that keyword."""
        fn = self.reward_fn if which == "reward" else self.transition_fn
        kwargs = {"prompts": [dict(p) for p in self.prompts]} if self.wants_prompts[which] else {}
        try:
            return fn(*args, **kwargs)
        except TypeError as err:
            _check_signature(fn, which, args, kwargs, err)
            raise  # a TypeError inside the function: its own traceback says where

    def step(self, actions: dict[str, str]) -> Step:
        self.pending.update(actions)
        # Sequential turns: the reward is that of the successor state, i.e. of the actions
        # committed so far this turn; the turn ends when every agent has acted.
        out = self._call("reward", dict(self.pending), self.example)
        reward, components = out if isinstance(out, tuple) else (out, {})
        if set(self.pending) != set(self.agents):
            seen = "\n".join(f"{a} answered: {t}" for a, t in self.pending.items())
            obs = {a: f"{self.observations[a]}\n\nThis turn so far:\n{seen}" for a in self.agents}
            return Step(
                observations=obs,
                reward=reward,  # checked where it enters the rollout (float() would take "1.0")
                terminations={a: False for a in self.agents},
                truncations={a: False for a in self.agents},
                reward_components=dict(components),
            )
        actions, self.pending = dict(self.pending), {}
        self.history.append(dict(actions))
        if self.transition_fn is not None:
            nxt = self._call("transition", self.example, dict(actions), list(self.history))
        else:
            nxt = {
                a: f"{self.observations[a]}\n\nYour previous answer:\n{actions[a]}\n\nImprove it."
                for a in self.agents
            }
        self.observations = nxt
        self.prompts.append(dict(nxt))
        finished = bool(self.done_fn(reward, self.example)) if self.done_fn else False
        if self.transition_fn is not None and not finished and isinstance(nxt, dict):
            for a, text in nxt.items():  # the next prompts, named after the user's function
                self._checked(text, a, "transition")
        solved = bool(self.success_fn(reward, self.example)) if self.success_fn else None
        return Step(
            observations=dict(nxt),
            reward=reward,  # checked where it enters the rollout (float() would take "1.0")
            terminations={a: finished for a in self.agents},
            truncations={a: False for a in self.agents},
            reward_components=dict(components),
            success=solved,
        )


def weighted_reward(funcs: list[RewardFn], weights: Sequence[float] | None) -> RewardFn:
    """One reward(completions, example) -> (sum_i w_i f_i, {name_i: f_i}) from TRL-style
    ``reward_funcs``/``reward_weights`` (names: each function's __name__, made unique)."""
    w = [1.0] * len(funcs) if weights is None else [float(x) for x in weights]
    if not funcs or len(w) != len(funcs):
        raise ValueError(
            f"reward_weights: expected {len(funcs)} weights (one per reward_funcs entry), got {w}"
        )
    names: list[str] = []
    for i, f in enumerate(funcs):
        name = getattr(f, "__name__", f"reward_{i}")
        names.append(name if name not in names and name != "<lambda>" else f"reward_{i}")

    def reward(completions: dict[str, str], example: dict) -> tuple[float, dict[str, float]]:
        values = {n: float(f(completions, example)) for n, f in zip(names, funcs)}
        return sum(wi * v for wi, v in zip(w, values.values())), values

    return reward


def _check_signature(fn: Callable, which: str, args: tuple, kwargs: dict, err: TypeError) -> None:
    """A call that failed because ``fn`` cannot take the arguments FunctionEnv passes: say
    which function, where it is, and the expected signature (the TypeError alone names
    neither)."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        call = "completions, example" if which == "reward" else "example, actions, history"
        extra = ", prompts=..." if kwargs else ""
        raise TypeError(
            f"{which}={_named(fn)} cannot be called as {which}({call}{extra}): {err}"
        ) from None
    except ValueError:  # no signature to read (a builtin): keep the original error
        return


def _declares(fn: Callable, name: str) -> bool:
    return name in inspect.signature(fn).parameters


def _accepts(fn: Callable, name: str) -> bool:
    """Whether fn declares keyword ``name`` or takes ``**kwargs`` (CoMLRL's reward rule)."""
    params = inspect.signature(fn).parameters.values()
    return _declares(fn, name) or any(p.kind == p.VAR_KEYWORD for p in params)


def from_comlrl(
    reward_func: Callable,
    agents: Sequence[str] = ("agent_0", "agent_1"),
    formatters: Callable | Sequence[Callable] | None = None,
    external_transition: Callable | None = None,
    external_prompt_passthrough: bool = False,
) -> FunctionEnv:
    """An env from CoMLRL-style reward, formatters and external transition (CoMLRL 1.4.3).

    Turn 1: agent i sees ``formatters[i](item)`` (no formatter: ``item["prompt"]``).
    After each turn, ``external_transition`` gets the dataset prompt, the joint action and the
    per-agent prompt and response histories (this turn's included) and returns one prompt per
    agent. Agent i's next observation is that prompt put through its formatter as CoMLRL does:
    it replaces ``item["prompt"]`` and is also passed as ``external_prompts=`` when the
    formatter declares that argument; with no formatter, or external_prompt_passthrough=True,
    it is used as is. The prompt history holds the prompts the agents were shown (CoMLRL keeps
    the transition's raw prompt from turn 2 on; the two agree without a formatter).
    ``reward_func(*[[completion] per agent], batch_items=[item], prompts=[prompt])`` gets the
    keywords it declares (or all, with ``**kwargs``); prompt is agent 0's prompt this turn.
    Only its first value is used.
    """
    n = len(agents)
    fmts = list(formatters) if isinstance(formatters, (list, tuple)) else [formatters] * n
    if len(fmts) != n:
        raise ValueError(f"formatters: expected {n} (one per agent), got {len(fmts)}")
    # CoMLRL passes external_prompts= only to formatters that name it (not to **kwargs).
    takes_external = [f is not None and _declares(f, "external_prompts") for f in fmts]
    reward_kwargs = [k for k in ("batch_items", "prompts") if _accepts(reward_func, k)]

    def fmt(i: int, item: dict, external: str | None = None) -> str:
        """Agent i's observation: the formatted item, or the transition's prompt formatted."""
        f = fmts[i]
        if external is None:
            return f(item) if f is not None else item["prompt"]
        if f is None or external_prompt_passthrough:
            return external
        item = {**item, "prompt": external}
        return f(item, external_prompts=external) if takes_external[i] else f(item)

    def reward(completions: dict[str, str], example: dict, prompts: list) -> float:
        given = {"batch_items": [example], "prompts": [prompts[-1][agents[0]]]}
        out = reward_func(
            *[[completions[a]] for a in agents], **{k: given[k] for k in reward_kwargs}
        )
        if hasattr(out, "tolist"):
            out = out.tolist()
        return float(out[0] if isinstance(out, (list, tuple)) else out)

    transition = None
    if external_transition is not None:

        def transition(example: dict, completions: dict, history: list, prompts: list):
            nxt = external_transition(
                prompt=example.get("prompt", ""),
                agent_completions=[completions[a] for a in agents],
                num_agents=n,
                prompt_history_per_agent=[[p[a] for p in prompts] for a in agents],
                response_history_per_agent=[[h[a] for h in history] for a in agents],
            )
            if not isinstance(nxt, (list, tuple)) or len(nxt) != n:
                raise ValueError(
                    f"external_transition must return a list of {n} prompts (one per agent), "
                    f"got {nxt!r}"
                )
            return {a: fmt(i, example, nxt[i]) for i, a in enumerate(agents)}

    return FunctionEnv(
        agents=agents,
        reward=reward,
        prompt=lambda ex, agent: fmt(list(agents).index(agent), ex),
        transition=transition,
    )
