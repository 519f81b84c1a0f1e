"""The ``check(candidate)`` test harness of the function tasks (HumanEval, MBPP, ...).

A *test unit* is one top-level statement of ``check``'s body that contains an ``assert``
(a loop of asserts is one unit); ``assert True`` lines are not units, since a free pass would
unlock the cooperation bonus for code that passes nothing real.

Test outcomes are decided where the solution cannot reach them (issue 11). The sandboxed
program is a trusted harness (``teamrl.sandbox.TRUSTED_PRELUDE``) that, before it knows
anything about the tests, forks a *worker*: the worker closes the report channel and its
standard input, defines the solution (model code) and then answers calls, one JSON line per
call: arguments in, the return value (or the exception's name, or a timeout) out. The trusted
parent reads the tests only after the fork (from standard input), runs ``check`` with a
``candidate`` proxy that forwards each call to the worker, and rebuilds every returned value
as a plain Python value (None, bool, int, float, complex, str, bytes, list, tuple, dict, set,
frozenset; a subclass is read through its base type, anything else is an error). The asserts
therefore compare plain data in a process the solution never ran in, and each unit's verdict
goes out on the authenticated report channel, never on stdout. So an object whose ``__eq__``
lies, a lying ``int``/``str``/``list`` subclass, a forged report on stdout, ``sys.exit(0)``
or ``os._exit(0)``, patched builtins, the solution's own ``SystemExit`` and writes to other
file descriptors all count for nothing, and the expected values were never in the worker's
memory, files or environment.

The worker stops each call after ``per_test_timeout_s`` (SIGALRM); a worker that ignores it
(or dies) is killed, and the units left fail. After ``max_timeouts`` timeouts the rest are
skipped. Arguments and results must be plain values: a solution that returns a generator
where a list is wanted fails the unit, as a value the test cannot compare would.
"""

from __future__ import annotations

import ast
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


# The value codec, shared by the worker (encodes results, decodes arguments) and the trusted
# parent (encodes arguments, decodes results). What the worker sends is attacker data: the
# parent's decoder builds only plain values and refuses anything malformed.
_CODEC = """
_TR_TYPES = ((list, "l"), (tuple, "t"), (set, "S"), (frozenset, "F"))
def _tr_enc(x, depth=0):
    if depth > 100:
        raise ValueError("value nested too deeply")
    if x is None or x is True or x is False:
        return x
    if isinstance(x, int):
        return {"i": int.__repr__(x)}
    if isinstance(x, float):
        return {"f": float.__repr__(x)}
    if isinstance(x, complex):
        return {"c": complex.__repr__(x)}
    if isinstance(x, str):
        return {"s": str.__str__(x)}
    if isinstance(x, bytes):
        return {"b": bytes.hex(x)}
    if isinstance(x, dict):
        return {"d": [[_tr_enc(k, depth + 1), _tr_enc(v, depth + 1)] for k, v in dict.items(x)]}
    for base, tag in _TR_TYPES:
        if isinstance(x, base):
            return {tag: [_tr_enc(v, depth + 1) for v in base.__iter__(x)]}
    raise TypeError("a value of type %s is not a plain value" % type(x).__name__)
_TR_SCALARS = {"i": int, "f": float, "c": complex, "s": str, "b": bytes.fromhex}
def _tr_dec(o):
    if o is None or o is True or o is False:
        return o
    if type(o) is not dict or len(o) != 1:
        raise ValueError("malformed value")
    [(tag, v)] = o.items()
    if tag in _TR_SCALARS and type(v) is str:
        return _TR_SCALARS[tag](v)
    if type(v) is not list:
        raise ValueError("malformed value")
    if tag == "d":
        return {_tr_dec(p[0]): _tr_dec(p[1]) for p in v if type(p) is list and len(p) == 2}
    for base, name in _TR_TYPES:
        if tag == name:
            return base(_tr_dec(item) for item in v)
    raise ValueError("malformed value")
def _tr_text(value, repr_=False):
    try:
        text = repr(value) if repr_ else str(value)
    except BaseException:
        text = "<unprintable>"
    return text if len(text) <= 300 else text[:300] + "..."
class _TrTimeout(BaseException):
    pass
"""

# The worker: runs in the forked child, before the parent has read the tests.
_WORKER = """
def _tr_worker(requests, answers, source, entry, per_test):
    import signal
    _os.close(_teamrl_channel)
    null = _os.open(_os.devnull, _os.O_RDONLY)
    _os.dup2(null, 0)
    _os.close(null)
    def alarm(signum, frame):
        raise _TrTimeout()
    signal.signal(signal.SIGALRM, alarm)
    def send(out):
        data = (_json.dumps(out) + "\\n").encode()
        while data:
            data = data[_os.write(answers, data):]
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
        fn = namespace[entry]
    except BaseException as err:
        send({"setup": type(err).__name__ + ": " + _tr_text(err)})
        _os._exit(0)
    send({"ready": 1})
    for line in _os.fdopen(requests, "rb"):
        try:
            call = _json.loads(line)
            args = [_tr_dec(a) for a in call["a"]]
            signal.setitimer(signal.ITIMER_REAL, per_test)
            try:
                value = fn(*args)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            out = {"v": _tr_enc(value)}
        except _TrTimeout:
            out = {"t": 1}
        except BaseException as err:
            out = {"e": [type(err).__name__, _tr_text(err)]}
        send(out)
    _os._exit(0)
"""

# The trusted parent: forks the worker, then reads the tests and runs them.
_PARENT = """
import builtins as _tr_builtins, json as _json, select as _tr_select, time as _tr_time
_TR_MAX_BYTES = 1 << 20
class _TrSkip(BaseException):
    pass
class _TrGone(Exception):
    pass
def _tr_main(source, entry, per_test, max_timeouts):
    (req_r, req_w), (ans_r, ans_w) = _os.pipe(), _os.pipe()
    pid = _os.fork()
    if pid == 0:  # the worker: requests in, answers out; exits in every case
        try:
            [_os.close(fd) for fd in (req_w, ans_r)]
            _tr_worker(req_r, ans_w, source, entry, per_test)
        finally:
            _os._exit(0)
    [_os.close(fd) for fd in (req_r, ans_w)]
    spec = _json.loads(_sys.stdin.read())  # only now: the worker never saw the tests
    state = {"got": None, "has_got": False, "timeouts": 0, "alive": True, "buf": b"",
             "deadline": 0.0}
    def stop_worker():
        if state["alive"]:
            state["alive"] = False
            try:
                _os.kill(pid, 9)
            except OSError:
                pass
    def read_answer():
        while b"\\n" not in state["buf"]:
            left = state["deadline"] - _tr_time.monotonic()
            if left <= 0 or not _tr_select.select([ans_r], [], [], left)[0]:
                stop_worker()
                raise _TrTimeout()
            chunk = _os.read(ans_r, 65536)
            if not chunk or len(state["buf"]) > _TR_MAX_BYTES:
                stop_worker()
                raise _TrGone("the solution's process ended or sent too much")
            state["buf"] += chunk
        line, state["buf"] = state["buf"].split(b"\\n", 1)
        return _json.loads(line)
    def candidate(*args):
        if not state["alive"]:
            raise _TrGone("the solution's process is gone")
        data = (_json.dumps({"a": [_tr_enc(a) for a in args]}) + "\\n").encode()
        try:
            while data:
                data = data[_os.write(req_w, data):]
        except OSError:
            stop_worker()
            raise _TrGone("the solution's process is gone")
        answer = read_answer()
        if type(answer) is not dict:
            raise ValueError("malformed answer from the solution")
        if "t" in answer:
            raise _TrTimeout()
        if "e" in answer:
            name, message = (list(answer["e"]) + ["", ""])[:2]
            kind = getattr(_tr_builtins, str(name), None)
            if isinstance(kind, type) and issubclass(kind, Exception):
                raise kind(str(message))
            raise RuntimeError("%s: %s" % (name, message))
        return _tr_dec(answer["v"])
    def note(value):
        state["got"] = value
        state["has_got"] = True
        return value
    def begin(i):
        state["has_got"] = False
        if state["timeouts"] >= max_timeouts:
            raise _TrSkip()
        state["deadline"] = _tr_time.monotonic() + per_test + 1.0
    def end(i, err):
        record = {"unit": i, "ok": err is None}
        if isinstance(err, _TrTimeout):
            state["timeouts"] += 1
            record["error"] = "Timeout: took longer than %ss" % per_test
        elif isinstance(err, _TrSkip):
            record["error"] = "Skipped: too many timeouts"
        elif err is not None:
            message = _tr_text(err)
            record["error"] = type(err).__name__ + (": " + message if message else "")
            if state["has_got"]:
                record["got"] = _tr_text(state["got"], repr_=True)
        _teamrl_report(_json.dumps(record))
    namespace = {"__name__": "__teamrl_check__", "__tr_note": note, "__tr_begin": begin,
                 "__tr_end": end}
    try:
        state["deadline"] = _tr_time.monotonic() + per_test + 1.0
        hello = read_answer()
        if type(hello) is not dict or "ready" not in hello:
            raise _TrGone(str(hello.get("setup") if type(hello) is dict else hello))
        exec(compile(spec["context"], "prompt.py", "exec"), namespace)
        exec(compile(spec["test"], "test.py", "exec"), namespace)
        namespace["check"](candidate)
    except BaseException as err:
        _teamrl_report(_json.dumps({"setup_error": type(err).__name__ + ": " + _tr_text(err)}))
    stop_worker()
    _os.waitpid(pid, 0)
    _teamrl_report(_json.dumps({"done": True}))
"""


def _instrument_check(test: str) -> tuple[str, list[str]]:
    """The test module with every unit of ``check`` wrapped in begin/end hooks, and the
    units' sources. For ``assert lhs == rhs`` units the hooks note ``lhs`` (shown as "got")."""
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
    return "\n\n".join(parts), sources


def build_test_program(
    code: str,
    test: str,
    entry_point: str,
    *,
    context: str = "",
    per_test_timeout_s: float,
    max_timeouts: int,
) -> tuple[str, str, list[str]]:
    """The judging program for ``code`` against every unit of ``check(entry_point)``.

    Returns (program, stdin, unit sources). ``program`` holds the trusted harness and the
    solution ``code`` (run only in the worker); ``stdin`` holds the tests and ``context``
    (the prompt's own definitions, trusted, which a test may call), read by the harness
    after the worker is forked. Each unit's verdict is one JSON line
    ``{"unit": i, "ok": bool, "error": str, "got": repr}`` on the report channel, so the
    program must run with ``report=True``.
    """
    from teamrl.sandbox.channel import TRUSTED_PRELUDE  # here: keep task imports light

    test_src, sources = _instrument_check(test)
    main = (
        f"_tr_main({code!r}, {entry_point!r}, {float(per_test_timeout_s)!r}, "
        f"{int(max_timeouts)!r})\n"
    )
    program = "\n".join([TRUSTED_PRELUDE, _CODEC, _WORKER, _PARENT, main])
    stdin = json.dumps({"context": context, "test": test_src})
    return program, stdin, sources


def parse_unit_records(report: str) -> list[dict]:
    """The JSON records the harness wrote on the report channel."""
    records = []
    for line in report.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a cut last line: the unit counts as not run
        if isinstance(record, dict):
            records.append(record)
    return records


@dataclass
class UnitResult:
    """One test unit's outcome."""

    index: int
    source: str
    passed: bool
    error: str = ""
    got: str | None = None


def unit_results(result: Any, sources: list[str]) -> tuple[list[UnitResult], str]:
    """Per-unit outcomes of one test program, and a run-level error ("" if it ran to the end).

    Only the report channel counts; a unit with no report (crash, overall timeout) fails."""
    records = parse_unit_records(getattr(result, "report", "") or "")
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
            out.append(
                UnitResult(i, src, rec.get("ok") is True, rec.get("error", ""), rec.get("got"))
            )
    return out, run_error
