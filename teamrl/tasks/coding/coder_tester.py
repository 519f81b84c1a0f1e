"""The ``code_contest`` task: a coder and a unit tester on stdin/stdout problems (AT-GRPO).

``mode="sequential"`` (AT-GRPO, the default) has ``turn_order =
["coder", "tester"]``. The coder goes first so the tester can aim its cases at the program
actually committed this turn (tests that expose *this* program's bugs are what the tester
is paid for); the coder then sees those cases and its program's outputs in the next turn.
``mode="simultaneous"`` (MAGRPO) has no ``turn_order``: one ``step`` carries both actions.
In the first turn the tester writes cases from the problem alone (there is no code yet);
later it sees the previous turn's program and how its cases fared on it. The turn is then
scored jointly, with the same definitions, on the program and cases of this turn.
Rewards:

    team   = coder's pass ratio on the ground-truth tests (the first ``max_tests``)
    coder  = the same pass ratio (local)
    tester = correctness + discrimination_weight * discrimination (local), where
             correctness    = fraction of its cases whose expected output is right
                              (judged by ``teamrl.tasks.coding.stdio.judge_tester``),
             discrimination = 1 if a correct case fails on the coder's program, else 0.

The judge of correctness is the dataset's reference solution when the row has one; else
the first program of this episode that passed *every* ground-truth test (strong evidence
that it is right, recorded as ``judge="episode_program"``); else a case is correct only if
its input is a ground-truth input with the same output (other inputs cannot be verified
and earn nothing). The episode terminates on agreement (the coder's program passes every
case the tester wrote) and is truncated after ``max_turns`` turns. ``Step.success``,
on every step that runs a program (the coder's step and the tester's, or the joint step),
says whether the coder's latest program passes *all* ground-truth tests, whatever the
agents agreed on; so an episode cut short by the trainer still has an outcome.

What an agent is shown of its teammate's work goes through the env's ``relay``
(``teamrl.envs.messages``: as written, unless the message ablation replaces it): the coder's
program as the tester is shown it, the tester's cases (with the coder's program's outputs on
them) as the coder is shown them.

Data loads when a task is built, never at import.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from teamrl.envs.base import Step, Task, register_task
from teamrl.envs.messages import PASS_THROUGH, Message, Relay
from teamrl.errors import ConfigError
from teamrl.tasks.coding.code_text import extract_code
from teamrl.tasks.coding.contest_data import STDIO_SOURCES, load_livecodebench, stdio_task_splits
from teamrl.tasks.coding.stdio import (
    TEST_CASE_FORMAT,
    StdioResult,
    judge_tester,
    parse_test_cases,
    run_stdio,
    stdio_pass_ratio,
)
from teamrl.tasks.options import option
from teamrl.tasks.rows import limit_rows
from teamrl.tasks.run_program import Runner
from teamrl.text import clip

# --------------------------------------------------------------------------------------
# AT-GRPO: coder + unit tester on stdin/stdout problems, sequential
# --------------------------------------------------------------------------------------

CODER_TESTER_ROLES = {
    "coder": "You are a competitive programmer. You write correct, efficient Python 3 programs "
    "that read standard input and write standard output.",
    "tester": "You are a meticulous software tester. You write small test cases with exactly "
    "right expected outputs that reveal bugs in programs.",
}


CODE_CONTEST_MODES = ("sequential", "simultaneous")


@dataclass
class CodeContestConfig:
    """Knobs of the coder + tester environment."""

    mode: str = option(
        "sequential", "'sequential' (coder then tester; AT-GRPO) or 'simultaneous' (MAGRPO)."
    )
    max_turns: int = option(4, "Turns (coder then tester) at most.")
    max_tests: int = option(4, "Ground-truth tests used for the rewards (the first N).")
    max_tester_tests: int = option(4, "Test cases read from one tester completion (the first N).")
    timeout_s: float = option(4.0, "Wall-clock limit of one run.")
    discrimination_weight: float = option(1.0, "Weight of the tester's discrimination term.")

    def __post_init__(self) -> None:
        if self.mode not in CODE_CONTEST_MODES:
            raise ValueError(
                f"code_contest.mode: expected one of {CODE_CONTEST_MODES}, got {self.mode!r}"
            )
        for name in ("max_turns", "max_tests", "max_tester_tests"):
            if getattr(self, name) < 1:
                raise ValueError(f"code_contest.{name}: expected >= 1, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"code_contest.timeout_s: expected > 0, got {self.timeout_s}")


def _shown(text: str) -> str:
    """A case or an output as shown in a prompt: at most 400 characters, never blank."""
    return clip(text, 400, marker="...(cut)").rstrip("\n") or "(empty)"


def _case_report(cases: list[dict], runs: list[StdioResult], who: str) -> str:
    lines = []
    for k, (case, run) in enumerate(zip(cases, runs), 1):
        verdict = "passed" if run.matches(case["output"]) else "FAILED"
        got = _shown(run.output) if run.ok else f"(error: {run.error})"
        lines.append(
            f"Test {k} ({verdict}):\ninput:\n{_shown(case['input'])}\n"
            f"expected output:\n{_shown(case['output'])}\n{who} output:\n{got}"
        )
    return "\n\n".join(lines)


@dataclass
class CoderTesterEnv:
    """Coder and tester on one stdin/stdout problem (see the module docstring).

    ``reset(example)`` needs ``question`` and ``tests`` (a row of ``teamrl.tasks.coding.contest_data``);
    ``solution`` (a reference program or None) is optional. In ``sequential`` mode ``step``
    takes one agent's action at a time, in ``turn_order``; in ``simultaneous`` mode (no
    ``turn_order``) it takes both at once.
    """

    config: CodeContestConfig = field(default_factory=CodeContestConfig)
    runner: Runner | None = None
    agents: list[str] = field(default_factory=lambda: ["coder", "tester"])
    turn_order: list[str] | None = field(init=False)
    _example: dict | None = field(default=None, repr=False)
    _turn: int = field(default=0, repr=False)
    _next: str = field(default="coder", repr=False)
    _program: str = field(default="", repr=False)
    _pass_ratio: float = field(default=0.0, repr=False)
    _cases: list[dict] = field(default_factory=list, repr=False)
    _case_runs: list[StdioResult] = field(default_factory=list, repr=False)
    _full_pass: dict[str, bool] = field(default_factory=dict, repr=False)  # program -> all GT
    _episode_judge: str | None = field(default=None, repr=False)
    _program_turn: int = field(default=0, repr=False)  # the turn the program was written in
    _cases_turn: int = field(default=0, repr=False)  # the turn the cases were written in
    _done: bool = field(default=False, repr=False)
    relay: Relay = field(default=PASS_THROUGH, repr=False)  # what each sees of the other's work

    def __post_init__(self) -> None:
        # The rollout reads turn_order: present means sequential (AT-GRPO), None simultaneous.
        sequential = self.config.mode == "sequential"
        self.turn_order = ["coder", "tester"] if sequential else None

    def reset(self, example: dict) -> dict[str, str]:
        question = example.get("question") if isinstance(example, dict) else None
        if not isinstance(question, str) or not question.strip():
            raise ValueError(
                f"code_contest example: field 'question' must be a non-empty string, "
                f"got {question!r:.80}"
            )
        tests = example.get("tests")
        if not isinstance(tests, list) or not tests:
            raise ValueError("code_contest example: field 'tests' must be a non-empty list")
        self._example = example
        self._turn, self._next = 0, "coder"
        self._program, self._pass_ratio = "", 0.0
        self._cases, self._case_runs = [], []
        self._full_pass, self._episode_judge = {}, None
        self._program_turn = self._cases_turn = 0
        self._done = False
        return self._observations()

    # -- prompts ----------------------------------------------------------------------

    def _observations(self) -> dict[str, str]:
        return {"coder": self._coder_prompt(), "tester": self._tester_prompt()}

    def _problem(self) -> str:
        return f"Problem:\n{self._example['question'].strip()}"

    def _coder_prompt(self) -> str:
        ask = (
            "Write a complete Python 3 program that solves the problem: read the input from "
            "standard input and print the answer to standard output. Put the whole program in "
            "one ```python code block."
        )
        if not self._program:
            return f"{self._problem()}\n\n{ask}"
        tests = "Your teammate wrote no readable test cases."
        if self._cases:
            report = _case_report(self._cases, self._case_runs, "your program's")
            report = self._shown("tester", "coder", self._cases_turn, report, "cases")
            tests = f"A teammate's test cases and what your program did:\n\n{report}"
        return (
            f"{self._problem()}\n\nYour previous program:\n```python\n{self._program}\n```\n\n"
            f"{tests}\n\nThe teammate's expected outputs may be wrong. If your program is "
            f"correct, keep it; otherwise fix it. {ask}"
        )

    def _tester_prompt(self) -> str:
        k = self.config.max_tester_tests
        simultaneous = self.turn_order is None
        if not self._program:
            if not simultaneous:  # sequential: the tester acts after the coder's program
                return f"{self._problem()}\n\nA teammate is writing a program for this problem."
            return (
                f"{self._problem()}\n\nA teammate is writing a program for this problem right "
                f"now. Write up to {k} test cases for it. Each expected output must be exactly "
                "what a correct program prints for that input. Prefer small inputs and the "
                f"edge cases a program is likely to get wrong.\n{TEST_CASE_FORMAT}"
            )
        which = (
            "The teammate's program from the last turn (it is revising it now)"
            if simultaneous
            else "The teammate's current program"
        )
        program = self._shown("coder", "tester", self._program_turn, self._program, "program")
        parts = [self._problem(), f"{which}:\n```python\n{program}\n```"]
        if self._cases:
            report = _case_report(self._cases, self._case_runs, "program")
            parts.append(f"Your previous test cases, run on the teammate's program:\n\n{report}")
        parts.append(
            f"Write up to {k} test cases for this problem. Each expected output must be exactly "
            "what a correct program prints for that input. Prefer small inputs that expose "
            f"mistakes in the teammate's program.\n{TEST_CASE_FORMAT}"
        )
        return "\n\n".join(parts)

    def _shown(self, sender: str, receiver: str, turn: int, text: str, channel: str) -> str:
        """``text``, ``sender``'s work, as the relay shows it to ``receiver`` (not once the
        episode is over: those prompts are never read, so they show no message)."""
        if self._done:
            return text
        return self.relay.show(Message(sender, receiver, turn, text, channel))

    # -- stepping ---------------------------------------------------------------------

    def step(self, actions: dict[str, str]) -> Step:
        if self._example is None:
            raise RuntimeError("CoderTesterEnv.step: call reset(example) first")
        if self.turn_order is None:
            if sorted(actions) != sorted(self.agents):
                raise ValueError(
                    f"CoderTesterEnv.step (simultaneous): expected actions for {self.agents}, "
                    f"got {sorted(actions)}"
                )
            return self._joint_step(actions["coder"], actions["tester"])
        if list(actions) != [self._next]:
            raise ValueError(
                f"CoderTesterEnv.step: expected an action from {self._next!r} only "
                f"(turn_order {self.turn_order}), got {sorted(actions)}"
            )
        if self._next == "coder":
            return self._coder_step(actions["coder"])
        return self._tester_step(actions["tester"])

    def _gt(self) -> list[dict]:
        return self._example["tests"]

    def _passes_all_gt(self, program: str) -> bool:
        """Every ground-truth test passes (cached per program: it is the costly check)."""
        if program not in self._full_pass:
            ratio, _ = stdio_pass_ratio(
                program, self._gt(), timeout_s=self.config.timeout_s, runner=self.runner
            )
            self._full_pass[program] = ratio == 1.0
        return self._full_pass[program]

    def _success(self) -> bool:
        """The latest program passes every ground-truth test (the first ``max_tests`` first,
        so a failing program never pays for the full run)."""
        return self._pass_ratio == 1.0 and self._passes_all_gt(self._program)

    def _run_program(self, text: str) -> float:
        """Commit the coder's program; its pass ratio on the first ``max_tests`` GT tests."""
        cfg = self.config
        self._program, self._program_turn = extract_code(text), self._turn
        ratio, _ = stdio_pass_ratio(
            self._program, self._gt()[: cfg.max_tests], timeout_s=cfg.timeout_s, runner=self.runner
        )
        self._pass_ratio = ratio
        if ratio == 1.0 and len(self._gt()) <= cfg.max_tests:
            self._full_pass[self._program] = True
        return ratio

    def _judge_cases(self, text: str) -> tuple[float, dict[str, Any], str]:
        """Judge the tester's cases on the committed program; (local reward, components,
        judge kind). The cases and the program's outputs on them are kept for the prompts."""
        cfg = self.config
        cases = parse_test_cases(text, cfg.max_tester_tests)
        reference, judge_kind = self._judge_reference()
        verdict = judge_tester(
            cases,
            program=self._program,
            reference=reference,
            ground_truth=self._gt(),
            timeout_s=cfg.timeout_s,
            runner=self.runner,
        )
        self._cases, self._case_runs = list(cases), verdict.program_outputs
        self._cases_turn = self._turn
        local = verdict.correctness + cfg.discrimination_weight * verdict.discrimination
        components = {
            "coder_pass_ratio": self._pass_ratio,
            "tester_correctness": verdict.correctness,
            "tester_discrimination": verdict.discrimination,
            "tester_cases": float(len(cases)),
            "agreement": float(verdict.agreement),
        }
        return local, components, judge_kind

    def _coder_step(self, text: str) -> Step:
        ratio = self._run_program(text)
        if self._cases:  # the tester's last cases, re-run so both prompts show this program
            runs = [(self._program, c["input"]) for c in self._cases]
            self._case_runs = run_stdio(runs, timeout_s=self.config.timeout_s, runner=self.runner)
        self._next = "tester"
        return Step(
            observations=self._observations(),
            reward=ratio,
            terminations={a: False for a in self.agents},
            truncations={a: False for a in self.agents},
            local_rewards={"coder": ratio},
            infos={"turn": self._turn},
            success=self._success(),
            reward_components={"coder_pass_ratio": ratio},
        )

    def _judge_reference(self) -> tuple[str | None, str]:
        solution = self._example.get("solution")
        if isinstance(solution, str) and solution.strip():
            return solution, "reference"
        # No reference: the first program of the episode that passed every ground-truth test.
        if self._episode_judge is None and self._success():
            self._episode_judge = self._program
        if self._episode_judge is not None:
            return self._episode_judge, "episode_program"
        return None, "ground_truth_lookup"

    def _tester_step(self, text: str) -> Step:
        local, components, judge_kind = self._judge_cases(text)
        self._next = "coder"
        return self._close_turn(components, judge_kind, {"tester": local})

    def _joint_step(self, coder_text: str, tester_text: str) -> Step:
        ratio = self._run_program(coder_text)
        local, components, judge_kind = self._judge_cases(tester_text)
        return self._close_turn(components, judge_kind, {"coder": ratio, "tester": local})

    def _close_turn(
        self, components: dict[str, Any], judge_kind: str, local: dict[str, float]
    ) -> Step:
        self._turn += 1
        agreed = components["agreement"] == 1.0
        out_of_turns = self._turn >= self.config.max_turns and not agreed
        self._done = agreed or out_of_turns
        return Step(
            observations=self._observations(),
            reward=self._pass_ratio,
            terminations={a: agreed for a in self.agents},
            truncations={a: out_of_turns for a in self.agents},
            local_rewards=local,
            infos={"turn": self._turn, "judge": judge_kind},
            success=self._success(),
            reward_components=components,
        )


CODE_CONTEST_SOURCES = STDIO_SOURCES


@register_task(
    "code_contest",
    "Coder + unit tester on stdin/stdout problems: mode 'sequential' (AT-GRPO, coder -> "
    "tester) or 'simultaneous' (MAGRPO, one joint step). kwargs: source "
    "('apps'|'codecontests'|'livecodebench'), mode, dataset_id, limit, max_turns, max_tests, "
    "max_tester_tests, timeout_s, test_source, test_dataset_id, lcb_version, lcb_cutoff, "
    "discrimination_weight.",
)
def code_contest_task(
    source: str = "apps",
    dataset_id: str | None = None,
    limit: int | None = None,
    max_turns: int = 4,
    max_tests: int = 4,
    max_tester_tests: int = 4,
    timeout_s: float = 4.0,
    discrimination_weight: float = 1.0,
    mode: str = "sequential",
    test_source: str | None = None,
    test_dataset_id: str | None = None,
    lcb_version: str = "release_v6",
    lcb_cutoff: str = "2024-08-01",
    skip_malformed: bool = False,
    runner: Runner | None = None,
) -> Task:
    """Build ``code_contest``.

    ``source`` gives the train and eval rows; ``test_source`` (default: ``source``) the test
    rows, e.g. train on CodeContests and test on LiveCodeBench. ``limit`` caps each split
    (and only that many rows are normalised). ``lcb_cutoff`` (ISO date) splits LiveCodeBench
    into train (before) and test (on/after); as a ``test_source`` for another ``source`` all
    of its problems are test problems. Splits: ``teamrl.tasks.coding.contest_data.stdio_task_splits``.
    """
    given = locals()
    cfg = CodeContestConfig(**{f.name: given[f.name] for f in fields(CodeContestConfig)})
    for name, value in (("source", source), ("test_source", test_source or source)):
        if value not in CODE_CONTEST_SOURCES:
            raise ConfigError(
                f"env.kwargs.{name} (code_contest.{name}): expected one of "
                f"{CODE_CONTEST_SOURCES}, got {value!r}"
            )
    opts = {
        "limit": limit,
        "lcb_version": lcb_version,
        "lcb_cutoff": lcb_cutoff,
        "skip_malformed": skip_malformed,
    }
    separate_test = test_source is not None and (test_source, test_dataset_id) != (
        source,
        dataset_id,
    )
    wanted = ("train", "eval") if separate_test else ("train", "eval", "test")
    splits = stdio_task_splits(source, dataset_id, splits=wanted, **opts)
    if not separate_test:
        test = splits["test"]
    elif test_source == "livecodebench" and source != "livecodebench":
        kw: dict[str, Any] = {"skip_malformed": skip_malformed, "version": lcb_version}
        if test_dataset_id is not None:
            kw["dataset_id"] = test_dataset_id
        test = load_livecodebench(limit=limit, **kw)
    else:
        test = stdio_task_splits(test_source, test_dataset_id, splits=("test",), **opts)["test"]

    def make_env() -> CoderTesterEnv:
        return CoderTesterEnv(cfg, runner)

    return Task(
        name="code_contest",
        make_env=make_env,
        train=limit_rows(splits["train"], limit),
        eval=limit_rows(splits["eval"], limit),
        test=limit_rows(test, limit),
        agents=dict(CODER_TESTER_ROLES),
        description=f"code_contest ({source}, {mode}): a coder and a unit tester, stdin/stdout.",
    )
