"""Tasks by name: the builtin families, the tasks users register, and the task a config names.

``@register_task`` (``teamrl.envs.base``) records a builder; here the builtin families are
imported (each module's decorators run) before a name is looked up, so a lookup sees every
builtin task and every task registered by the user's own imports.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

from teamrl.config import AgentConfig, Config, ConfigError, EnvConfig, check_max_turns
from teamrl.envs.base import Task, registered_builders
from teamrl.errors import did_you_mean


def registered_tasks() -> dict[str, str]:
    """{name: description} of every registered task (what ``teamrl envs`` prints)."""
    _import_builtin_tasks()
    return {name: desc for name, (_, desc) in sorted(registered_builders().items())}


# The Task objects make_task built (by id, each with a weak reference that tells a live one
# from a later object at the same address): a run records whether its task came from here or
# was made in the user's code, perhaps under a registered name (teamrl.run.origin).
_BUILT: dict[int, weakref.ref] = {}


def make_task(name: str, **kwargs: Any) -> Task:
    """The registered task ``name`` built with ``kwargs`` (a config's env.kwargs)."""
    builder = _builder(name)
    try:
        task = builder(**kwargs)
    except TypeError as err:
        raise ConfigError(f"env.kwargs for task {name!r}: {err}") from err
    key = id(task)
    try:
        _BUILT[key] = weakref.ref(task, lambda _ref: _BUILT.pop(key, None))
    except TypeError:  # an object no weak reference can point at: it counts as the user's
        pass
    return task


def built_by_registry(task: Task) -> bool:
    """Whether ``task`` is an object ``make_task`` built (a Task made in the user's code under
    a registered name is not)."""
    ref = _BUILT.get(id(task))
    return ref is not None and ref() is task


def bind_task(cfg: Config, task: Task, env_agents: list[str]) -> None:
    """Make ``cfg`` say which task it trains: ``env.name`` unset takes the task's name (so the
    run folder records the task it trained, never a default it did not use); a name that
    disagrees is refused; an empty ``team.agents`` becomes the task's agents. Then the config's
    rules run again, those on the agents included."""
    if cfg.env.name is None:
        cfg.env.name = task.name
    elif cfg.env.name != task.name:
        raise ConfigError(
            f"env.name: {cfg.env.name!r}, but the task passed in is {task.name!r}: set "
            f"env.name={task.name} (or leave env.name unset to take the task's)"
        )
    if not cfg.team.agents:
        cfg.team.agents = [AgentConfig(name=a) for a in env_agents]
    names = [a.name for a in cfg.team.agents]
    if names != list(env_agents):
        raise ConfigError(
            f"team.agents: names {names} must match the agents of task {task.name!r}, in "
            f"order: {list(env_agents)}"
        )
    cfg.validate()


def task_from_config(env: EnvConfig) -> Task:
    """The task a config's ``env`` section describes.

    A builder that takes ``max_turns`` gets ``env.max_turns`` (unless env.kwargs sets the same
    value), so the env's own horizon (its "turn k of n" prompts, its truncation) is the one the
    rollout stops at.
    """

    if env.name is None:
        raise ConfigError(
            "env.name: not set: name a registered task (`teamrl envs` lists them), or pass a "
            "Task object in Python (Trainer(cfg, task=...))"
        )
    check_max_turns(env)
    kwargs = dict(env.kwargs)
    if "max_turns" in inspect.signature(_builder(env.name)).parameters:
        kwargs["max_turns"] = env.max_turns
    return make_task(env.name, **kwargs)


def _builder(name: str) -> Callable[..., Task]:
    _import_builtin_tasks()
    builders = registered_builders()
    if name not in builders:
        known = ", ".join(sorted(builders))
        hint = did_you_mean(name, builders)
        raise ConfigError(
            f"env.name: unknown task {name!r}; {hint + ' ' if hint else ''}known tasks: {known}"
        )
    return builders[name][0]


def _import_builtin_tasks() -> None:
    # Importing the modules runs their @register_task decorators.
    import importlib
    import pkgutil

    import teamrl.tasks as pkg

    for mod in pkgutil.walk_packages(pkg.__path__, prefix="teamrl.tasks."):
        if mod.name == __name__:
            continue
        importlib.import_module(mod.name)
