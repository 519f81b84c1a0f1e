"""An app as a task: the user's ``episode`` function and the data it runs on.

    def episode(client, example):            # sync or async
        a = client.chat.completions.create(model="concise", messages=[...])
        b = client.chat.completions.create(model="detailed", messages=[...])
        return reward(a.choices[0].message.content, b.choices[0].message.content)

    task = app_task("tldr_app", episode, agents=["concise", "detailed"], train=rows)

``client`` is an ``openai.OpenAI`` (an ``openai.AsyncOpenAI`` for an ``async def``) whose
``base_url`` names the episode; an episode that declares ``base_url`` and ``api_key``
parameters is called ``episode(example, base_url=..., api_key=...)`` instead, for frameworks
that build their own client. It returns the team reward, or ``(team reward, {agent: local
reward})``.

The task is a plain ``Task`` whose env is an ``AppEnv``: the trainer, the preflight and the
commands read its ``agents`` as any env's; only ``algorithm.name=app`` runs it
(``teamrl.algorithms.app``). Nothing here imports a model, a server or an HTTP client.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from teamrl.envs.base import Step, Task
from teamrl.errors import ConfigError

NOT_AN_ENV = (
    "an app task runs its episodes through the endpoint: train it with algorithm.name=app "
    "(docs/apps.md), not as an env stepped by {what}"
)


@dataclass
class AppEnv:
    """The env face of an app task: its agents and its episode function. ``reset`` answers
    every agent an empty observation (the app writes its own prompts), so checks that read a
    task's first observations pass; ``step`` is refused (no rollout but the app's steps it)."""

    agents: list[str]
    episode: Callable[..., Any]
    _example: dict = field(default_factory=dict, repr=False)

    def reset(self, example: dict) -> dict[str, str]:
        self._example = example
        return {a: "" for a in self.agents}

    def step(self, actions: dict[str, str]) -> Step:
        raise ConfigError(NOT_AN_ENV.format(what="env.step"))

    @property
    def wants_url(self) -> bool:
        """Whether the episode takes ``(example, base_url=..., api_key=...)`` instead of
        ``(client, example)``."""
        return takes_url(self.episode)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.episode)


def takes_url(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable: the client form
        return False
    return "base_url" in params and "api_key" in params


def check_episode_fn(episode: Any, name: str) -> None:
    """A callable of ``(client, example)`` or ``(example, base_url=, api_key=)``, else one
    ConfigError naming the task."""
    if not callable(episode):
        raise ConfigError(
            f"app_task {name!r}: episode must be a function episode(client, example), got "
            f"{type(episode).__name__}"
        )
    try:
        sig = inspect.signature(episode)
    except (TypeError, ValueError):
        return
    args = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        and p.default is p.empty
        and p.name not in ("base_url", "api_key")  # passed by name
    ]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
    want = 1 if takes_url(episode) else 2
    if not varargs and len(args) != want:
        form = "episode(example, base_url, api_key)" if want == 1 else "episode(client, example)"
        raise ConfigError(
            f"app_task {name!r}: {getattr(episode, '__name__', 'episode')}{sig} must take "
            f"{want} positional argument(s): {form}"
        )


def app_task(
    name: str,
    episode: Callable[..., Any],
    agents: Sequence[str],
    train: Sequence[dict],
    eval: Sequence[dict] = (),  # noqa: A002 - the split's name, as Task's field
    test: Sequence[dict] = (),
    roles: Mapping[str, str] | None = None,
    description: str = "",
) -> Task:
    """A ``Task`` whose episodes are runs of the user's app (``episode``) against the team's
    endpoint, one model name per agent. ``roles``: default system prompts (unused by the
    endpoint, which takes the app's messages as they are; kept for ``team.agents[].system``
    defaults and exports)."""
    agents = list(agents)
    if not agents or len(set(agents)) != len(agents) or not all(isinstance(a, str) for a in agents):
        raise ConfigError(f"app_task {name!r}: agents must be distinct names, got {agents!r}")
    check_episode_fn(episode, name)

    def make_env() -> AppEnv:
        return AppEnv(list(agents), episode)

    return Task(
        name=name,
        make_env=make_env,
        train=train,
        eval=eval,
        test=test,
        agents=dict(roles or {}),
        description=description or f"app {getattr(episode, '__name__', 'episode')}",
    )


def check_app(cfg: Any, task: Any, env: Any) -> bool:
    """An app task (``teamrl.apps.app_task``) runs with algorithm.name=app, and that algorithm
    runs only app tasks, with its packages installed. Returns whether the task is an app."""
    from teamrl.apps.endpoint import require_apps

    is_app, name = isinstance(env, AppEnv), cfg.algorithm.name
    if is_app and name != "app":
        raise ConfigError(
            f"algorithm.name={name}: task {task.name!r} is an app (its episodes call the team's "
            "endpoint), which only algorithm.name=app runs (docs/apps.md)"
        )
    if name == "app" and not is_app:
        raise ConfigError(
            f"algorithm.name=app runs an app task (teamrl.apps.app_task), but task "
            f"{task.name!r} is an env ({type(env).__name__}): use magrpo, at_grpo or grpo"
        )
    if is_app:
        require_apps()
    return is_app
