"""Tasks of the grid games: each game registers a two-agent and a single-agent task."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from teamrl.envs.base import Task, register_task
from teamrl.tasks.games.episode import GameSpec, SingleAgentEnv, ToolPlanEnv, make_rewards
from teamrl.tasks.games.seeds import split_seeds


def agent_prompts(title: str, two_agent: bool) -> dict[str, str]:
    """Default system prompts of the roles."""
    if not two_agent:
        return {
            "solver": f"You solve {title} puzzles. Read the board carefully, think briefly, "
            "and give your action list after '####'."
        }
    return {
        "tool": f"You are the tool agent of a two-agent team solving {title} puzzles. You write "
        "short, correct Python programs (for example a breadth-first search) that compute a "
        "solution from the board and print it as an action list.",
        "plan": f"You are the plan agent of a two-agent team solving {title} puzzles. You check "
        "the board and the tool agent's code, output and simulated result, fix what is wrong, "
        "and give the final action list after '####'.",
    }


def game_task(
    spec: GameSpec,
    rewards_cls: type,
    params: dict[str, Any],
    *,
    two_agent: bool,
    n_train: int,
    n_eval: int,
    n_test: int,
    max_turns: int,
    rewards: Any = None,
    runner: Callable[[str], Any] | None = None,
    max_output_chars: int = 1000,
    description: str = "",
) -> Task:
    """A ``Task`` whose examples are ``{"seed": s, **params}`` from the disjoint seed ranges."""
    constants = make_rewards(rewards_cls, rewards, spec.name)
    spec.build({"seed": 0, **params}, constants)  # fail now, not mid-run, on bad params
    if isinstance(max_output_chars, bool) or not isinstance(max_output_chars, int):
        raise ValueError(f"{spec.name}.max_output_chars: expected an int, got {max_output_chars!r}")
    if two_agent:

        def make_env() -> ToolPlanEnv:
            return ToolPlanEnv(
                spec,
                constants,
                max_turns=max_turns,
                runner=runner,
                max_output_chars=max_output_chars,
            )

    else:

        def make_env() -> SingleAgentEnv:
            return SingleAgentEnv(spec, constants, max_turns=max_turns)

    make_env()  # validates max_turns

    def examples(split: str, n: int) -> list[dict]:
        return [{"seed": s, **params} for s in split_seeds(split, n)]

    return Task(
        name=spec.name if two_agent else f"{spec.name}_single",
        make_env=make_env,
        train=examples("train", n_train),
        eval=examples("eval", n_eval),
        test=examples("test", n_test),
        agents=agent_prompts(spec.title, two_agent),
        description=description,
    )


# Keyword arguments every game task takes after its own board parameters, with their defaults.
_TASK_KWARGS: dict[str, Any] = {
    "n_train": 10_000,
    "n_eval": 100,
    "n_test": 100,
    "max_turns": 5,
    "rewards": None,
}
_TOOL_KWARGS: dict[str, Any] = {"runner": None, "max_output_chars": 1000}


def _game_builder(
    spec: GameSpec,
    rewards_cls: type,
    params: dict[str, Any],
    describe: Callable[..., str],
    two_agent: bool,
) -> Callable[..., Task]:
    """The builder of one game task, with the explicit signature ``(*params, *task kwargs)``.

    The signature is built (not written out three times per game) and attached as
    ``__signature__``, so ``help()`` and positional calls behave as for a plain ``def``.
    """
    name = f"{spec.name}_task" if two_agent else f"{spec.name}_single_task"
    defaults = {**params, **_TASK_KWARGS, **(_TOOL_KWARGS if two_agent else {})}
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    signature = inspect.Signature(
        [inspect.Parameter(key, kind, default=value) for key, value in defaults.items()],
        return_annotation=Task,
    )
    roles = "tool + plan agents" if two_agent else "single agent"

    def build(*args: Any, **kwargs: Any) -> Task:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as err:  # same message shape as a plain function's
            raise TypeError(f"{name}() {err}") from None
        bound.apply_defaults()
        values = dict(bound.arguments)
        board = {key: values.pop(key) for key in params}
        return game_task(
            spec,
            rewards_cls,
            board,
            two_agent=two_agent,
            description=f"{describe(**board)}, {roles}",
            **values,
        )

    build.__signature__ = signature  # type: ignore[attr-defined]
    build.__name__ = build.__qualname__ = name
    build.__module__ = spec.build.__module__  # the game's module, which binds ``name``
    build.__doc__ = (
        f"Two-agent {spec.title}. ``rewards`` overrides fields of :class:`{rewards_cls.__name__}`."
        if two_agent
        else f"Single-agent {spec.title} (agent ``solver``)."
    )
    return build


def game_table(text: str) -> dict[str, str]:
    """``key value...`` lines (an indented line continues the one above) as a dict."""
    entries: list[str] = []
    for line in text.strip().splitlines():
        if line.startswith(" ") and entries:
            entries[-1] += " " + line.strip()
        else:
            entries.append(line)
    return dict(entry.split(maxsplit=1) for entry in entries)


def game_spec(table: str, rules: str, build: Callable, parse: Callable) -> GameSpec:
    """A ``GameSpec`` whose name, title, action example and tool hint come from ``table``."""
    row = game_table(table)
    keys = ("name", "title", "action_example", "tool_hint")
    return GameSpec(**{k: row[k] for k in keys}, rules=rules, build=build, parse=parse)


def register_game(
    table: str, spec: GameSpec, rewards_cls: type, params: dict[str, Any]
) -> tuple[Callable[..., Task], Callable[..., Task]]:
    """``register_game_tasks`` with the summary and the board's description (a format string
    of the board parameters) read from ``table``."""
    row = game_table(table)
    describe = row["describe"].format
    return register_game_tasks(spec, rewards_cls, params, summary=row["summary"], describe=describe)


def register_game_tasks(
    spec: GameSpec,
    rewards_cls: type,
    params: dict[str, Any],
    *,
    summary: str,
    describe: Callable[..., str],
) -> tuple[Callable[..., Task], Callable[..., Task]]:
    """Register ``<spec.name>`` (tool + plan agents) and ``<spec.name>_single``; their builders.

    ``params`` are the game's board parameters with their defaults (the first keyword
    arguments of both builders, copied into every example); the shared ones follow
    (``n_train``, ``n_eval``, ``n_test``, ``max_turns``, ``rewards``, and for the two-agent
    task ``runner`` and ``max_output_chars``). ``summary`` starts the registry descriptions;
    ``describe(**params)`` names the board in ``Task.description``.
    """
    two = _game_builder(spec, rewards_cls, params, describe, two_agent=True)
    single = _game_builder(spec, rewards_cls, params, describe, two_agent=False)
    register_task(spec.name, f"{summary}; tool agent (code) then plan agent")(two)
    register_task(f"{spec.name}_single", f"{summary}; one agent (L0 baseline)")(single)
    return two, single
