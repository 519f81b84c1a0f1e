"""The two env wrappers of the grid games, and what a game supplies to them (``GameSpec``).

A game module (``plan_path``, ``sudoku``, ``sokoban``) supplies a :class:`GameSpec`: how to build
a state from an example, how to parse an action list from text, and the rules shown to agents.
A state object offers ``copy()``, ``apply(actions) -> (new_state, reward, info)`` (pure: the
receiver is never changed), ``is_solved()`` and ``render()``.

Two wrappers turn a spec into a text environment (the protocol of ``teamrl.envs.base``):

* :class:`ToolPlanEnv`, sequential, ``turn_order = ["tool", "plan"]``. The tool agent writes
  Python that prints an action list; the code runs in the sandbox and the printed list is
  simulated on a *copy* of the state (the real state is untouched). The plan agent then sees the
  board, the code, its output and the simulated result, and emits the final list, which is
  applied to the real state. That report, and the tool's proposal in later turns' history
  lines, reach the plan agent through the env's ``relay`` (``teamrl.envs.messages``: as
  written, unless the message ablation replaces them; the program is the report's unused part).

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

from collections.abc import Callable
from dataclasses import dataclass, fields, make_dataclass
from typing import Any

from teamrl.envs.base import Step
from teamrl.envs.messages import PASS_THROUGH, Message, Relay
from teamrl.tasks.games.actions import extract_code, format_actions
from teamrl.tasks.options import option
from teamrl.tasks.run_program import run_program
from teamrl.text import clip


def reward_field(default: float, help: str) -> Any:
    """One constant of a game's frozen rewards dataclass, with the help string a config shows."""
    return option(default, help)


def no_action_penalty_field() -> Any:
    """The constant every game has: what an answer with no usable action list earns."""
    return reward_field(-1.0, "reward when no action list can be parsed (or code fails)")


def rewards_class(name: str, table: str, module: str) -> type:
    """A game's frozen rewards dataclass from a table, one constant a line:
    ``<field> <default> <help...>``; ``no_action_penalty`` (every game has it) comes last."""
    rows = [line.split(maxsplit=2) for line in table.strip().splitlines()]
    specs = [(key, float, reward_field(float(value), help)) for key, value, help in rows]
    specs.append(("no_action_penalty", float, no_action_penalty_field()))
    cls = make_dataclass(name, specs, frozen=True)
    cls.__module__ = module
    return cls


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


def apply_actions(
    state: Any,
    actions: list,
    move: Callable[[Any, Any, dict], bool],
    extra: tuple = (),
    win_extra: Callable[[Any, int], float] | None = None,
) -> tuple[Any, float, dict[str, Any]]:
    """The loop every game's ``apply`` shares, on a copy of ``state``: (new state, reward, info).

    Each action tried costs ``step_penalty``; ``move(s, action, components)`` applies one action
    to the copy ``s`` (adding its own terms, e.g. ``shaping``) and returns False when the
    action is invalid (then ``invalid_penalty``, nothing moves). Reaching the solved state adds
    ``win_bonus`` (plus ``win_extra(state, actions tried)``, e.g. a shortest-path bonus);
    actions after it are unused. ``extra`` names the game's own components.
    """
    rw = state.rewards
    s = state.copy()
    comps = {"step": 0.0, "invalid": 0.0, **dict.fromkeys(extra, 0.0), "shaping": 0.0, "win": 0.0}
    n_invalid = n_unused = tried = 0
    for action in actions:
        if s.is_solved():
            n_unused += 1
            continue
        comps["step"] += rw.step_penalty
        tried += 1
        if not move(s, action, comps):
            n_invalid += 1
            comps["invalid"] += rw.invalid_penalty
            continue
        if s.is_solved():
            comps["win"] += rw.win_bonus + (win_extra(state, tried) if win_extra else 0.0)
    info = apply_info(len(actions), n_invalid, n_unused, s.is_solved(), comps)
    return s, sum(comps.values()), info


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


# The tool agent's default runner: one program in the sandbox with its default limits (an
# ``ExecResult``). A module global, so that a test can replace it.
sandbox_runner = run_program

# How a long tool output is cut in the plan agent's prompt.
_CUT = "\n... [truncated {cut} characters]"


def check_one_agent(actions: dict[str, str], expected: str, game: str) -> str:
    """The completion of ``expected``, the one agent whose action ``actions`` must hold."""
    if not isinstance(actions, dict) or list(actions) != [expected]:
        got = list(actions) if isinstance(actions, dict) else actions
        raise ValueError(f"{game}.step: expected an action for {expected!r} only, got {got!r}")
    if not isinstance(actions[expected], str):
        raise ValueError(f"{game}.step: action of {expected!r} must be a str")
    return actions[expected]


def result_line(info: dict | None, reward: float) -> str:
    """What an applied list did, in one line (``info`` from a state's ``apply``; None: no list)."""
    if info is None:
        return f"no action list found; reward {reward:+.3f}"
    solved = "SOLVED" if info["solved"] else "not solved"
    return (
        f"{info['n_actions']} actions, {info['n_invalid']} invalid, "
        f"{info['n_unused']} unused; reward {reward:+.3f}; {solved}"
    )


def step_components(prefix: str, info: dict | None, reward: float) -> dict[str, float]:
    """A step's ``reward_components``: the reward, whether a list parsed, its counts and the
    apply's own components, each name after ``prefix`` (the acting agent's)."""
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

    def _board(self, history_lines: list[str] | None = None) -> str:
        """The rules, the previous turns (``history_lines``, default ``self.history``: what a
        receiver of relayed messages is shown differs) and the current board."""
        lines = self.history if history_lines is None else history_lines
        history = "\n".join(lines) if lines else "(none)"
        # a state may offer hint() (Plan-Path's shortest path, the learning ladder's rung 1)
        hint = self.state.hint() if hasattr(self.state, "hint") else ""
        return (
            f"{self.spec.rules}\n\nPrevious turns:\n{history}\n\n"
            f"Current board (turn {self.turn + 1} of {self.max_turns}):\n{self.state.render()}"
            + (f"\n{hint}" if hint else "")
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
            infos={"actions": actions},
            success=solved,
            reward_components=step_components(f"{agent}_", info, reward),
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
        # the tool's part of each history line, which the plan agent is shown through the relay
        self.proposals: list[str] = []
        self.relay: Relay = PASS_THROUGH  # what the plan agent is shown of the tool's messages

    def clone(self) -> ToolPlanEnv:
        """Independent copy for tree rollouts; the runner and spec are shared (stateless)."""
        new = object.__new__(ToolPlanEnv)
        new.__dict__.update(self.__dict__)
        new.state = self.state.copy() if self.state is not None else None
        new.history = list(self.history)
        new.proposals = list(self.proposals)
        new.tool = dict(self.tool) if self.tool is not None else None
        return new

    def reset(self, example: dict) -> dict[str, str]:
        self._start(example)
        self.tool, self.proposals = None, []
        return self._observations()

    def step(self, actions: dict[str, str]) -> Step:
        self._require_running()
        agent = "tool" if self.tool is None else "plan"
        completion = check_one_agent(actions, agent, self.spec.name)
        return self._tool_step(completion) if agent == "tool" else self._plan_step(completion)

    def _tool_step(self, completion: str) -> Step:
        code = extract_code(completion)
        # a state may give the program a preamble (Plan-Path's tool_library); the plan agent
        # is shown the tool's own code only
        preamble = self.state.tool_preamble() if hasattr(self.state, "tool_preamble") else ""
        result = self.runner(preamble + "\n" + code if preamble else code)
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
        comps = step_components("tool_", info, reward)
        comps["tool_exec_ok"] = float(ok)
        return Step(
            observations=self._observations(),
            reward=0.0,
            terminations={a: False for a in self.agents},
            truncations={a: False for a in self.agents},
            local_rewards={"tool": float(reward)},
            # pending: the team reward of this candidate is only known once the plan agent has
            # acted on it, so the AT-GRPO rollout finishes the turn on a copy to score it.
            infos={"actions": actions},
            success=False,
            pending=True,
            reward_components=comps,
        )

    def _plan_step(self, completion: str) -> Step:
        actions = self.spec.parse(completion, False)
        reward, info = self._apply_real(actions)
        tool = self.tool
        proposal = (
            f"{format_actions(tool['actions'])} "
            f"(simulated: {result_line(tool['info'], tool['reward'])})"
        )
        self.proposals.append(proposal)
        self.history.append(
            f"{_proposed(self.turn)}{proposal}; "
            f"plan applied {format_actions(actions)} ({result_line(info, reward)})."
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
        note = self.state.tool_note() if hasattr(self.state, "tool_note") else ""
        tool_obs += f" {note}" if note else ""
        # an ended episode's observations reach no prompt, so they show no message again
        plan_board = board if self.done else self._board(self._plan_history())
        if self.tool is None:
            plan_obs = f"{plan_board}\n\nThe tool agent has not acted yet this turn."
        else:
            report, program = self._tool_report()
            # the program is the report's unused part: its output, parsed list and simulated
            # result follow, which is what the plan agent acts on
            message = Message("tool", "plan", self.turn, report, "report", program)
            plan_obs = f"{plan_board}\n\n{self.relay.show(message)}\n\n" + (
                "You are the plan agent. Check the tool agent's proposal against the board and "
                "give the final action list after '####', for example "
                f"#### {self.spec.action_example}. It is applied to the real board."
            )
        return {"tool": tool_obs, "plan": plan_obs}

    def _plan_history(self) -> list[str]:
        """The history lines as the plan agent is shown them: each turn's tool proposal
        through the relay."""
        lines = []
        for turn, (line, proposal) in enumerate(zip(self.history, self.proposals)):
            head = _proposed(turn)
            shown = self.relay.show(Message("tool", "plan", turn, proposal, "history"))
            lines.append(head + shown + line[len(head) + len(proposal) :])
        return lines

    def _tool_report(self) -> tuple[str, str]:
        """What the plan agent is shown of this turn's tool step, and its first part (the
        program, ending in the blank line before the rest)."""
        t = self.tool
        status = "ran successfully" if t["ok"] else "FAILED"
        if t["timed_out"]:
            status += " (timed out)"
        parts = [
            f"The tool agent wrote this code:\n```python\n{t['code']}\n```",
            f"The code {status}. Its output:\n"
            + (clip(t["stdout"].rstrip(), self.max_output_chars, marker=_CUT) or "(empty)"),
        ]
        if not t["ok"] and t["stderr"]:
            parts.append("Error output (tail):\n" + t["stderr"][-self.max_output_chars :])
        parts.append(
            f"Parsed action list: {format_actions(t['actions'])}\n"
            f"Simulated result: {result_line(t['info'], t['reward'])}"
        )
        if t["sim_board"] is not None:
            parts.append(f"Board after the simulated actions:\n{t['sim_board']}")
        return "\n\n".join(parts), parts[0] + "\n\n"


def _proposed(turn: int) -> str:
    """The start of a history line, before the tool's proposal."""
    return f"Turn {turn + 1}: tool proposed "


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
        completion = check_one_agent(actions, "solver", self.spec.name)
        parsed = self.spec.parse(completion, False)
        reward, info = self._apply_real(parsed)
        self.history.append(
            f"Turn {self.turn + 1}: you applied {format_actions(parsed)} "
            f"({result_line(info, reward)})."
        )
        return self._end_turn("solver", parsed, reward, info)

    def _observations(self) -> dict[str, str]:
        return {
            "solver": f"{self._board()}\n\nGive your action list after '####', for example "
            f"#### {self.spec.action_example}. It is applied to the board."
        }
