"""Teammates' messages: the one seam through which an agent is shown what a teammate wrote.

An env that puts a teammate's output into an agent's observation (the tool agent's program and
its result shown to the plan agent, an earlier agent's answer shown by ``SequentialTurns``, the
scout's and the planner's notes in Plan-Path split) builds a :class:`Message` and writes
``env.relay.show(message)`` where the text goes. The default relay (``PASS_THROUGH``) shows it
as written, so a prompt is what it always was.

The message ablation (``eval.message_ablation``, run by ``teamrl.evaluation``) replaces the
relay for its evaluation passes, and nothing else, so every prompt outside a message's span is
the one the un-ablated pass showed:

* ``empty``: every message shown as the empty string;
* ``swap``: every message shown as the one the same sender sent the same receiver, at the same
  turn and place, on the next evaluated problem that has one (the greedy un-ablated pass of
  the same checkpoint recorded them: :class:`MessageBank`); none anywhere shows as empty;
* ``control``: the message with its ``unused`` part removed, a part the receiver does not
  need (the env names it: a sender label, or the tool's program whose output the report also
  shows). A team that reads its partner drops under ``empty`` and ``swap`` and not here.

The relay of an episode must know its problem (a swap draws from another one): ``relayed``
wraps an env factory so that each env's relay is bound to the example it is reset to.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from teamrl.envs.base import Env, NamesItsReward, Step, clone

# The ablation modes, in the order a table shows them.
ABLATIONS = ("empty", "swap", "control")


@dataclass(frozen=True)
class Message:
    """What ``sender`` wrote as ``receiver`` is shown it.

    ``turn`` is the env's turn (0-based) the message was sent in and ``channel`` the place of
    the observation it fills (one message may be shown in several places, e.g. a report and a
    history line); together with the two agents they name the message across problems, which
    is what a swap matches on. ``unused``: a part of ``text`` the receiver does not need, which
    the control ablation removes ("" when there is none).
    """

    sender: str
    receiver: str
    turn: int
    text: str
    channel: str = "message"
    unused: str = ""

    def __post_init__(self) -> None:
        if self.unused and self.unused not in self.text:
            raise ValueError(f"Message.unused: {self.unused[:40]!r} is not a part of its text")

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.sender, self.receiver, self.turn, self.channel)


class Relay(Protocol):
    """Decides what a receiver is shown of a message."""

    def show(self, message: Message) -> str: ...


class PassThrough:
    """The default relay: every message as written."""

    def show(self, message: Message) -> str:
        return message.text


PASS_THROUGH = PassThrough()


@runtime_checkable
class RelaysMessages(Protocol):
    """An env that shows agents what their teammates wrote, through ``relay``."""

    relay: Relay


def example_key(example: dict) -> str:
    """A problem's identity across passes: its example's content (two equal rows are one
    problem, so a swap never draws from a copy of the receiver's own board)."""
    return json.dumps(example, sort_keys=True, default=repr)


class MessageBank:
    """The messages of one pass over ``problems`` (``[(index, example)]``, in evaluation
    order), recorded by :meth:`recorder` and drawn from by :meth:`ablation`."""

    def __init__(self, problems: list[tuple[int, dict]]) -> None:
        self.order: list[int] = []
        self.index: dict[str, int] = {}
        for i, example in problems:
            key = example_key(example)
            if key not in self.index:  # a repeated row is the first one's problem
                self.index[key] = i
                self.order.append(i)
        self.texts: dict[int, dict[tuple, str]] = {i: {} for i in self.order}
        self._lock = threading.Lock()  # envs step on reward-worker threads

    def problem(self, example: dict) -> int:
        key = example_key(example)
        if key not in self.index:
            raise KeyError(f"message ablation: example {key[:80]} is not one of the evaluated")
        return self.index[key]

    def record(self, problem: int, message: Message) -> None:
        with self._lock:
            self.texts[problem].setdefault(message.key, message.text)

    def swapped(self, problem: int, key: tuple) -> str:
        """The text at ``key`` of the first problem after ``problem`` (in evaluation order,
        wrapping round) that has one; "" when no other problem has."""
        start = self.order.index(problem)
        for j in self.order[start + 1 :] + self.order[:start]:
            if key in self.texts[j]:
                return self.texts[j][key]
        return ""

    def recorder(self) -> Relays:
        """Relays that show every message as written and record it."""
        return Relays(self, "record")

    def ablation(self, mode: str) -> Relays:
        """Relays of one ablation mode (``ABLATIONS``) that count what they replace."""
        if mode not in ABLATIONS:
            raise ValueError(f"message ablation: expected one of {list(ABLATIONS)}, got {mode!r}")
        return Relays(self, mode)


class Relays:
    """One relay per problem, all of one mode over one bank. ``seen`` holds the distinct
    messages shown on each problem (none anywhere: the team never read each other)."""

    def __init__(self, bank: MessageBank, mode: str) -> None:
        self.bank, self.mode = bank, mode
        self.seen: dict[int, set[tuple]] = {i: set() for i in bank.order}
        self._lock = threading.Lock()

    def for_example(self, example: dict) -> Relay:
        return _ProblemRelay(self, self.bank.problem(example))

    def messages_per_problem(self) -> float:
        """The mean number of distinct messages shown on a problem."""
        return sum(len(s) for s in self.seen.values()) / max(1, len(self.seen))

    def shown(self, problem: int, message: Message) -> str:
        """What the receiver of ``message`` on ``problem`` is shown under this mode."""
        with self._lock:
            self.seen[problem].add(message.key)
        if self.mode == "record":
            self.bank.record(problem, message)
            return message.text
        if self.mode == "empty":
            return ""
        if self.mode == "control":
            return message.text.replace(message.unused, "", 1) if message.unused else message.text
        return self.bank.swapped(problem, message.key)


@dataclass(frozen=True)
class _ProblemRelay:
    """The relay of one episode: ``relays`` bound to the episode's problem."""

    relays: Relays
    problem: int

    def show(self, message: Message) -> str:
        return self.relays.shown(self.problem, message)

    def __deepcopy__(self, memo: dict) -> _ProblemRelay:
        return self  # a copied env (a tree's branch) shows its messages through the same relay


class RelayedEnv:
    """``env`` whose relay is bound, at each reset, to the problem it is reset to; everything
    else is the wrapped env's (an env that relays nothing is left as it is)."""

    def __init__(self, env: Env, relays: Relays) -> None:
        self.env, self.relays = env, relays
        self.agents = list(env.agents)

    @property
    def turn_order(self) -> list[str]:
        return self.env.turn_order  # type: ignore[attr-defined]  # absent: a simultaneous env

    def reset(self, example: dict) -> dict[str, str]:
        if isinstance(self.env, RelaysMessages):
            self.env.relay = self.relays.for_example(example)
        return self.env.reset(example)

    def step(self, actions: dict[str, str]) -> Step:
        return self.env.step(actions)

    def clone(self) -> RelayedEnv:
        return RelayedEnv(clone(self.env), self.relays)

    def reward_function(self) -> Callable:
        env = self.env
        return env.reward_function() if isinstance(env, NamesItsReward) else type(env).step


def relayed(make_env: Callable[[], Env], relays: Relays) -> Callable[[], Env]:
    """``make_env`` whose envs show their messages through ``relays``."""
    return lambda: RelayedEnv(make_env(), relays)
