"""MAGRPO's leveled reward for the function tasks (helper writes ``aux``, main writes the
entry point), max 4.0:

    L1 definitions  +0.4 if ``aux`` is defined with a ``return``
                    +0.6 if the entry point is defined with a ``return``; else stop
    L2 syntax       prompt context + imports + aux + main parse with ``ast``: +0.5; else stop
    L3 tests        +1.0 * (passed units / units) of the ``check(candidate)`` tests
    cooperation     only if >= 1 unit passes and ``aux`` exists, and main calls ``aux``:
                    +0.5, +1.0 more if main is not a thin wrapper
                    (``return aux(..)`` or ``r = aux(..); return r``),
                    -0.5 if some ``aux(..)`` call's result is discarded

These are the formulas of LLM_Collab_Code_Generation, with three fixes: calls are found with
``ast`` (the reference's regex for discarded calls never matched, so its -0.5 was dead),
tests run in a sandboxed subprocess (the reference ``exec``s them in the trainer) and are
judged outside the solution's reach (see ``teamrl.tasks.coding.harness``), and the
prompt's own definitions (helpers, constants) are part of the program, so the tests that call
them (HumanEval/32, 38, 50) can pass at all.

Only ``aux`` is taken from the helper's completion and only the entry point from the main
agent's (plus the import lines of both), so neither agent can supply the other's function.

Nothing here executes model code in this process. Programs go through a *runner*,
``runner(codes, stdins, timeout_s) -> list[ExecResult]``, whose default is the process
sandbox (``teamrl.tasks.run_program``). Tests inject a fake runner. The test units and
their harness are in ``teamrl.tasks.coding.harness``.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from teamrl.tasks.coding.code_text import FunctionCode, find_function, find_imports, prompt_context
from teamrl.tasks.coding.harness import UnitResult, build_test_program, unit_results
from teamrl.tasks.options import option
from teamrl.tasks.run_program import Runner, run_programs

AUX_NAME = "aux"


@dataclass
class LeveledRewardConfig:
    """Knobs of the leveled aux/main code reward."""

    reward_shift: float = option(
        0.0, "Added to the 0..4 score to give the reward (reference configs: -4)."
    )
    per_test_timeout_s: float = option(3.0, "Time limit of one test unit (SIGALRM in the sandbox).")
    max_timeouts: int = option(3, "After this many unit timeouts the rest are not run.")
    program_timeout_s: float = option(20.0, "Wall-clock limit of the whole test program.")

    def __post_init__(self) -> None:
        if self.per_test_timeout_s <= 0 or self.program_timeout_s <= 0:
            raise ValueError(
                "code reward: timeouts must be > 0, got "
                f"per_test_timeout_s={self.per_test_timeout_s}, "
                f"program_timeout_s={self.program_timeout_s}"
            )
        if self.max_timeouts < 1:
            raise ValueError(f"code reward: max_timeouts must be >= 1, got {self.max_timeouts}")


@dataclass
class AuxMainJob:
    """One joint action to score: the two completions and the problem they answer."""

    helper: str
    main: str
    prompt: str
    test: str
    entry_point: str


@dataclass
class LeveledReward:
    """The score of one joint action, level by level, with diagnostics for feedback."""

    definitions: float = 0.0
    syntax: float = 0.0
    tests: float = 0.0
    cooperation: float = 0.0
    shift: float = 0.0
    stopped_at: str | None = None  # "definitions" or "syntax" when scoring stopped early
    aux: FunctionCode | None = None
    main: FunctionCode | None = None
    syntax_error: dict | None = None  # {"agent", "message", "line", "col", "text"}
    units: list[UnitResult] = field(default_factory=list)
    run_error: str = ""
    aux_called: bool = False
    thin_wrapper: bool = False
    aux_result_discarded: bool = False

    @property
    def score(self) -> float:
        """The unshifted score, 0..4."""
        return self.definitions + self.syntax + self.tests + self.cooperation

    @property
    def reward(self) -> float:
        return self.score + self.shift

    @property
    def passed(self) -> int:
        return sum(u.passed for u in self.units)

    @property
    def pass_rate(self) -> float:
        return self.passed / len(self.units) if self.units else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.units) and self.passed == len(self.units)

    def components(self) -> dict[str, float]:
        """Floats for ``Step.reward_components``."""
        names = ("definitions", "syntax", "tests", "cooperation", "score", "pass_rate")
        return {name: getattr(self, name) for name in names}


def _calls_to(node: ast.AST, name: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
    ]


def _is_aux_call(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == AUX_NAME
    )


def is_thin_wrapper(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """True if the body (docstring and ``pass`` aside) is ``return aux(..)`` or
    ``r = aux(..); return r``."""
    body = [
        s
        for s in fn.body
        if not isinstance(s, ast.Pass)
        and not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    if len(body) == 1 and isinstance(body[0], ast.Return):
        return _is_aux_call(body[0].value)
    if len(body) == 2 and isinstance(body[1], ast.Return) and isinstance(body[1].value, ast.Name):
        first, name = body[0], body[1].value.id
        if isinstance(first, ast.Assign) and len(first.targets) == 1:
            target = first.targets[0]
        elif isinstance(first, ast.AnnAssign):
            target = first.target
        else:
            return False
        return isinstance(target, ast.Name) and target.id == name and _is_aux_call(first.value)
    return False


def aux_result_discarded(fn: ast.AST) -> bool:
    """True if some ``aux(..)`` call is a bare statement, so its result is thrown away."""
    return any(isinstance(n, ast.Expr) and _is_aux_call(n.value) for n in ast.walk(fn))


def _syntax_error(source: str, agent: str) -> dict | None:
    try:
        ast.parse(source)
    except SyntaxError as err:
        return {
            "agent": agent,
            "message": err.msg,
            "line": err.lineno or 0,
            "col": err.offset or 0,
            "text": (err.text or "").rstrip("\n"),
        }
    return None


def _assemble(job: AuxMainJob, aux: FunctionCode | None, main: FunctionCode) -> str:
    imports = []
    for line in find_imports(job.helper) + find_imports(job.main):
        if line not in imports:
            imports.append(line)
    parts = [prompt_context(job.prompt, job.entry_point), "\n".join(imports)]
    parts += [aux.source if aux else "", main.source]
    return "\n\n".join(p for p in parts if p.strip()) + "\n"


def leveled_rewards(
    jobs: Sequence[AuxMainJob],
    *,
    config: LeveledRewardConfig | None = None,
    runner: Runner | None = None,
) -> list[LeveledReward]:
    """Score many joint actions; every test program runs in one batched runner call."""
    cfg = config or LeveledRewardConfig()
    out: list[LeveledReward] = []
    pending: list[tuple[LeveledReward, AuxMainJob, str]] = []  # jobs that reach L3
    for job in jobs:
        r = LeveledReward(shift=cfg.reward_shift)
        out.append(r)
        # L1: definitions. aux is optional; a main without a return stops the scoring.
        r.aux = find_function(job.helper, AUX_NAME)
        r.main = find_function(job.main, job.entry_point)
        if r.aux is not None and r.aux.has_return:
            r.definitions += 0.4
        if r.main is None or not r.main.has_return:
            r.stopped_at = "definitions"
            continue
        r.definitions += 0.6
        # L2: syntax of the assembled program; blame the first part that fails on its own.
        code = _assemble(job, r.aux, r.main)
        if _syntax_error(code, "program") is not None:
            r.syntax_error = (
                (r.aux and _syntax_error(r.aux.source, "helper"))
                or _syntax_error(r.main.source, "main")
                or _syntax_error(code, "program")
            )
            r.stopped_at = "syntax"
            continue
        r.syntax += 0.5
        pending.append((r, job, code))

    # L3: run the test units (the verdicts come back on the report channel).
    programs = []
    for _, job, code in pending:
        programs.append(
            build_test_program(
                code,
                job.test,
                job.entry_point,
                context=prompt_context(job.prompt, job.entry_point),
                per_test_timeout_s=cfg.per_test_timeout_s,
                max_timeouts=cfg.max_timeouts,
            )
        )
    results = run_programs(
        [p for p, _, _ in programs],
        [s for _, s, _ in programs],
        cfg.program_timeout_s,
        runner,
        report=True,
    )
    for (r, _, _), (_, _, sources), result in zip(pending, programs, results):
        r.units, r.run_error = unit_results(result, sources)
        r.tests = 1.0 * r.pass_rate
        # Cooperation bonus.
        main_node = ast.parse(r.main.source).body[0]
        r.aux_called = bool(_calls_to(main_node, AUX_NAME))
        r.thin_wrapper = r.aux_called and is_thin_wrapper(main_node)
        r.aux_result_discarded = r.aux_called and aux_result_discarded(main_node)
        if r.passed >= 1 and r.aux is not None and r.aux_called:
            r.cooperation += 0.5
            if not r.thin_wrapper:
                r.cooperation += 1.0
            if r.aux_result_discarded:
                r.cooperation -= 0.5
    return out


def leveled_reward(
    helper: str,
    main: str,
    *,
    prompt: str,
    test: str,
    entry_point: str,
    config: LeveledRewardConfig | None = None,
    runner: Runner | None = None,
) -> LeveledReward:
    """Score one joint action (the helper's ``aux`` and the main agent's entry point)."""
    job = AuxMainJob(helper, main, prompt, test, entry_point)
    return leveled_rewards([job], config=config, runner=runner)[0]
