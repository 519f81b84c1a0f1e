"""Math tasks: a tool agent (Python) and a reasoner (``\\boxed{}``) solve one problem together.

Tasks
    ``math``         two agents, "tool" and "reasoner" (the AT-GRPO math workflow).
    ``math_single``  the reasoner alone (the L0 single-agent baseline; one turn by default).

Turn structure. ``mode="sequential"`` (the default; AT-GRPO) sets ``turn_order =
["tool", "reasoner"]``: the rollout steps the tool first, and the reasoner's observation then
shows the tool's program and its output from the same turn. ``mode="simultaneous"``
(MAGRPO) has no ``turn_order``: both act in one ``step`` and see each other only from the
next turn on. From turn 2, every observation shows both agents' earlier attempts (the
tool's program, output and answer; the reasoner's answer), never whether they were right.
What an agent is shown of its teammate's work goes through the env's ``relay``
(``teamrl.envs.messages``: as written, unless the message ablation replaces it); the tool's
program is the unused part of its report (the run's output and answer follow it).

Rewards (ours; cf. the reference's math rewards):
    tool local      +1 if the program runs and its printed answer equals the gold answer,
                     0 if it runs with a wrong answer, -1 if there is no closed code block,
                     the run fails (non-zero exit, timeout, kill) or prints nothing
    reasoner local  1 if its answer equals the gold answer, else 0; the answer is its last
                     ``\\boxed{}`` (``require_boxed``, the default; False also accepts
                     "answer is X", "#### X" or the last number)
    team            1 if the reasoner's answer is correct, else 0
``Step.reward`` is the team reward and ``Step.local_rewards`` holds local terms. In
sequential mode the team reward is known only once the reasoner has acted, so the tool's
step is ``Step.pending`` (``reward=0.0``, its own local term): the AT-GRPO rollout scores
each tool candidate by finishing the turn on a copy, and pays it ``alpha * team + local`` as
in the reference (tool = own result + reasoner correct). The turn-closing step's
``local_rewards`` carry every agent's turn-local term (also in ``infos["turn_local_rewards"]``),
and ``infos["mixed_rewards"]`` holds ``alpha * team + local`` per agent.

Termination (``stop_on``): "agree" (default) ends the episode when the tool's and the
reasoner's answers agree, as in the reference workflow. It does not peek at the gold answer,
so multi-turn evaluation stays honest: stopping on correctness would let an episode end on
its first correct answer, an oracle early stop that inflates success. "correct" (stop when
the reasoner is right) and "either" are available for training. ``math_single`` "agrees"
when the reasoner repeats its previous turn's answer. An episode still running after
``max_turns`` turns is truncated. ``Step.success`` is whether the reasoner's latest
answer is correct.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from teamrl.envs.base import Step, Task, register_task
from teamrl.envs.messages import PASS_THROUGH, Message, Relay
from teamrl.errors import ConfigError
from teamrl.tasks.math.answers import extract_answer, extract_boxed
from teamrl.tasks.math.data import LOADERS, ArithmeticConfig, arithmetic_problems
from teamrl.tasks.math.equivalence import check_equivalence
from teamrl.tasks.options import option
from teamrl.tasks.run_program import run_program
from teamrl.text import clip, extract_code_block

TEAM_AGENTS = ("tool", "reasoner")

TOOL_ROLE = (
    "You are the programmer of a two-member math team. You solve each problem by writing a "
    "short, correct Python 3 program; whatever your program prints last is taken as your "
    "answer, so print only the final answer on the last line."
)
REASONER_ROLE = (
    "You are the mathematician of a two-member math team. You solve each problem with careful "
    "step-by-step reasoning, check your teammate's program output critically, and give your "
    "final answer as \\boxed{...}."
)
SOLO_ROLE = (
    "You are a careful mathematician. Solve the problem step by step and give your final "
    "answer as \\boxed{...}."
)


@dataclass(frozen=True)
class MathEnvConfig:
    """Behaviour of ``MathEnv``; every field is a task kwarg."""

    mode: str = option(
        "sequential", "'sequential' (tool then reasoner; AT-GRPO) or 'simultaneous' (MAGRPO)."
    )
    max_turns: int = option(4, "Turns before truncation.")
    stop_on: str = option(
        "agree", "End the episode on 'agree' (answers match), 'correct' or 'either'."
    )
    alpha: float = option(1.0, "Team weight in infos['mixed_rewards'] = alpha*team+local.")
    require_boxed: bool = option(
        True,
        "Reasoner answers only count inside \\boxed{}, as the prompts ask (False: "
        "also 'answer is X', '#### X' or the last number).",
    )
    feedback_chars: int = option(1500, "Longest program/output text shown back to agents.")
    limits: dict | None = option(
        None, "Keyword arguments of the sandbox's Limits for the tool's program."
    )

    def __post_init__(self) -> None:
        if self.mode not in ("sequential", "simultaneous"):
            raise ValueError(
                f"math.mode: expected 'sequential' or 'simultaneous', got {self.mode!r}"
            )
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int):
            raise ValueError(f"math.max_turns: expected an integer, got {self.max_turns!r}")
        if self.max_turns < 1:
            raise ValueError(f"math.max_turns: expected >= 1, got {self.max_turns}")
        if self.stop_on not in ("agree", "correct", "either"):
            raise ValueError(
                f"math.stop_on: expected 'agree', 'correct' or 'either', got {self.stop_on!r}"
            )
        if not (isinstance(self.alpha, (int, float)) and math.isfinite(self.alpha)):
            raise ValueError(f"math.alpha: expected a finite number, got {self.alpha!r}")
        if self.alpha < 0:
            raise ValueError(f"math.alpha: expected >= 0, got {self.alpha}")
        if self.feedback_chars < 100:
            raise ValueError(f"math.feedback_chars: expected >= 100, got {self.feedback_chars}")


@dataclass
class SandboxRunner:
    """Runs the tool's program in the sandbox (``teamrl.tasks.run_program``)."""

    limits: dict | None = None

    def __call__(self, code: str) -> Any:
        return run_program(code, self.limits or {})


def extract_code(completion: str) -> str | None:
    """The last closed ```` ```python ```` (or bare ```` ``` ````) block; None when there is
    none (an unclosed block, e.g. a truncated completion, does not count)."""
    return extract_code_block(completion, "last_closed")


def program_answer(stdout: str) -> str | None:
    """The answer a program printed: a ``\\boxed{}`` if any, else its last non-empty line
    (with an "answer is X" / "Answer: X" prefix removed)."""
    boxed = extract_boxed(stdout)
    if boxed is not None:
        return boxed
    lines = [line.strip() for line in (stdout or "").splitlines() if line.strip()]
    if not lines:
        return None
    last = lines[-1]
    prefix = re.match(r"(?:the\s+)?(?:final\s+)?answer\s*(?:is|:|=)\s*(.+)$", last, re.I)
    return prefix.group(1).strip() if prefix else last


def _clip(text: str, limit: int) -> str:
    """Keep both ends of a long text (a program's head and an output's tail both matter)."""
    return clip(text, limit, marker="\n... [{cut} characters cut] ...\n", keep="both")


class MathEnv:
    """One math problem, solved by ``agents`` (("tool", "reasoner") or ("reasoner",)).

    ``runner(code) -> ExecResult`` executes the tool's program (default: the sandbox); it
    is injected so that tests can use a fake. State is plain data, so ``copy.deepcopy``
    (what ``clone`` uses) gives an independent branch.
    """

    def __init__(
        self,
        config: MathEnvConfig | None = None,
        *,
        agents: tuple[str, ...] = TEAM_AGENTS,
        runner: Callable[[str], Any] | None = None,
    ) -> None:
        self.config = config or MathEnvConfig()
        if tuple(agents) not in (TEAM_AGENTS, ("reasoner",)):
            raise ValueError(
                f"math.agents: expected {TEAM_AGENTS} or ('reasoner',), got {tuple(agents)}"
            )
        self.agents = list(agents)
        if "tool" in self.agents and self.config.mode == "sequential":
            self.turn_order = ["tool", "reasoner"]
        self.runner = runner if runner is not None else SandboxRunner(self.config.limits)
        self.relay: Relay = PASS_THROUGH  # what an agent is shown of its teammate's work
        self._example: dict | None = None
        self._turns: list[dict] = []  # completed turns: {agent: record}
        self._pending: dict[str, dict] = {}  # records of the turn in progress
        self._done = False

    # ---- protocol ----------------------------------------------------------------------

    def reset(self, example: dict) -> dict[str, str]:
        """Start an episode on ``example`` (needs non-empty "question" and "answer")."""
        for key in ("question", "answer"):
            value = example.get(key) if isinstance(example, dict) else None
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"math example: field {key!r} must be a non-empty string")
        self._example = dict(example)
        self._turns, self._pending, self._done = [], {}, False
        return self._observations()

    def step(self, actions: dict[str, str]) -> Step:
        """Apply one agent's action (sequential) or every agent's action (simultaneous)."""
        if self._example is None:
            raise RuntimeError("math env: call reset() before step()")
        if self._done:
            raise RuntimeError("math env: the episode is over; call reset()")
        expected = self._expected_agents()
        if sorted(actions) != sorted(expected):
            raise ValueError(f"math.step: expected actions for {expected}, got {sorted(actions)}")

        local: dict[str, float] = {}
        components: dict[str, float] = {}
        for agent in expected:
            record = self._tool(actions[agent]) if agent == "tool" else self._reason(actions[agent])
            self._pending[agent] = record
            local[agent] = record["local_reward"]
            components.update({f"{agent}/{k}": v for k, v in record["components"].items()})

        if len(self._pending) < len(self.agents):  # sequential, mid-turn
            # pending: this tool candidate's team reward (is the reasoner right?) is not known
            # yet; the AT-GRPO rollout finishes the turn on a copy to score it.
            return Step(
                observations=self._observations(),
                reward=0.0,
                terminations={a: False for a in self.agents},
                truncations={a: False for a in self.agents},
                local_rewards=local,
                infos=self._infos(turn_complete=False),
                success=self._success(),
                pending=True,
                reward_components=components,
            )
        return self._close_turn(components)

    # ---- acting ------------------------------------------------------------------------

    def _tool(self, completion: str) -> dict:
        gold = self._example["answer"]
        code = extract_code(completion)
        record = {"code": code, "stdout": "", "stderr": "", "answer": None, "method": "empty"}
        if code is None:
            record["status"] = "no code block"
        else:
            result = self.runner(code)
            record["stdout"], record["stderr"] = result.stdout or "", result.stderr or ""
            if result.timed_out:
                record["status"] = "timed out"
            elif not result.ok:
                killed = getattr(result, "killed", None)
                reason = f"killed: {killed}" if killed else f"exit code {result.returncode}"
                record["status"] = f"failed ({reason})"
            else:
                record["answer"] = program_answer(record["stdout"])
                record["status"] = "ok" if record["answer"] is not None else "printed nothing"
        ran = record["answer"] is not None
        correct = False
        if ran:
            verdict = check_equivalence(record["answer"], gold)
            correct, record["method"] = verdict.equivalent, verdict.method
        record["correct"] = correct
        record["local_reward"] = (1.0 if correct else 0.0) if ran else -1.0
        record["components"] = {
            "local": record["local_reward"],
            "exec_ok": float(ran),
            "correct": float(correct),
        }
        return record

    def _reason(self, completion: str) -> dict:
        text = completion or ""
        answer = extract_boxed(text) if self.config.require_boxed else extract_answer(text)
        verdict = check_equivalence(answer, self._example["answer"])
        local = 1.0 if verdict.equivalent else 0.0
        return {
            "answer": answer,
            "correct": verdict.equivalent,
            "method": verdict.method,
            "local_reward": local,
            "components": {"local": local, "correct": local, "answered": float(answer is not None)},
        }

    # ---- turn bookkeeping --------------------------------------------------------------

    def _expected_agents(self) -> list[str]:
        order = getattr(self, "turn_order", None)
        if order:
            return [next(a for a in order if a not in self._pending)]
        return list(self.agents)

    def _agreement(self, turn: dict) -> bool:
        """Tool and reasoner answers match (team), or the reasoner repeats itself (solo)."""
        mine = turn["reasoner"]["answer"]
        if "tool" in turn:
            other = turn["tool"]["answer"]
        else:
            other = self._turns[-2]["reasoner"]["answer"] if len(self._turns) >= 2 else None
        if mine is None or other is None:
            return False
        return check_equivalence(other, mine, screen_gold=True).equivalent

    def _close_turn(self, components: dict[str, float]) -> Step:
        turn, self._pending = self._pending, {}
        self._turns.append(turn)
        team = 1.0 if turn["reasoner"]["correct"] else 0.0
        agree = self._agreement(turn)
        stop = {
            "agree": agree,
            "correct": team == 1.0,
            "either": agree or team == 1.0,
        }[self.config.stop_on]
        truncated = not stop and len(self._turns) >= self.config.max_turns
        self._done = stop or truncated
        components.update({"team": team, "agree": float(agree)})
        infos = self._infos(turn_complete=True)
        # Every agent's turn-local term, the tool's too: a lookahead that closes the turn for a
        # pending tool candidate reads the tool's local reward from this step.
        local = {a: r["local_reward"] for a, r in turn.items()}
        infos["turn_local_rewards"] = dict(local)
        infos["mixed_rewards"] = {a: self.config.alpha * team + r for a, r in local.items()}
        return Step(
            observations=self._observations(),
            reward=team,
            terminations={a: stop for a in self.agents},
            truncations={a: truncated for a in self.agents},
            local_rewards=local,
            infos=infos,
            success=self._success(),
            reward_components=components,
        )

    def _success(self) -> bool:
        """The reasoner's latest answer (of the last completed turn) is correct."""
        last_reasoner = self._turns[-1]["reasoner"] if self._turns else None
        return bool(last_reasoner and last_reasoner["correct"])

    def _infos(self, *, turn_complete: bool) -> dict:
        """Free-form extras of a step: the turn, the answers and how they were judged."""
        latest = self._pending if not turn_complete else self._turns[-1]
        return {
            "turn": len(self._turns) + (0 if turn_complete else 1),
            "turn_complete": turn_complete,
            "answers": {a: r["answer"] for a, r in latest.items()},
            "methods": {a: r["method"] for a, r in latest.items()},
            "tool_status": latest["tool"]["status"] if "tool" in latest else None,
        }

    # ---- observations ------------------------------------------------------------------

    def _observations(self) -> dict[str, str]:
        return {agent: self._prompt(agent) for agent in self.agents}

    def _tool_text(self, record: dict) -> tuple[str, str]:
        """The tool's report (its program, the run's status and output, its answer) and the
        report's program part ("" with no program)."""
        n = self.config.feedback_chars
        if record["code"] is None:
            return "The programmer gave no ```python code block.", ""
        output = record["stdout"].strip() or "(no output)"
        if record["stderr"].strip() and record["answer"] is None:
            output += "\nstderr:\n" + record["stderr"].strip()
        program = f"Program:\n```python\n{_clip(record['code'], n)}\n```\n"
        return (
            program + f"Run: {record['status']}. Output:\n```\n{_clip(output, n)}\n```\n"
            f"Program's answer: {record['answer'] if record['answer'] is not None else 'none'}"
        ), program

    def _shown(self, sender: str, receiver: str, turn: int, text: str, channel: str, unused=""):
        """What ``receiver`` is shown of ``sender``'s ``text``: its own work as it is, a
        teammate's through the relay (not once the episode is over: those prompts are never
        read, so they show no message)."""
        if sender == receiver or self._done:
            return text
        return self.relay.show(Message(sender, receiver, turn, text, channel, unused))

    def _history_text(self, receiver: str) -> str:
        lines = ["Earlier attempts (they may be wrong):"]
        for k, turn in enumerate(self._turns, start=1):
            lines.append(f"--- Turn {k} ---")
            if "tool" in turn:
                report, program = self._tool_text(turn["tool"])
                lines.append(self._shown("tool", receiver, k - 1, report, "history", program))
            answer = turn["reasoner"]["answer"]
            answer = answer if answer is not None else "none (no final answer)"
            lines.append(
                "Reasoner's answer: " + self._shown("reasoner", receiver, k - 1, answer, "history")
            )
        return "\n".join(lines)

    def _prompt(self, agent: str) -> str:
        parts = [f"Problem:\n{self._example['question']}"]
        if self._turns:
            parts.append(self._history_text(agent))
        if agent == "tool":
            parts.append(
                "Write a Python 3 program (standard library only) that solves the problem and "
                "prints the final answer on the last line of its output. Reply with one "
                "```python code block."
                if not self._turns
                else "Check the earlier attempts. Write a Python 3 program that prints the "
                "answer you now believe is right (fix any mistake you find) on its last line. "
                "Reply with one ```python code block."
            )
            return "\n\n".join(parts)
        if "tool" in self._pending:  # sequential: the tool already acted this turn
            report, program = self._tool_text(self._pending["tool"])
            shown = self._shown("tool", agent, len(self._turns), report, "report", program)
            parts.append("Your teammate's program for this turn (it may be wrong):\n" + shown)
        parts.append(
            "Solve the problem step by step and give the final answer as \\boxed{...}."
            if not self._turns
            else "Reconsider the problem in light of the earlier attempts, keep or correct "
            "your answer, and give the final answer as \\boxed{...}."
        )
        return "\n\n".join(parts)


# --------------------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------------------

BENCHMARKS = ("aime2024", "aime2025", "olympiadbench")
SOURCES = ("arithmetic", "gsm8k", *BENCHMARKS)


def _cap(n: int, limit: int | None) -> int:
    return n if limit is None else min(n, limit)


def load_math_splits(
    source: str = "arithmetic",
    *,
    limit: int | None = None,
    dataset_id: str | None = None,
    name: str | None = None,
    train_source: str = "gsm8k",
    train_dataset_id: str | None = None,
    eval_size: int = 200,
    seed: int = 0,
    n_train: int = 5000,
    n_eval: int = 200,
    n_test: int = 500,
    arithmetic: dict | None = None,
) -> tuple[list[dict], list[dict], list[dict]]:
    """(train, eval, test) rows for ``source``.

    arithmetic     generated splits of ``n_train``/``n_eval``/``n_test`` problems
                   (``arithmetic`` holds ``ArithmeticConfig`` kwargs).
    gsm8k          train minus its last ``eval_size`` rows / those rows / the test split.
    benchmarks     test = the benchmark (AIME 2024/2025, OlympiadBench have one split);
                   train and eval come from ``train_source`` (gsm8k or arithmetic).
    ``limit`` caps every split; ``dataset_id``/``name`` override the upstream id/config.
    """
    if source not in SOURCES:
        raise ConfigError(f"env.kwargs.source: expected one of {SOURCES}, got {source!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(f"env.kwargs.limit: expected None or an integer >= 0, got {limit!r}")
    upstream: dict[str, Any] = {"limit": limit}
    if dataset_id is not None:
        upstream["dataset_id"] = dataset_id
    if name is not None:
        upstream["name"] = name
    if source == "arithmetic":
        sizes = {"train": n_train, "eval": n_eval, "test": n_test}
        return _arithmetic_splits(arithmetic, limit, seed, sizes)
    if source == "gsm8k":
        train, eval_ = _gsm8k_train_eval(upstream, eval_size)
        return train, eval_, LOADERS["gsm8k"]("test", **upstream)
    # a benchmark: test rows from it, train/eval rows from train_source
    if train_source == "arithmetic":
        train, eval_ = _arithmetic_splits(
            arithmetic, limit, seed, {"train": n_train, "eval": n_eval}
        )
    elif train_source == "gsm8k":
        gsm8k = {"limit": limit} | ({"dataset_id": train_dataset_id} if train_dataset_id else {})
        train, eval_ = _gsm8k_train_eval(gsm8k, eval_size)
    else:
        raise ConfigError(
            f"env.kwargs.train_source: expected 'arithmetic' or 'gsm8k', got {train_source!r}"
        )
    return train, eval_, LOADERS[source]("train", **upstream)


def _arithmetic_splits(
    arithmetic: dict | None, limit: int | None, seed: int, sizes: dict[str, int]
) -> tuple[list[dict], ...]:
    """Generated arithmetic problems, one list per split of ``sizes`` ({split: n}), in order."""
    cfg = ArithmeticConfig(**(arithmetic or {}))
    return tuple(
        arithmetic_problems(split, _cap(n, limit), seed, config=cfg) for split, n in sizes.items()
    )


def _gsm8k_train_eval(upstream: dict, eval_size: int) -> tuple[list[dict], list[dict]]:
    """GSM8K's train split cut into (train, eval): the last ``eval_size`` rows are held out,
    since GSM8K has no validation split and its test split is for reports only."""
    rows = LOADERS["gsm8k"]("train", **upstream)
    if isinstance(eval_size, bool) or not isinstance(eval_size, int) or eval_size < 0:
        raise ValueError(f"math.eval_size: expected an integer >= 0, got {eval_size!r}")
    cut = len(rows) - eval_size
    if cut <= 0:
        raise ValueError(
            f"math.eval_size: {eval_size} leaves no training rows (gsm8k train has {len(rows)})"
        )
    return rows[:cut], rows[cut:]


_DATA_KEYS = (
    "limit dataset_id name train_source train_dataset_id eval_size seed n_train n_eval n_test "
    "arithmetic"
).split()


def _build(agents: tuple[str, ...], roles: dict[str, str], kwargs: dict) -> Task:
    runner = kwargs.pop("runner", None)
    source = kwargs.pop("source", "arithmetic")
    data = {k: kwargs.pop(k) for k in _DATA_KEYS if k in kwargs}
    config = MathEnvConfig(**kwargs)  # unknown keys raise TypeError -> make_task's ValueError
    train, eval_, test = load_math_splits(source, **data)

    def make_env() -> MathEnv:
        return MathEnv(config, agents=agents, runner=runner)

    return Task(
        name="math" if len(agents) == 2 else "math_single",
        make_env=make_env,
        train=train,
        eval=eval_,
        test=test,
        agents=roles,
        description=f"math ({source}), agents: {', '.join(agents)}",
    )


@register_task(
    "math",
    "Two-agent math (tool writes Python, reasoner answers in \\boxed{}); "
    "source=arithmetic|gsm8k|aime2024|aime2025|olympiadbench",
)
def build_math_task(max_turns: int = 4, **kwargs: Any) -> Task:
    """Two-agent math task. Kwargs: ``source`` and the data kwargs of ``load_math_splits``,
    every ``MathEnvConfig`` field, and ``runner`` (defaults to the sandbox)."""
    roles = {"tool": TOOL_ROLE, "reasoner": REASONER_ROLE}
    return _build(TEAM_AGENTS, roles, {**kwargs, "max_turns": max_turns})


@register_task(
    "math_single",
    "Single reasoner on math (L0 baseline, one turn by default); same sources as 'math'",
)
def build_math_single_task(max_turns: int = 1, **kwargs: Any) -> Task:
    """The reasoner alone; ``max_turns`` defaults to 1 (kwargs as ``math``, minus the tool)."""
    return _build(("reasoner",), {"reasoner": SOLO_ROLE}, {**kwargs, "max_turns": max_turns})
