"""The ``check(candidate)`` test harness of the function tasks (HumanEval, MBPP, ...).

A *test unit* is one top-level statement of ``check``'s body that contains an ``assert``
(a loop of asserts is one unit); ``assert True`` lines are not units, since a free pass would
unlock the cooperation bonus for code that passes nothing real. One program runs
every unit under its own ``SIGALRM`` time limit, reports each result on a private marker line,
and stops after ``max_timeouts`` timeouts. The harness protects against accidents, not a
determined adversary: code in the same process can always forge its own report.
"""

from __future__ import annotations

import ast
import hashlib
import json
import textwrap
from dataclasses import dataclass
from typing import Any

from teamrl.tasks.run_program import failure_text


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
        run_error = f"program stopped before the tests finished: {failure_text(result)}"
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
