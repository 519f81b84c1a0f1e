"""Shared pieces of the grid games: seed splits, action-list parsing, and the two env wrappers.

A game module (``plan_path``, ``sudoku``, ``sokoban``) supplies a :class:`GameSpec`: how to build
a state from an example, how to parse an action list from text, and the rules shown to agents.
A state object offers ``copy()``, ``apply(actions) -> (new_state, reward, info)`` (pure: the
receiver is never changed), ``is_solved()`` and ``render()``.

Two wrappers turn a spec into a text environment (the protocol of ``teamrl.envs.base``):

* :class:`ToolPlanEnv`, sequential, ``turn_order = ["tool", "plan"]``. The tool agent writes
  Python that prints an action list; the code runs in the sandbox and the printed list is
  simulated on a *copy* of the state (the real state is untouched). The plan agent then sees the
  board, the code, its output and the simulated result, and emits the final list, which is
  applied to the real state.

  Rewards: the tool step is ``pending`` (team reward unknown until the plan agent acts) and
  ``local_rewards["tool"]`` is the shaped reward of the simulation. At the plan step
  ``Step.reward`` (team) is the shaped reward of the real state's transition r, and the local
  terms are the tool's simulated reward r_sim and the plan agent's gain r - r_sim. A rollout
  mixes them as ``alpha * team + local``: AT-GRPO scores each tool candidate by finishing the
  turn on a copy, so the tool earns alpha * r + r_sim (the reference's sum, with alpha).

* :class:`SingleAgentEnv`, one agent ``solver`` that emits the list directly (the L0 baseline),
  multi-turn with feedback on what its last list did.

An unparseable answer (no action list, or tool code that fails) earns the game's
``no_action_penalty`` and leaves the state as it was.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from teamrl.envs.base import Step, Task, register_task

# Disjoint seed ranges: eval and test come from the held-out range, disjoint from each other.
SEED_RANGES: dict[str, range] = {
    "train": range(0, 1_000_000),
    "eval": range(1_000_000, 1_500_000),
    "test": range(1_500_000, 2_000_000),
}


def seed_split(seed: int) -> str | None:
    """The split whose seed range holds ``seed`` (None outside all ranges)."""
    return next((name for name, seeds in SEED_RANGES.items() if seed in seeds), None)


def board_split(key: str) -> str:
    """The split a board belongs to by *content*: a sha256 bucket of ``key`` (its text).

    Small boards repeat across seeds (6x6 Sokoban has only a few thousand distinct rooms), so
    disjoint seeds alone would put training boards in the test set. Generators redraw until
    ``board_split(board) == seed_split(seed)``: 80% of boards are train-only, 10% eval-only and
    10% test-only, whatever the seed.
    """
    bucket = hashlib.sha256(key.encode()).digest()[0] % 10
    return "test" if bucket == 0 else "eval" if bucket == 1 else "train"


def board_fits_seed(key: str, seed: int) -> bool:
    """True if a board with text ``key`` may be used for ``seed`` (see :func:`board_split`)."""
    split = seed_split(seed)
    return split is None or board_split(key) == split


def split_seeds(split: str, n: int) -> list[int]:
    """The first ``n`` seeds of ``split`` ("train", "eval" or "test")."""
    if split not in SEED_RANGES:
        raise ValueError(f"split: expected one of {sorted(SEED_RANGES)}, got {split!r}")
    seeds = SEED_RANGES[split]
    if not 0 <= n <= len(seeds):
        raise ValueError(f"n_{split}: expected 0..{len(seeds)}, got {n}")
    return list(seeds[:n])


# ---------------------------------------------------------------------------------------------
# Parsing


def _bracket_spans(text: str) -> list[str]:
    """Top-level balanced ``[...]`` spans of ``text``, in order (nested lists stay whole)."""
    spans, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "]" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def extract_action_segment(text: str, *, last_line_fallback: bool = False) -> str | None:
    """The part of ``text`` that holds the action list, or None if there is none.

    Order of preference: after the last ``####`` marker, the first ``[...]`` list (or else the
    rest of that line); otherwise the last ``[...]`` list in the text; otherwise, only when
    ``last_line_fallback`` (used for program output), the last non-empty line.
    """
    if "####" in text:
        tail = text.rsplit("####", 1)[1]
        spans = _bracket_spans(tail)
        if spans:
            return spans[0]
        lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
        return lines[0] if lines else None
    spans = _bracket_spans(text)
    if spans:
        return spans[-1]
    if last_line_fallback:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return lines[-1] if lines else None
    return None


MOVE_ALIASES = {
    "u": "U",
    "up": "U",
    "d": "D",
    "down": "D",
    "l": "L",
    "left": "L",
    "r": "R",
    "right": "R",
}
# (d_row, d_col) per move; row 0 is the top of the board.
MOVES: dict[str, tuple[int, int]] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


def parse_moves(text: str, last_line_fallback: bool = False) -> list[str] | None:
    """A list of moves "U"/"D"/"L"/"R" from ``text``, or None when no action list is found.

    Words up/down/left/right (any case) and runs of the letters UDLR ("UURD") are read as moves.
    Any other word in the list is kept as-is, so that ``apply`` counts it as an invalid action.
    """
    segment = extract_action_segment(text, last_line_fallback=last_line_fallback)
    if segment is None:
        return None
    moves: list[str] = []
    for token in re.findall(r"[A-Za-z]+", segment):
        if token.lower() in MOVE_ALIASES:
            moves.append(MOVE_ALIASES[token.lower()])
        elif set(token.upper()) <= set("UDLR"):
            moves.extend(token.upper())
        else:
            moves.append(token)
    return moves


_FENCED_PY = re.compile(r"```(?:python|py)[ \t]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(completion: str) -> str:
    """The Python code of a completion: all ```python blocks joined, else the whole text.

    A block left open (a truncated generation) runs to the end of the text. Joining the blocks
    keeps a helper defined in one block usable from a later one.
    """
    blocks = [b.strip("\n") for b in _FENCED_PY.findall(completion)]
    blocks = [b for b in blocks if b.strip()]
    return "\n\n".join(blocks) if blocks else completion


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... [truncated {len(text) - limit} characters]"


def format_actions(actions: list | None, limit: int = 300) -> str:
    """Short display of an action list for observations and history lines."""
    if actions is None:
        return "(no action list found)"
    text = "[" + ", ".join(str(a) if isinstance(a, tuple) else repr(a) for a in actions) + "]"
    return text if len(text) <= limit else text[:limit] + " ...]"


# ---------------------------------------------------------------------------------------------
# Rewards and specs


def make_rewards(cls: type, overrides: Any, game: str) -> Any:
    """An instance of the frozen rewards dataclass ``cls`` with ``overrides`` (dict) applied."""
    if isinstance(overrides, cls):
        return overrides
    if overrides is None:
        return cls()
    if not isinstance(overrides, dict):
        raise ValueError(f"{game}.rewards: expected a dict of overrides, got {overrides!r}")
    known = [f.name for f in fields(cls)]
    values = {}
    for key, value in overrides.items():
        if key not in known:
            raise ValueError(f"{game}.rewards: unknown field {key!r}; known fields: {known}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{game}.rewards.{key}: expected a number, got {value!r}")
        values[key] = float(value)
    return cls(**values)


def apply_info(
    n_actions: int, n_invalid: int, n_unused: int, solved: bool, components: dict[str, float]
) -> dict[str, Any]:
    """The ``info`` dict every state's ``apply`` returns.

    ``n_unused`` counts actions after the puzzle was solved (ignored, not penalised).
    ``components`` sum to the reward.
    """
    return {
        "n_actions": n_actions,
        "n_invalid": n_invalid,
        "n_unused": n_unused,
        "solved": solved,
        "components": dict(components),
    }


@dataclass(frozen=True)
class GameSpec:
    """What a wrapper needs to know about a game."""

    name: str  # task name, e.g. "sokoban"
    title: str  # for prompts, e.g. "Sokoban"
    rules: str  # rules and action format, shown to every agent
    action_example: str  # e.g. "['U', 'R', 'R']"
    tool_hint: str  # what the tool agent's program should compute
    build: Callable[[dict, Any], Any]  # (example, rewards) -> state
    parse: Callable[[str, bool], list | None]  # (text, last_line_fallback) -> actions | None


def sandbox_runner(code: str) -> Any:
    """Run ``code`` in ``teamrl.sandbox`` with its default limits (an ``ExecResult``)."""
    from teamrl.sandbox import run_python  # imported here: keep env import light

    return run_python(code)


def _check_one_agent(actions: dict[str, str], expected: str, game: str) -> str:
    if not isinstance(actions, dict) or list(actions) != [expected]:
        got = list(actions) if isinstance(actions, dict) else actions
        raise ValueError(f"{game}.step: expected an action for {expected!r} only, got {got!r}")
    if not isinstance(actions[expected], str):
        raise ValueError(f"{game}.step: action of {expected!r} must be a str")
    return actions[expected]


def _result_line(info: dict | None, reward: float) -> str:
    if info is None:
        return f"no action list found; reward {reward:+.3f}"
    solved = "SOLVED" if info["solved"] else "not solved"
    return (
        f"{info['n_actions']} actions, {info['n_invalid']} invalid, "
        f"{info['n_unused']} unused; reward {reward:+.3f}; {solved}"
    )


def _components(prefix: str, info: dict | None, reward: float) -> dict[str, float]:
    comps = {
        f"{prefix}reward": float(reward),
        f"{prefix}parsed": float(info is not None),
        f"{prefix}n_actions": float(info["n_actions"]) if info else 0.0,
        f"{prefix}n_invalid": float(info["n_invalid"]) if info else 0.0,
        f"{prefix}solved": float(bool(info and info["solved"])),
    }
    for name, value in (info["components"] if info else {}).items():
        comps[f"{prefix}{name}"] = float(value)
    return comps


class _Episode:
    """State shared by both wrappers: the real game state, turn counter and text history."""

    def __init__(self, spec: GameSpec, rewards: Any, max_turns: int) -> None:
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"{spec.name}.max_turns: expected an int >= 1, got {max_turns!r}")
        self.spec = spec
        self.rewards = rewards
        self.max_turns = max_turns
        self.state: Any = None
        self.turn = 0
        self.history: list[str] = []
        self.done = False

    def _start(self, example: dict) -> None:
        self.state = self.spec.build(example, self.rewards)
        self.turn, self.history, self.done = 0, [], False

    def _require_running(self) -> None:
        if self.state is None:
            raise RuntimeError(f"{self.spec.name}: call reset(example) before step")
        if self.done:
            raise RuntimeError(f"{self.spec.name}: the episode is over; call reset(example)")

    def _board(self) -> str:
        history = "\n".join(self.history) if self.history else "(none)"
        return (
            f"{self.spec.rules}\n\nPrevious turns:\n{history}\n\n"
            f"Current board (turn {self.turn + 1} of {self.max_turns}):\n{self.state.render()}"
        )

    def _apply_real(self, actions: list | None) -> tuple[float, dict | None]:
        """Apply a parsed list to the real state; no list costs ``no_action_penalty``."""
        if actions is None:
            return self.rewards.no_action_penalty, None
        self.state, reward, info = self.state.apply(actions)
        return reward, info

    def _end_turn(
        self,
        agent: str,
        actions: list | None,
        reward: float,
        info: dict | None,
        local_rewards: dict[str, float] | None = None,
    ) -> Step:
        """Close the turn after ``agent``'s list was applied to the real state; its Step.

        By default the committing agent's own action caused the transition, so its local reward
        is the team reward. Call after the history line is written: the observations show the
        new turn.
        """
        self.turn += 1
        solved = self.state.is_solved()
        truncated = not solved and self.turn >= self.max_turns
        self.done = solved or truncated
        return Step(
            observations=self._observations(),
            reward=float(reward),
            terminations={a: solved for a in self.agents},
            truncations={a: truncated for a in self.agents},
            local_rewards=local_rewards or {agent: float(reward)},
            infos={
                "success": solved,
                "reward_components": _components(f"{agent}_", info, reward),
                "actions": actions,
            },
        )


class ToolPlanEnv(_Episode):
    """Two-agent sequential env: ``tool`` (code, simulated on a copy) then ``plan`` (applied).

    ``runner(code) -> ExecResult`` runs the tool agent's code (default: the sandbox); tests
    inject a fake. Only ``stdout``, ``stderr``, ``ok`` and ``timed_out`` of the result are used.
    """

    def __init__(
        self,
        spec: GameSpec,
        rewards: Any,
        *,
        max_turns: int = 5,
        runner: Callable[[str], Any] | None = None,
        max_output_chars: int = 1000,
    ) -> None:
        super().__init__(spec, rewards, max_turns)
        self.agents = ["tool", "plan"]
        self.turn_order = ["tool", "plan"]
        self.runner = runner if runner is not None else sandbox_runner
        self.max_output_chars = max_output_chars
        self.tool: dict | None = None  # this turn's tool record, shown to the plan agent

    def clone(self) -> ToolPlanEnv:
        """Independent copy for tree rollouts; the runner and spec are shared (stateless)."""
        new = object.__new__(ToolPlanEnv)
        new.__dict__.update(self.__dict__)
        new.state = self.state.copy() if self.state is not None else None
        new.history = list(self.history)
        new.tool = dict(self.tool) if self.tool is not None else None
        return new

    def reset(self, example: dict) -> dict[str, str]:
        self._start(example)
        self.tool = None
        return self._observations()

    def step(self, actions: dict[str, str]) -> Step:
        self._require_running()
        agent = "tool" if self.tool is None else "plan"
        completion = _check_one_agent(actions, agent, self.spec.name)
        return self._tool_step(completion) if agent == "tool" else self._plan_step(completion)

    def _tool_step(self, completion: str) -> Step:
        code = extract_code(completion)
        result = self.runner(code)
        ok = bool(result.ok)
        stdout, stderr = result.stdout or "", result.stderr or ""
        actions = self.spec.parse(stdout, True) if ok else None
        if actions is None:
            reward, info, sim_board = self.rewards.no_action_penalty, None, None
        else:  # simulate on a copy: apply() never changes self.state
            sim_state, reward, info = self.state.apply(actions)
            sim_board = sim_state.render()
        self.tool = {
            "code": code,
            "stdout": stdout,
            "stderr": stderr,
            "ok": ok,
            "timed_out": bool(getattr(result, "timed_out", False)),
            "actions": actions,
            "reward": reward,
            "info": info,
            "sim_board": sim_board,
        }
        comps = _components("tool_", info, reward)
        comps["tool_exec_ok"] = float(ok)
        return Step(
            observations=self._observations(),
            reward=0.0,
            terminations={a: False for a in self.agents},
            truncations={a: False for a in self.agents},
            local_rewards={"tool": float(reward)},
            # pending: the team reward of this candidate is only known once the plan agent has
            # acted on it, so the AT-GRPO rollout finishes the turn on a copy to score it.
            infos={
                "success": False,
                "pending": True,
                "reward_components": comps,
                "actions": actions,
            },
        )

    def _plan_step(self, completion: str) -> Step:
        actions = self.spec.parse(completion, False)
        reward, info = self._apply_real(actions)
        tool = self.tool
        self.history.append(
            f"Turn {self.turn + 1}: tool proposed {format_actions(tool['actions'])} "
            f"(simulated: {_result_line(tool['info'], tool['reward'])}); "
            f"plan applied {format_actions(actions)} ({_result_line(info, reward)})."
        )
        self.tool = None
        # Local terms: the tool keeps its simulated reward; the plan agent is credited with what
        # it added over the tool's proposal (r_real - r_sim), so alpha weighs the shared outcome
        # against each agent's own contribution.
        local = {"tool": float(tool["reward"]), "plan": float(reward) - float(tool["reward"])}
        return self._end_turn("plan", actions, reward, info, local)

    def _observations(self) -> dict[str, str]:
        board = self._board()
        tool_obs = (
            f"{board}\n\nYou are the tool agent. {self.spec.tool_hint} Write self-contained "
            f"Python code (standard library only, no input) in a ```python block that prints "
            f"the action list, for example print({self.spec.action_example}). Your list is "
            f"simulated on a copy of the board and shown to the plan agent, who decides the "
            f"final actions."
        )
        if self.tool is None:
            plan_obs = f"{board}\n\nThe tool agent has not acted yet this turn."
        else:
            plan_obs = f"{board}\n\n{self._tool_report()}\n\n" + (
                "You are the plan agent. Check the tool agent's proposal against the board and "
                "give the final action list after '####', for example "
                f"#### {self.spec.action_example}. It is applied to the real board."
            )
        return {"tool": tool_obs, "plan": plan_obs}

    def _tool_report(self) -> str:
        t = self.tool
        status = "ran successfully" if t["ok"] else "FAILED"
        if t["timed_out"]:
            status += " (timed out)"
        parts = [
            f"The tool agent wrote this code:\n```python\n{t['code']}\n```",
            f"The code {status}. Its output:\n"
            + (_truncate(t["stdout"].rstrip(), self.max_output_chars) or "(empty)"),
        ]
        if not t["ok"] and t["stderr"]:
            parts.append("Error output (tail):\n" + t["stderr"][-self.max_output_chars :])
        parts.append(
            f"Parsed action list: {format_actions(t['actions'])}\n"
            f"Simulated result: {_result_line(t['info'], t['reward'])}"
        )
        if t["sim_board"] is not None:
            parts.append(f"Board after the simulated actions:\n{t['sim_board']}")
        return "\n\n".join(parts)


class SingleAgentEnv(_Episode):
    """One agent ``solver`` emits the action list after '####'; multi-turn with feedback."""

    def __init__(self, spec: GameSpec, rewards: Any, *, max_turns: int = 5) -> None:
        super().__init__(spec, rewards, max_turns)
        self.agents = ["solver"]
        self.turn_order = ["solver"]

    def clone(self) -> SingleAgentEnv:
        new = object.__new__(SingleAgentEnv)
        new.__dict__.update(self.__dict__)
        new.state = self.state.copy() if self.state is not None else None
        new.history = list(self.history)
        return new

    def reset(self, example: dict) -> dict[str, str]:
        self._start(example)
        return self._observations()

    def step(self, actions: dict[str, str]) -> Step:
        self._require_running()
        completion = _check_one_agent(actions, "solver", self.spec.name)
        parsed = self.spec.parse(completion, False)
        reward, info = self._apply_real(parsed)
        self.history.append(
            f"Turn {self.turn + 1}: you applied {format_actions(parsed)} "
            f"({_result_line(info, reward)})."
        )
        return self._end_turn("solver", parsed, reward, info)

    def _observations(self) -> dict[str, str]:
        return {
            "solver": f"{self._board()}\n\nGive your action list after '####', for example "
            f"#### {self.spec.action_example}. It is applied to the board."
        }


# ---------------------------------------------------------------------------------------------
# Tasks


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


def example_int(example: dict, key: str, default: int, game: str) -> int:
    """``example[key]`` as an int (``default`` if absent), with a clear error otherwise."""
    value = example.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{game}.{key}: expected an int, got {value!r}")
    return value


def example_seed(example: dict, game: str) -> int:
    if not isinstance(example, dict) or "seed" not in example:
        raise ValueError(f"{game}: example must be a dict with a 'seed', got {example!r}")
    return example_int(example, "seed", 0, game)
