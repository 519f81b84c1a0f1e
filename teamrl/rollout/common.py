"""Pieces shared by the episode builders: the result type, the rollout's clock and guarded env
steps.

Every reward enters a rollout through ``EnvRunner.step``: the env's step runs under a time
limit (``env.step_timeout``) on daemon threads (a hung reward can neither hang the run nor
keep the interpreter from exiting on Ctrl-C), and what it returns is validated once, here,
for the joint tree and the agent-turn tree alike (``check_rewards``).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from teamrl.envs.base import Env, NamesItsReward, ObservationError, Step, check_observation
from teamrl.errors import UserCodeError, named, user_frame
from teamrl.sample import Sample


@dataclass
class RolloutResult:
    samples: list[Sample]
    roots: list = field(default_factory=list)  # joint-tree roots (MAGRPO) for sample tables
    # AT-GRPO's (turn, agent) nodes, one chronological list per episode (the critics' chains)
    turn_nodes: list = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)  # timings and token counts
    metrics: dict[str, float] = field(default_factory=dict)  # reward/..., completion_length/...
    episodes: list[dict] = field(default_factory=list)  # one summary per episode (eval, logs)


@dataclass
class RolloutClock:
    """What one rollout spent: seconds generating and seconds stepping envs (rewards and
    transitions), and the completion tokens generated; ``stats`` is ``RolloutResult.stats``."""

    generate: float = 0.0
    reward: float = 0.0
    tokens: int = 0

    @contextmanager
    def generating(self) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.generate += time.perf_counter() - t0

    @contextmanager
    def stepping(self) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.reward += time.perf_counter() - t0

    def stats(self) -> dict[str, float]:
        return {
            "time/generate": self.generate,
            "time/reward": self.reward,
            "tokens/generated": float(self.tokens),
        }


class RewardError(UserCodeError):
    """An environment's step (its reward or transition) raised or returned garbage."""


class EnvError(UserCodeError):
    """An environment's reset (a task's prompt function) raised, or an env left an agent
    without the observation it must act on."""


def as_reward(value: Any, what: str, where: str, source: str = "") -> float:
    """``value`` as a finite float, or a RewardError naming ``where`` (example, turn, agents),
    ``what`` (which reward) and ``source`` (the function that returned it). Safe numbers are
    converted: int, float, bool (a pass/fail reward: True is 1.0), numpy and torch scalars
    (one element, numpy bools too). Strings, None, containers, bigger tensors, NaN, infinities
    and numbers beyond float's range (an int like 10**400) are errors: here, where the reward
    enters, not later as a NaN loss."""
    by = f", returned by {source}" if source else ""
    number = _real_number(value)
    if number is None:
        raise RewardError(
            f"{where}: reward error: {what} is {_shown(value)} of type {type(value).__name__}"
            f"{by}; a reward must be a finite number (int, float, or a one-element numpy/torch "
            "scalar)"
        )
    try:
        result = float(number)
    except (ArithmeticError, ValueError, TypeError):
        result = math.nan  # an int or Fraction beyond float's range: as meaningless as inf
    if not math.isfinite(result):
        raise RewardError(
            f"{where}: reward error: {what} is {_shown(value)}{by}; a reward must be a finite "
            "float (NaN, infinities and numbers beyond float's range are errors)"
        )
    return result


def _real_number(value: Any) -> numbers.Real | None:
    """The real number ``value`` holds (itself, or a one-element array's item), else None."""
    if isinstance(value, numbers.Real):
        return value
    if isinstance(value, str | bytes) or not callable(getattr(value, "item", None)):
        return None
    try:  # numpy / torch scalars and one-element arrays; anything else that has an .item()
        numel = getattr(value, "numel", None)
        size = numel() if callable(numel) else getattr(value, "size", None)
        item = value.item() if size == 1 else None
    except Exception:  # a broken .item() is a value we cannot read: the caller names it
        return None
    return item if isinstance(item, numbers.Real) else None


def _shown(value: Any) -> str:
    """``repr(value)`` clipped to 80 characters; never raises (an int past Python's 4300-digit
    str limit, or a class whose __repr__ fails, is described instead)."""
    try:
        text = repr(value)
    except Exception:
        bits = f" of {value.bit_length()} bits" if isinstance(value, int) else ""
        text = f"<{type(value).__name__}{bits}>"
    return text if len(text) <= 80 else text[:80] + "..."


def check_rewards(step: Step, where: str, source: str = "") -> Step:
    """The step with ``reward``, ``local_rewards`` and ``reward_components`` as finite floats;
    ``source`` names the function that made them (``reward_source``)."""
    for name in ("local_rewards", "reward_components"):
        if not isinstance(getattr(step, name), dict):
            got = type(getattr(step, name)).__name__
            raise RewardError(f"{where}: reward error: {name} must be a dict, got {got}")
    return dataclasses.replace(
        step,
        reward=as_reward(step.reward, "the team reward", where, source),
        local_rewards={
            a: as_reward(v, f"local_rewards[{a!r}] (agent {a})", where, source)
            for a, v in step.local_rewards.items()
        },
        reward_components={
            k: as_reward(v, f"reward_components[{k!r}]", where, source)
            for k, v in step.reward_components.items()
        },
    )


def step_env(env: Env, actions: dict[str, str], where: str) -> Step:
    """One validated env step (no time limit); ``where`` names the example and turn."""
    where = f"{where}, agents {list(actions)}"
    try:
        out = env.step(actions)
    except ObservationError as err:  # a next prompt that is not a str: stays one line
        raise ObservationError(f"{where}: {err}") from None
    except (Exception, SystemExit) as err:  # re-raised with the context a user needs; a
        # sys.exit in a reward (on a worker thread too) is an error of the reward, not an exit
        preview = {a: t[:80] for a, t in actions.items()}
        raise RewardError(f"{where}: env.step raised {user_frame(err)}; actions {preview}") from err
    if not isinstance(out, Step):
        raise RewardError(f"{where}: env.step must return a teamrl Step, got {type(out).__name__}")
    return check_rewards(out, where, reward_source(env))


def reward_source(env: Env) -> str:
    """The function that made ``env``'s rewards, with its file and line (``reward (tasks.py:12)``):
    the reward function where the env names it (``NamesItsReward``), else its ``step``."""
    fn = env.reward_function() if isinstance(env, NamesItsReward) else type(env).step
    return named(fn)


def reset_env(env: Env, example: dict, where: str) -> dict:
    """``env.reset(example)``; what it raises (a prompt function's error) is one line naming
    ``where`` (the example) and the user's frame."""
    try:
        return env.reset(example)
    except ObservationError as err:  # a prompt that is not a str: already one line
        raise ObservationError(f"{where}: {err}") from None
    except (Exception, SystemExit) as err:  # sys.exit in a prompt function: its error
        raise EnvError(f"{where}: env.reset raised {user_frame(err)}") from err


def timed_out_step(env: Env, seconds: float) -> Step:
    """What a step that ran past ``env.step_timeout`` counts as: the episode ends, failed,
    with reward 0 for everyone (``infos["timed_out"]``)."""
    agents = list(getattr(env, "agents", []))
    return Step(
        observations={a: "" for a in agents},
        reward=0.0,
        terminations={a: True for a in agents},
        truncations={a: False for a in agents},
        infos={"timed_out": seconds},
        success=False,
    )


def _run_daemon(
    fn: Callable[[], Any], timeout: float | None
) -> tuple[bool, Any, BaseException | None]:
    """Run ``fn`` on a daemon thread; (finished, value, error). A thread still running past
    ``timeout`` is abandoned: being a daemon, it never blocks the interpreter's exit."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # handed to the caller
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True, name="teamrl-env-step")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return False, None, None
    return True, box.get("value"), box.get("error")


class EnvRunner:
    """Steps env copies for one rollout: ``workers`` at a time, each step limited to
    ``step_timeout`` seconds (0: no limit). A step past its limit ends its episode as failed
    (``timed_out_step``) and is counted in ``timeouts`` (logged as ``episodes/timeouts``).

    Workers are daemon threads and waiting is interruptible, so Ctrl-C stops a run even while
    a reward hangs (a ``ThreadPoolExecutor`` joins its threads at exit and would hang)."""

    def __init__(self, workers: int = 1, step_timeout: float = 0.0) -> None:
        self.workers = max(1, int(workers))
        self.step_timeout = float(step_timeout or 0.0)
        self.timeouts = 0
        self._lock = threading.Lock()

    def step(self, env: Env, actions: dict[str, str], where: str) -> Step:
        if self.step_timeout <= 0:
            return step_env(env, actions, where)
        finished, value, error = _run_daemon(
            lambda: step_env(env, actions, where), self.step_timeout
        )
        if error is not None:
            raise error
        if finished:
            return value
        with self._lock:
            self.timeouts += 1
        return timed_out_step(env, self.step_timeout)

    def map(self, fn: Callable[[Any], Any], items: list) -> list:
        """``[fn(x) for x in items]``, ``workers`` at a time on daemon threads, in order."""
        if self.workers == 1 or len(items) <= 1:
            return [fn(x) for x in items]
        todo: queue.Queue = queue.Queue()
        for i, x in enumerate(items):
            todo.put((i, x))
        results: list[Any] = [None] * len(items)
        errors: list[BaseException] = []

        def work() -> None:
            while not errors:
                try:
                    i, x = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    results[i] = fn(x)
                except BaseException as err:  # the first error stops the others
                    errors.append(err)

        def run_all() -> None:
            threads = [
                threading.Thread(target=work, daemon=True, name="teamrl-reward-worker")
                for _ in range(min(self.workers, len(items)))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        _run_daemon(run_all, None)
        if errors:
            raise errors[0]
        return results

    def metrics(self) -> dict[str, float]:
        return {"episodes/timeouts": float(self.timeouts)}


def check_observations(obs: dict, agents: list[str], where: str) -> None:
    """An observation for every agent, each a str (``check_observation``: a None is refused,
    never prompted as the text "None")."""
    if not isinstance(obs, dict) or set(agents) - set(obs):
        have = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
        raise EnvError(
            f"{where}: env must return an observation for every agent {agents}, got {have}"
        )
    for agent in agents:
        check_observation(agent, obs[agent], f"{where}: the env")
