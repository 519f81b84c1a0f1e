"""Rewards for the coding tasks: MAGRPO's leveled aux/main reward and stdin/stdout judging.

Nothing here executes model code in this process. Programs go through a *runner*,
``runner(codes, stdins, timeout_s) -> list[ExecResult]``, whose default is the process
sandbox (``teamrl.sandbox``, imported lazily). Tests inject a fake runner.

**MAGRPO coding (helper writes ``aux``, main writes the entry point), max 4.0:**

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
tests run in a sandboxed subprocess (the reference ``exec``s them in the trainer), and the
prompt's own definitions (helpers, constants) are part of the program, so the tests that call
them (HumanEval/32, 38, 50) can pass at all.

Only ``aux`` is taken from the helper's completion and only the entry point from the main
agent's (plus the import lines of both), so neither agent can supply the other's function.

A *test unit* is one top-level statement of ``check``'s body that contains an ``assert``
(a loop of asserts is one unit); ``assert True`` lines are not units, since a free pass would
unlock the cooperation bonus for code that passes nothing real. One program runs
every unit under its own ``SIGALRM`` time limit, reports each result on a private marker line,
and stops after ``max_timeouts`` timeouts. The harness protects against accidents, not a
determined adversary: code in the same process can always forge its own report.

**Stdin/stdout judging (AT-GRPO coding):** outputs match when they are equal after trailing
whitespace is removed from every line and trailing blank lines are dropped.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import math
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

Runner = Callable[[Sequence[str], Sequence[str], float], list[Any]]
"""``runner(codes, stdins, timeout_s) -> list[ExecResult]``, one result per code, in order."""

AUX_NAME = "aux"

# --------------------------------------------------------------------------------------
# Running code
# --------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _pool() -> Any:
    from teamrl.sandbox import SandboxPool

    return SandboxPool()


def sandbox_runner(codes: Sequence[str], stdins: Sequence[str], timeout_s: float) -> list[Any]:
    """The default runner: every program in the shared ``SandboxPool`` with a wall-clock limit."""
    from teamrl.sandbox import Limits

    # The CPU limit is set no lower than the wall clock, so the wall clock is what binds.
    limits = Limits(wall_seconds=float(timeout_s), cpu_seconds=max(1, math.ceil(timeout_s)))
    return _pool().map(list(codes), stdins=list(stdins), limits=limits)


def _run(runner: Runner | None, codes: list[str], stdins: list[str], timeout_s: float) -> list:
    if not codes:
        return []
    results = list((runner or sandbox_runner)(codes, stdins, timeout_s))
    if len(results) != len(codes):
        raise RuntimeError(f"runner returned {len(results)} results for {len(codes)} programs")
    return results


def _failure_text(result: Any) -> str:
    """A one-line reason why a run did not finish cleanly."""
    if result.timed_out:
        return "timed out"
    if result.killed:
        return f"killed ({result.killed})"
    lines = [ln for ln in (result.stderr or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else f"exit code {result.returncode}"


# --------------------------------------------------------------------------------------
# Code text
# --------------------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(text: str) -> str:
    """The program in a completion: the last ```python block, else the last bare ``` block,
    else the whole text."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    for wanted in (("python", "py", "python3"), ("",)):
        picked = [body for lang, body in blocks if lang in wanted]
        if picked:
            return picked[-1].strip("\n")
    return text.strip("\n")


def _code_text(text: str) -> str:
    """All python/bare fenced blocks joined (a function may sit in any of them), else the text."""
    blocks = [body for lang, body in _FENCE.findall(text) if lang.lower() in ("python", "py", "")]
    return "\n".join(b.strip("\n") for b in blocks) if blocks else text


@dataclass
class FunctionCode:
    """A top-level function found in a completion."""

    name: str
    source: str  # dedented, decorators included
    has_return: bool


def _returns(node: ast.AST) -> bool:
    """True if ``node``'s own body has a ``return`` (nested defs and classes do not count)."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, ast.Return):
            return True
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(child))
    return False


def find_function(text: str, name: str) -> FunctionCode | None:
    """The last top-level ``def name`` in a completion, or None.

    Parsed with ``ast`` when the code parses; otherwise found line by line (so a completion
    with a syntax error still earns its L1 points and fails at L2, as in the reference).
    """
    code = _code_text(text)
    lines = code.splitlines()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        tree = None
    if tree is not None:
        defs = [
            n
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
        ]
        if not defs:
            return None
        node = defs[-1]
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        source = "\n".join(lines[start - 1 : node.end_lineno])
        return FunctionCode(name, textwrap.dedent(source), _returns(node))
    # Line-based fallback: the def line, then every line indented deeper (or blank).
    header = re.compile(rf"^([ \t]*)(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(")
    starts = [(i, len(m.group(1))) for i, ln in enumerate(lines) if (m := header.match(ln))]
    if not starts:
        return None
    top = [s for s in starts if s[1] == 0] or starts
    first, indent = top[-1]
    end = first + 1
    while end < len(lines):
        ln = lines[end]
        stripped = ln.strip()
        if stripped and len(ln) - len(ln.lstrip()) <= indent and not stripped.startswith(")"):
            break
        end += 1
    block = lines[first:end]
    while block and not block[-1].strip():
        block.pop()
    has_return = any(re.match(r"^[ \t]+return\b", ln) for ln in block[1:])
    return FunctionCode(name, textwrap.dedent("\n".join(block)), has_return)


_IMPORT_LINE = re.compile(r"^(?:import[ \t]+\S|from[ \t]+\S+[ \t]+import[ \t]+\S)")


def find_imports(text: str) -> list[str]:
    """Top-level import statements of a completion (``__future__`` imports are dropped)."""
    code = _code_text(text)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        found = [ln.rstrip() for ln in code.splitlines() if _IMPORT_LINE.match(ln)]
    else:
        found = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return [ln for ln in found if not ln.startswith("from __future__")]


def prompt_context(prompt: str, entry_point: str) -> str:
    """What the problem statement contributes to the program: its imports and any helper
    definitions or constants, i.e. every top-level statement except the entry-point stub."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError as err:
        raise ValueError(f"prompt: does not parse ({err.msg}, line {err.lineno})") from err
    keep = [
        n
        for n in tree.body
        if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point)
        and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")
    ]
    return "\n\n".join(ast.unparse(n) for n in keep)


# --------------------------------------------------------------------------------------
# The check(candidate) harness
# --------------------------------------------------------------------------------------


def _is_unit(stmt: ast.stmt) -> bool:
    return any(
        isinstance(n, ast.Assert) and not isinstance(n.test, ast.Constant) for n in ast.walk(stmt)
    )


def split_check(test: str) -> tuple[ast.Module, ast.FunctionDef, list[int]]:
    """Parse a ``check(candidate)`` test module: (module, check def, indices of unit stmts)."""
    try:
        tree = ast.parse(test)
    except SyntaxError as err:
        raise ValueError(f"test: does not parse ({err.msg}, line {err.lineno})") from err
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks or not checks[-1].args.args:
        raise ValueError("test: expected a top-level 'def check(candidate)'")
    check = checks[-1]
    units = [i for i, stmt in enumerate(check.body) if _is_unit(stmt)]
    if not units:
        raise ValueError("test: check(candidate) contains no assert")
    return tree, check, units


def check_units(test: str) -> list[str]:
    """The source of each test unit of a ``check(candidate)`` test, in order."""
    _, check, units = split_check(test)
    return [ast.unparse(check.body[i]) for i in units]


_PROLOGUE = """\
import json as __tr_json, os as __tr_os, signal as __tr_signal
__tr_fd = __tr_os.dup(1)
__tr_state = {"got": None, "has_got": False, "timeouts": 0}
class __TrTimeout(BaseException):
    pass
class __TrSkip(BaseException):
    pass
def __tr_alarm(signum, frame):
    raise __TrTimeout()
__tr_signal.signal(__tr_signal.SIGALRM, __tr_alarm)
def __tr_emit(record):
    __tr_os.write(__tr_fd, ("\\n" + __TR_MARK + __tr_json.dumps(record) + "\\n").encode())
def __tr_text(value, repr_=False):
    try:
        text = repr(value) if repr_ else str(value)
    except BaseException:
        text = "<unprintable>"
    return text if len(text) <= 300 else text[:300] + "..."
def __tr_note(value):
    __tr_state["got"] = value
    __tr_state["has_got"] = True
    return value
def __tr_begin(i):
    __tr_state["has_got"] = False
    if __tr_state["timeouts"] >= __TR_MAX_TIMEOUTS:
        raise __TrSkip()
    __tr_signal.setitimer(__tr_signal.ITIMER_REAL, __TR_PER_TEST)
def __tr_end(i, err):
    __tr_signal.setitimer(__tr_signal.ITIMER_REAL, 0)
    record = {"unit": i, "ok": err is None}
    if isinstance(err, __TrTimeout):
        __tr_state["timeouts"] += 1
        record["error"] = "Timeout: took longer than %ss" % __TR_PER_TEST
    elif isinstance(err, __TrSkip):
        record["error"] = "Skipped: too many timeouts"
    elif err is not None:
        message = __tr_text(err)
        record["error"] = type(err).__name__ + (": " + message if message else "")
        if __tr_state["has_got"]:
            record["got"] = __tr_text(__tr_state["got"], repr_=True)
    __tr_emit(record)
"""

_DRIVER = """
try:
    check({entry})
except BaseException as __tr_err:
    __tr_signal.setitimer(__tr_signal.ITIMER_REAL, 0)
    __tr_emit({{"setup_error": type(__tr_err).__name__ + ": " + __tr_text(__tr_err)}})
__tr_emit({{"done": True}})
"""


def build_test_program(
    code: str, test: str, entry_point: str, *, per_test_timeout_s: float, max_timeouts: int
) -> tuple[str, list[str], str]:
    """One program that defines ``code``, then runs every test unit of ``check(entry_point)``.

    Returns (program, unit sources, marker). Each unit reports one JSON line
    ``<marker>{"unit": i, "ok": bool, "error": str, "got": repr}`` on the original stdout;
    for ``assert lhs == rhs`` units, ``got`` is ``repr(lhs)``.
    """
    tree, check, units = split_check(test)
    param = check.args.args[0].arg
    body: list[str] = []
    sources: list[str] = []
    for k, stmt in enumerate(check.body):
        if k not in units:
            body.append(textwrap.indent(ast.unparse(stmt), "    "))
            continue
        sources.append(ast.unparse(stmt))
        if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Compare):
            if len(stmt.test.ops) == 1 and isinstance(stmt.test.ops[0], ast.Eq):
                note = ast.Name("__tr_note", ast.Load())
                stmt.test.left = ast.Call(note, [stmt.test.left], [])
        i = len(sources) - 1
        body += [
            "    try:",
            f"        __tr_begin({i})",
            textwrap.indent(ast.unparse(stmt), "        "),
            "    except BaseException as __tr_e:",
            f"        __tr_end({i}, __tr_e)",
            "    else:",
            f"        __tr_end({i}, None)",
        ]
    check_src = f"def check({param}):\n" + "\n".join(body)
    parts = []
    for node in tree.body:
        if node is check:
            parts.append(check_src)
        elif not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            parts.append(ast.unparse(node))
    test_src = "\n\n".join(parts)
    digest = hashlib.sha256((code + "\0" + test_src).encode()).hexdigest()[:16]
    marker = f"@@teamrl-unit-{digest}@@"
    prologue = (
        _PROLOGUE.replace("__TR_MARK", repr(marker))
        .replace("__TR_MAX_TIMEOUTS", str(int(max_timeouts)))
        .replace("__TR_PER_TEST", repr(float(per_test_timeout_s)))
    )
    program = "\n\n".join([prologue, code, test_src, _DRIVER.format(entry=entry_point)])
    return program, sources, marker


def parse_unit_records(stdout: str, marker: str) -> list[dict]:
    """The JSON records a test program printed after ``marker``."""
    records = []
    for line in stdout.splitlines():
        if line.startswith(marker):
            try:
                records.append(json.loads(line[len(marker) :]))
            except json.JSONDecodeError:
                continue  # a truncated last line (output limit): the unit counts as not run
    return records


@dataclass
class UnitResult:
    """One test unit's outcome."""

    index: int
    source: str
    passed: bool
    error: str = ""
    got: str | None = None


def unit_results(result: Any, sources: list[str], marker: str) -> tuple[list[UnitResult], str]:
    """Per-unit outcomes of one test program, and a run-level error ("" if it ran to the end).

    A unit with no report (crash, overall timeout, output cut) counts as failed."""
    records = parse_unit_records(result.stdout or "", marker)
    by_unit = {r["unit"]: r for r in records if isinstance(r.get("unit"), int)}
    setup = next((r["setup_error"] for r in records if "setup_error" in r), "")
    done = any(r.get("done") for r in records)
    if not done:
        run_error = f"program stopped before the tests finished: {_failure_text(result)}"
    elif setup:
        run_error = f"test setup failed: {setup}"
    else:
        run_error = ""
    out = []
    for i, src in enumerate(sources):
        rec = by_unit.get(i)
        if rec is None:
            out.append(UnitResult(i, src, False, run_error or "not run"))
        else:
            out.append(UnitResult(i, src, bool(rec["ok"]), rec.get("error", ""), rec.get("got")))
    return out, run_error


# --------------------------------------------------------------------------------------
# MAGRPO leveled reward (helper writes aux, main writes the entry point)
# --------------------------------------------------------------------------------------


@dataclass
class LeveledRewardConfig:
    """Knobs of the leveled aux/main code reward."""

    reward_shift: float = field(
        default=0.0,
        metadata={"help": "Added to the 0..4 score to give the reward (reference configs: -4)."},
    )
    per_test_timeout_s: float = field(
        default=3.0, metadata={"help": "Time limit of one test unit (SIGALRM in the sandbox)."}
    )
    max_timeouts: int = field(
        default=3, metadata={"help": "After this many unit timeouts the rest are not run."}
    )
    program_timeout_s: float = field(
        default=20.0, metadata={"help": "Wall-clock limit of the whole test program."}
    )

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
        """Floats for ``infos["reward_components"]``."""
        return {
            "definitions": self.definitions,
            "syntax": self.syntax,
            "tests": self.tests,
            "cooperation": self.cooperation,
            "score": self.score,
            "pass_rate": self.pass_rate,
        }


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

    # L3: run the test units.
    programs = []
    for _, job, code in pending:
        program, sources, marker = build_test_program(
            code,
            job.test,
            job.entry_point,
            per_test_timeout_s=cfg.per_test_timeout_s,
            max_timeouts=cfg.max_timeouts,
        )
        programs.append((program, sources, marker))
    results = _run(runner, [p for p, _, _ in programs], [""] * len(programs), cfg.program_timeout_s)
    for (r, _, _), (_, sources, marker), result in zip(pending, programs, results):
        r.units, r.run_error = unit_results(result, sources, marker)
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


# --------------------------------------------------------------------------------------
# Multi-turn feedback for the aux/main agents
# --------------------------------------------------------------------------------------

FEEDBACK_MODES = ("level_feedback", "passed", "plain")


def _code_block(fn: FunctionCode | None, raw: str) -> str:
    body = fn.source if fn is not None else (extract_code(raw) or "(no code)")
    return body.rstrip()


def feedback(
    mode: str,
    agent: str,
    *,
    problem: str,
    entry_point: str,
    helper_text: str,
    main_text: str,
    result: LeveledReward,
    visible: int | None = None,
) -> str:
    """The next-turn prompt of ``agent`` ("helper" or "main") after a scored joint action.

    ``level_feedback``: the previous code of both agents, then diagnostics (missing functions,
    syntax errors with line and column, the first failing test with its error, how ``aux``
    was used) and an instruction to revise. ``passed``: only whether all tests passed.
    ``plain``: a self-revision prompt with the previous code and no signal.

    ``visible``: only the first ``visible`` test units may be reported (None: all of them).
    The rest are hidden: no word of their source, outcome or errors reaches the text, so the
    tests that decide success (see ``AuxMainCodingEnv``) never leak into the next turn.
    """
    if mode not in FEEDBACK_MODES:
        raise ValueError(f"feedback.mode: expected one of {FEEDBACK_MODES}, got {mode!r}")
    if agent not in ("helper", "main"):
        raise ValueError(f"feedback.agent: expected 'helper' or 'main', got {agent!r}")
    hidden = 0
    if visible is not None:
        hidden = max(0, len(result.units) - visible)
        # A run error can come from a hidden unit; a visible unit that did not run already
        # carries it as its own error.
        result = dataclasses.replace(result, units=result.units[:visible], run_error="")
    own = f"the helper function `{AUX_NAME}`" if agent == "helper" else f"`{entry_point}`"
    parts = [
        f"Problem:\n{problem.rstrip()}",
        f"Previous helper code (`{AUX_NAME}`):\n{_code_block(result.aux, helper_text)}",
        f"Previous main code (`{entry_point}`):\n{_code_block(result.main, main_text)}",
    ]
    if mode == "passed":
        scope = "all visible tests" if hidden else "all tests"
        if result.units or not hidden:
            verdict = f"passed {scope}" if result.all_passed else f"did not pass {scope}"
            parts.append(f"Result: the team's code {verdict}.")
        else:
            parts.append("Result: the tests are hidden.")
    elif mode == "level_feedback":
        notes = _diagnostics(result, entry_point, hidden)
        parts.append("Feedback:\n" + "\n".join(f"- {n}" for n in notes))
    parts.append(
        f"Revise {own}. Output only the code of {own}, with no explanation and no markdown."
    )
    return "\n\n".join(parts)


def _diagnostics(r: LeveledReward, entry_point: str, hidden: int = 0) -> list[str]:
    """Notes on ``r``; ``hidden`` test units were held back from ``r.units``."""
    notes = []
    if r.aux is None:
        notes.append(f"No `{AUX_NAME}` function was found in the helper's code.")
    elif not r.aux.has_return:
        notes.append(f"`{AUX_NAME}` has no return statement.")
    if r.main is None:
        notes.append(f"No `{entry_point}` function was found in the main code.")
    elif not r.main.has_return:
        notes.append(f"`{entry_point}` has no return statement.")
    if r.syntax_error is not None:
        e = r.syntax_error
        where = {"helper": f"`{AUX_NAME}`", "main": f"`{entry_point}`"}.get(
            e["agent"], "the combined program"
        )
        notes.append(
            f"Syntax error in {where} at line {e['line']}, column {e['col']}: {e['message']}"
            + (f"\n    {e['text'].strip()}" if e["text"].strip() else "")
        )
    if r.units:
        if hidden:
            notes.append(
                f"Visible tests passed: {r.passed} of {len(r.units)} "
                f"({hidden} more tests are hidden)."
            )
        else:
            notes.append(f"Tests passed: {r.passed} of {len(r.units)}.")
        failing = next((u for u in r.units if not u.passed), None)
        if failing is not None:
            line = f"First failing test:\n    {failing.source}\n  Error: {failing.error}"
            if failing.got is not None:
                line += f"\n  Got: {failing.got}"
            notes.append(line)
        elif r.run_error:
            notes.append(r.run_error)
    elif hidden:
        notes.append(f"The {hidden} tests are hidden.")
    if r.stopped_at is None and r.main is not None:
        if not r.aux_called:
            notes.append(f"`{entry_point}` does not call `{AUX_NAME}`.")
        elif r.thin_wrapper:
            notes.append(
                f"`{entry_point}` only returns `{AUX_NAME}(...)`; it should add its own logic."
            )
        if r.aux_result_discarded:
            notes.append(f"`{entry_point}` calls `{AUX_NAME}` but discards its result.")
    if not notes or (r.all_passed and r.cooperation >= 1.5):
        notes.append("All visible checks passed." if hidden else "All checks passed.")
    return notes


# --------------------------------------------------------------------------------------
# Stdin/stdout judging (coder and tester of AT-GRPO coding)
# --------------------------------------------------------------------------------------


def normalize_output(text: str) -> str:
    """Trailing whitespace of every line and trailing blank lines removed."""
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def outputs_match(got: str, want: str) -> bool:
    return normalize_output(got) == normalize_output(want)


@dataclass
class StdioResult:
    """One program run on one input."""

    ok: bool  # finished with exit code 0 in time
    output: str
    error: str = ""

    def matches(self, expected: str) -> bool:
        return self.ok and outputs_match(self.output, expected)


def run_stdio(
    runs: Sequence[tuple[str, str]], *, timeout_s: float, runner: Runner | None = None
) -> list[StdioResult]:
    """Run ``(code, stdin)`` pairs in one batch. An empty program is not run (error "no code")."""
    todo = [k for k, (code, _) in enumerate(runs) if code.strip()]
    results = _run(runner, [runs[k][0] for k in todo], [runs[k][1] for k in todo], timeout_s)
    out = [StdioResult(False, "", "no code")] * len(runs)
    for k, res in zip(todo, results):
        ok = bool(res.ok)
        out[k] = StdioResult(ok, res.stdout or "", "" if ok else _failure_text(res))
    return out


def stdio_pass_ratio(
    code: str, tests: Sequence[dict], *, timeout_s: float, runner: Runner | None = None
) -> tuple[float, list[StdioResult]]:
    """Fraction of ``tests`` ({"input", "output"}) that ``code`` passes, with each run."""
    if not tests:
        raise ValueError("tests: expected at least one test case, got none")
    runs = run_stdio([(code, t["input"]) for t in tests], timeout_s=timeout_s, runner=runner)
    passed = sum(r.matches(t["output"]) for r, t in zip(runs, tests))
    return passed / len(tests), runs


_CASE = re.compile(
    r"<input>[ \t]*\n?(.*?)</input>\s*<output>[ \t]*\n?(.*?)</output>", re.DOTALL | re.IGNORECASE
)

TEST_CASE_FORMAT = """\
Write each test case as
<input>
...the exact text given on standard input...
</input>
<output>
...the exact expected standard output...
</output>"""


def parse_test_cases(text: str, max_cases: int) -> list[dict]:
    """Test cases written by a tester in ``TEST_CASE_FORMAT`` (at most ``max_cases``, in order).

    The input gets a final newline if it lacks one (programs read lines)."""
    cases = []
    for raw_in, raw_out in _CASE.findall(text)[:max_cases]:
        stdin = raw_in if raw_in.endswith("\n") or not raw_in else raw_in + "\n"
        cases.append({"input": stdin, "output": raw_out})
    return cases


@dataclass
class TesterJudgement:
    """How a tester's cases fare: correct (match the ground truth) and discriminating."""

    cases: list[dict]
    correct: list[bool]  # expected output agrees with the ground-truth behaviour
    program_passes: list[bool]  # the coder's program produces the expected output
    program_outputs: list[StdioResult]
    judge: str  # "reference" or "ground_truth_lookup"

    @property
    def correctness(self) -> float:
        """Fraction of cases that are correct (0 when there are none)."""
        return sum(self.correct) / len(self.cases) if self.cases else 0.0

    @property
    def discrimination(self) -> float:
        """1.0 if some *correct* case fails on the coder's program, i.e. the tests expose a
        real bug; 0.0 otherwise (no bug, or the bug goes unnoticed)."""
        caught = any(c and not p for c, p in zip(self.correct, self.program_passes))
        return 1.0 if caught else 0.0

    @property
    def agreement(self) -> bool:
        """The coder's program passes every case the tester wrote (and there is at least one)."""
        return bool(self.cases) and all(self.program_passes)


def judge_tester(
    cases: Sequence[dict],
    *,
    program: str,
    reference: str | None,
    ground_truth: Sequence[dict],
    timeout_s: float,
    runner: Runner | None = None,
) -> TesterJudgement:
    """Judge tester cases against the ground-truth behaviour and against the coder's program.

    A case is *correct* when its expected output is what the ground truth produces on its input:
    with a ``reference`` program, the reference is run on the input (a crash or timeout makes
    the case incorrect: the input is invalid); without one, the input must be one of the
    ``ground_truth`` inputs (after normalisation) and the output must match; any other input
    cannot be verified and is counted as incorrect, so a wrong expected output is never paid.
    """
    cases = list(cases)
    runs = [(program, c["input"]) for c in cases]
    if reference is not None:
        runs += [(reference, c["input"]) for c in cases]
    results = run_stdio(runs, timeout_s=timeout_s, runner=runner)
    prog_res = results[: len(cases)]
    if reference is not None:
        ref_res = results[len(cases) :]
        correct = [r.matches(c["output"]) for r, c in zip(ref_res, cases)]
        judge = "reference"
    else:
        known = {normalize_output(t["input"]): t["output"] for t in ground_truth}
        correct = []
        for c in cases:
            want = known.get(normalize_output(c["input"]))
            correct.append(want is not None and outputs_match(c["output"], want))
        judge = "ground_truth_lookup"
    passes = [r.matches(c["output"]) for r, c in zip(prog_res, cases)]
    return TesterJudgement(cases, correct, passes, prog_res, judge)
