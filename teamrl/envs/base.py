"""The environment protocol, and the table ``@register_task`` fills.

An environment is a multi-agent *text* environment in the style of PettingZoo Parallel:
dicts keyed by agent name, with terminations and truncations kept separate.

    obs = env.reset(example)                 # {agent: prompt text}
    step = env.step({agent: completion, ...})  # one joint action (simultaneous turns)

For sequential turns (AT-GRPO) the env sets ``turn_order`` and the rollout calls ``step``
once per agent, with a dict holding only that agent's action; the returned observations
already show the actions that earlier agents committed in the same turn.

Tree rollouts need to branch the state: ``clone(env)`` returns an independent copy
(``env.clone()`` if the env defines it, else ``copy.deepcopy``).

``register_task`` only records a builder under a name; finding a task by name (the builtin
families imported first) and building it from a config is ``teamrl.tasks.registry``'s job, one
floor up, so that the protocol imports no task.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from teamrl.errors import ConfigError, UserCodeError


@dataclass
class Step:
    """What an environment returns after an action.

    ``reward`` is the team reward, shared by every agent (MAGRPO's joint reward).
    ``local_rewards`` are optional per-agent terms (AT-GRPO uses ``alpha * team + local``).
    ``success`` says whether the task is solved (``None``: the task has no such notion; pass@k
    and accuracy need it). ``pending`` marks a step whose turn is not finished (a sequential
    agent acted before the others): its reward is defined only when the turn completes.
    ``reward_components``, floats, are logged as ``reward/<name>``. ``lookahead`` is set by the
    AT-GRPO rollout on a step scored on a copy of the state. ``infos`` holds free-form extras.
    """

    observations: dict[str, str]
    reward: float
    terminations: dict[str, bool] = field(default_factory=dict)
    truncations: dict[str, bool] = field(default_factory=dict)
    local_rewards: dict[str, float] = field(default_factory=dict)
    infos: dict[str, Any] = field(default_factory=dict)
    success: bool | None = None  # whether the task is solved (None: the task has no such notion)
    pending: bool = False  # the turn is not finished: its reward comes when the turn completes
    reward_components: dict[str, float] = field(default_factory=dict)  # logged as reward/<name>
    lookahead: bool = False  # set by the rollout: the reward is an estimate from a copy

    @property
    def done(self) -> bool:
        return any(self.terminations.values()) or any(self.truncations.values())


@runtime_checkable
class Env(Protocol):
    agents: list[str]

    def reset(self, example: dict) -> dict[str, str]: ...

    def step(self, actions: dict[str, str]) -> Step: ...


@runtime_checkable
class NamesItsReward(Protocol):
    """An env that can say which function makes its rewards (a ``FunctionEnv``'s reward=), so
    a reward that is NaN or not a number names that function; any other env's ``step`` is
    named instead."""

    def reward_function(self) -> Callable: ...


class ObservationError(ConfigError):
    """An env gave an agent an observation (its prompt) that is not a str."""


def check_observation(agent: str, value: Any, source: str, fix: str = "") -> str:
    """``value`` if it is a str, else an ObservationError in one line: ``source`` (who made
    it), the agent, the value and its type, and ``fix``. Nothing may turn a prompt function's
    ``None`` into the prompt text ``"None"``."""
    if isinstance(value, str):
        return value
    try:
        shown = repr(value)
    except Exception:  # a value whose __repr__ fails is named by its type alone
        shown = "<unprintable>"
    shown = shown if len(shown) <= 80 else shown[:80] + "..."
    fix = fix or "an env's reset and step must give every agent its prompt as a str"
    raise ObservationError(
        f"{source} gave agent {agent!r} the observation {shown} of type "
        f"{type(value).__name__}, not a str: {fix}"
    )


def clone(env: Env) -> Env:
    """An independent copy of ``env`` for branching a rollout tree. An env ``copy.deepcopy``
    cannot copy (it holds a lock, a socket, an open file) is one line saying so."""
    fn = getattr(env, "clone", None)
    if callable(fn):
        return fn()
    try:
        return copy.deepcopy(env)
    except Exception as err:
        name = type(env).__name__
        raise UserCodeError(
            f"{name} cannot be copied to branch a rollout: copy.deepcopy raised "
            f"{type(err).__name__}: {err}; give {name} a clone() method that returns an "
            "independent copy"
        ) from err


@dataclass
class Task:
    """Everything a run needs from a task: an env factory and its data splits.

    ``train`` feeds training; ``eval`` is a held-out split used for training-time eval
    (never the benchmark's test split); ``test`` is for ``teamrl eval`` reports.
    ``agents`` are default role prompts ({name: system prompt}) a config may override.
    """

    name: str
    make_env: Callable[[], Env]
    train: Sequence[dict]
    eval: Sequence[dict] = ()
    test: Sequence[dict] = ()
    agents: dict[str, str] = field(default_factory=dict)
    description: str = ""


_REGISTRY: dict[str, tuple[Callable[..., Task], str]] = {}


def register_task(name: str, description: str) -> Callable:
    """Decorator: ``@register_task("tldr", "…")`` on a builder ``(**kwargs) -> Task``."""

    def wrap(builder: Callable[..., Task]) -> Callable[..., Task]:
        if name in _REGISTRY:
            raise ValueError(f"task {name!r} is already registered")
        _REGISTRY[name] = (builder, description)
        return builder

    return wrap


def registered_builders() -> dict[str, tuple[Callable[..., Task], str]]:
    """{name: (builder, description)} of the tasks registered so far (a copy). The builtin
    families register when ``teamrl.tasks.registry`` imports them."""
    return dict(_REGISTRY)
