"""Math answers: equivalence checking (extraction is in ``teamrl.tasks.math.answers``).

Extraction
    ``extract_boxed``   the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces.
    ``extract_answer``  boxed, else ``#### X`` (GSM8K style), else "the answer is X" /
                        "Answer: X", else the last number in the text.

Equivalence (``check_equivalence`` returns a ``Verdict`` that says which path decided;
``is_equivalent`` is its boolean shorthand). For each pair of answer variants:

    1. math-verify (``parse`` + ``verify``) when it is installed and parses both sides to
       sympy objects: its True/False is final.
    2. otherwise our own sympy fallback: a small LaTeX-to-expression converter (``\\frac``,
       ``\\dfrac``, ``\\sqrt``, ``^``, ``\\cdot``, ``\\pi``, thousands commas, top-level
       tuples), then numbers are equal when |a - b| <= rel_tol * max(1, |gold|), and
       expressions with free symbols when they agree at a few fixed random points.
    3. otherwise a normalised string comparison.

Percentages: ``50\\%`` is read both as 50 and as 50/100, so it matches gold ``50`` and gold
``0.5`` (models often keep or drop the sign the gold answer uses; both readings are fair).

Safety: a completion must never hang the trainer. Predictions are screened before any
parsing (length cap, bracket depth, power towers such as ``9**9**9``, huge exponents and
factorials are refused with method ``"refused"``); the sympy path bounds every power it
meets in the unevaluated tree; and the whole check runs under a time box (SIGALRM in the
main thread, a watchdog thread elsewhere; see ``time_box``) that ends it with method
``"timeout"``. A single long C call such as a big-integer power cannot be interrupted by
either, which is why the screens exist.
"""

from __future__ import annotations

import logging
import math
import random
import re
import threading
from dataclasses import dataclass

from teamrl.tasks.math.answers import answer_variants, brace_group, normalize_answer
from teamrl.tasks.math.guards import DEFAULT_CONFIG, CheckTimeout, MathCheckConfig, screen, time_box

METHODS = ("math_verify", "sympy", "string", "refused", "timeout", "empty")


@dataclass(frozen=True)
class Verdict:
    """Outcome of one equivalence check and the path that decided it.

    ``method`` is one of ``METHODS``: ``math_verify``/``sympy``/``string`` decided by
    comparison; ``refused`` (pathological prediction), ``timeout`` (time box hit) and
    ``empty`` (no prediction) are always ``equivalent=False``.
    """

    equivalent: bool
    method: str
    detail: str = ""


_warmed: set[str] = set()
_warm_lock = threading.Lock()


def _warm_up(use_math_verify: bool) -> None:
    """Run trusted checks unboxed once, so that the lazy imports of sympy, math-verify and
    its LaTeX parser happen outside any time box (see ``_in_import``)."""
    needed = {"sympy", "math_verify"} if use_math_verify else {"sympy"}
    if needed <= _warmed:
        return
    with _warm_lock:
        if "math_verify" in needed - _warmed:
            _math_verify_compare(r"\frac{1}{2}", "0.5")
        if "sympy" not in _warmed:
            _sympy_compare(r"\frac{\sqrt{4}}{2}", "1", DEFAULT_CONFIG)
            _sympy_compare("x + 1", "1 + x", DEFAULT_CONFIG)
        _warmed.update(needed)


# --------------------------------------------------------------------------------------
# Path 1: math-verify
# --------------------------------------------------------------------------------------


def math_verify_available() -> bool:
    """Whether the ``math-verify`` package can be imported."""
    try:
        import math_verify  # noqa: F401
    except ImportError:
        return False
    return True


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns once that its own timeouts are off; ours (``time_box``) are on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())


def _as_latex(answer: str) -> str:
    return answer if "$" in answer else f"${answer}$"


def _math_verify_compare(pred: str, gold: str) -> bool | None:
    """math-verify's verdict, or None when it cannot parse both sides to sympy objects.

    Its own SIGALRM timeouts are disabled (they would cancel our time box); exceptions
    propagate to the caller, which records them and falls back to sympy.
    """
    from math_verify import parse, verify
    from sympy import Basic, MatrixBase

    parsed_gold = parse(_as_latex(gold), parsing_timeout=None, raise_on_error=True)
    parsed_pred = parse(_as_latex(pred), parsing_timeout=None, raise_on_error=True)
    if not any(isinstance(x, (Basic, MatrixBase)) for x in parsed_gold) or not any(
        isinstance(x, (Basic, MatrixBase)) for x in parsed_pred
    ):
        return None
    return bool(verify(parsed_gold, parsed_pred, timeout_seconds=None, raise_on_error=True))


# --------------------------------------------------------------------------------------
# Path 2: our sympy fallback
# --------------------------------------------------------------------------------------


class _Unparsable(ValueError):
    pass


_COMMANDS = {
    "cdot": "*",
    "times": "*",
    "div": "/",
    "pi": " pi ",
    "infty": " oo ",
    "%": "/100",
}
_ALLOWED_NAMES = {"sqrt", "pi", "oo"}
_TOKEN_RE = re.compile(r"\s+|\d+\.?\d*|\.\d+|[A-Za-z]+|\*\*|[-+*/()]")


def _latex_arg(s: str, i: int) -> tuple[str, int]:
    """One LaTeX macro argument at ``s[i]``: a brace group, a command or one character."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        raise _Unparsable("missing argument")
    if s[i] == "{":
        group = brace_group(s, i)
        if group is None:
            raise _Unparsable("unbalanced braces")
        return group
    if s[i] == "\\":
        name = re.match(r"\\[A-Za-z]+", s[i:])
        if name:
            return name.group(0), i + len(name.group(0))
    return s[i], i + 1


def _latex_to_python(s: str) -> str:
    """Convert the LaTeX subset we support into a Python/sympy expression string."""
    out: list[str] = []
    i = 0
    while i < len(s):
        if s.startswith((r"\frac", r"\dfrac", r"\tfrac"), i):
            i = s.index("frac", i) + 4
            num, i = _latex_arg(s, i)
            den, i = _latex_arg(s, i)
            out.append(f"(({_latex_to_python(num)})/({_latex_to_python(den)}))")
        elif s.startswith(r"\sqrt", i):
            i += 5
            root = "2"
            if i < len(s) and s[i] == "[":
                close = s.find("]", i)
                if close < 0:
                    raise _Unparsable("unclosed \\sqrt[")
                root, i = s[i + 1 : close], close + 1
            arg, i = _latex_arg(s, i)
            out.append(f"(({_latex_to_python(arg)})**(1/({_latex_to_python(root)})))")
        elif s[i] == "^":
            # a bare number after ^ is the whole number ("2^10"), as people type it
            number = re.match(r"\^\s*(\d+)", s[i:])
            if number:
                out.append(f"**({number.group(1)})")
                i += len(number.group(0))
            else:
                arg, i = _latex_arg(s, i + 1)
                out.append(f"**({_latex_to_python(arg)})")
        elif s[i] == "{":
            group = brace_group(s, i)
            if group is None:
                raise _Unparsable("unbalanced braces")
            out.append(f"({_latex_to_python(group[0])})")
            i = group[1]
        elif s[i] == "\\":
            name = re.match(r"\\([A-Za-z]+|%)", s[i:])
            if not name or name.group(1) not in _COMMANDS:
                raise _Unparsable(f"unsupported LaTeX near {s[i : i + 12]!r}")
            out.append(_COMMANDS[name.group(1)])
            i += len(name.group(0))
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def _split_top_level(s: str) -> list[str]:
    """Split on commas outside brackets; strip one pair of outer brackets around a tuple."""
    s = s.strip()
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]":
        inner = _split_top_level(s[1:-1])
        if len(inner) > 1:
            return inner
    parts, depth, start = [], 0, 0
    for j, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(s[start:j])
            start = j + 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


def _check_size(expr, config: MathCheckConfig) -> None:
    """Refuse an unevaluated tree whose powers would be astronomically large.

    Post-order, so every exponent is vetted before we evaluate it numerically.
    """
    import sympy

    for arg in expr.args:
        _check_size(arg, config)
    if isinstance(expr, sympy.Pow):
        base, exp = expr.args
        if exp.is_number:
            e = abs(complex(sympy.N(exp, 15)))
            if e > config.max_exponent:
                raise _Unparsable(f"exponent {e:.3g} exceeds max_exponent")
            if base.is_number:
                b = abs(complex(sympy.N(base, 15)))
                if e * math.log10(max(b, 10.0)) > config.max_digits:
                    raise _Unparsable("power has too many digits")


def _to_sympy(text: str, config: MathCheckConfig) -> list:
    """Parse an answer into a list of sympy expressions (one per top-level element)."""
    from sympy import Symbol, oo, pi, sqrt
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication,
        parse_expr,
        standard_transformations,
    )

    if not text.strip():
        raise _Unparsable("empty")
    local = {c: Symbol(c) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"}
    local.update({"pi": pi, "oo": oo, "sqrt": sqrt})
    exprs = []
    for part in _split_top_level(text):
        code = _latex_to_python(part).replace("{", "(").replace("}", ")")
        # parse_expr evaluates Python code: only numbers, operators, brackets and
        # whitelisted names may reach it.
        tokens = _TOKEN_RE.findall(code)
        if "".join(tokens) != code:
            raise _Unparsable(f"unexpected characters in {code[:40]!r}")
        names = [t for t in tokens if t.isalpha()]
        if any(len(n) > 1 and n not in _ALLOWED_NAMES for n in names):
            raise _Unparsable(f"unknown names in {code[:40]!r}")
        try:
            expr = parse_expr(
                code,
                local_dict=local,
                transformations=standard_transformations + (implicit_multiplication, convert_xor),
                evaluate=False,
            )
        except Exception as err:  # any sympy parse failure means "not parsable"; recorded
            raise _Unparsable(f"sympy could not parse {code[:40]!r}: {err}") from err
        _check_size(expr, config)
        exprs.append(expr)
    return exprs


def _numbers_close(a, b, rel_tol: float) -> bool:
    import sympy

    va, vb = sympy.N(a, 30), sympy.N(b, 30)
    if not (va.is_number and vb.is_number) or va.has(sympy.nan, sympy.zoo):
        return False
    if vb.has(sympy.nan, sympy.zoo):
        return False
    if va in (sympy.oo, -sympy.oo) or vb in (sympy.oo, -sympy.oo):
        return va == vb
    return bool(abs(va - vb) <= rel_tol * max(1, abs(vb)))


def _sympy_equal(a, b, rel_tol: float) -> bool:
    """Numbers: within tolerance. With symbols: same symbols and equal at 3 fixed points."""
    import sympy

    if not a.free_symbols and not b.free_symbols:
        return _numbers_close(a, b, rel_tol)
    names_a = {s.name for s in a.free_symbols}
    names_b = {s.name for s in b.free_symbols}
    if names_a != names_b:
        return False
    rng = random.Random(0)
    symbols = sorted(a.free_symbols, key=lambda s: s.name)
    checked = 0
    for _ in range(3):
        point = {s: sympy.Rational(rng.randint(3, 27), 10) for s in symbols}
        va, vb = a.subs(point), b.subs(point)
        if va.has(sympy.nan, sympy.zoo) or vb.has(sympy.nan, sympy.zoo):
            continue
        if not _numbers_close(va, vb, rel_tol):
            return False
        checked += 1
    return checked > 0


def _sympy_compare(pred: str, gold: str, config: MathCheckConfig) -> bool | None:
    """Our fallback verdict, or None when either side cannot be parsed."""
    try:
        pred_exprs = _to_sympy(pred, config)
        gold_exprs = _to_sympy(gold, config)
    except _Unparsable:
        return None
    if len(pred_exprs) != len(gold_exprs):
        return False
    return all(_sympy_equal(p, g, config.rel_tol) for p, g in zip(pred_exprs, gold_exprs))


def _string_key(answer: str) -> str:
    return "".join(answer.split()).lower()


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


def check_equivalence(
    pred: str | None,
    gold: str,
    *,
    backend: str = "auto",
    config: MathCheckConfig = DEFAULT_CONFIG,
    screen_gold: bool = False,
) -> Verdict:
    """Is ``pred`` the same mathematical answer as ``gold``? See the module docstring.

    ``backend``: ``"auto"`` (math-verify, then sympy, then string), ``"math_verify"``
    (requires the package; sympy/string still decide what it cannot parse) or ``"sympy"``
    (skip math-verify). ``screen_gold``: also screen ``gold`` (set it when ``gold`` is
    another model's output, e.g. when checking two agents agree).
    """
    if backend not in ("auto", "math_verify", "sympy"):
        raise ValueError(f"backend: expected 'auto', 'math_verify' or 'sympy', got {backend!r}")
    if gold is None or not str(gold).strip():
        raise ValueError(f"gold: expected a non-empty answer, got {gold!r}")
    if pred is None or not str(pred).strip():
        return Verdict(False, "empty", "no prediction")
    pred, gold = str(pred), str(gold)
    for side, text in (("prediction", pred), ("gold", gold)):
        if side == "gold" and not screen_gold:
            continue
        reason = screen(text, config)
        if reason:
            return Verdict(False, "refused", f"{side}: {reason}")

    pairs = [
        (p, g)
        for p in answer_variants(normalize_answer(pred))
        for g in answer_variants(normalize_answer(gold))
    ]
    notes: list[str] = []
    use_mv = backend != "sympy"
    if use_mv and not math_verify_available():
        if backend == "math_verify":
            raise ImportError("backend='math_verify' needs: pip install math-verify")
        use_mv = False
        notes.append("math-verify not installed")
    _warm_up(use_mv)
    try:
        with time_box(config.time_limit):
            if use_mv:
                decided = False
                for p, g in pairs:
                    try:
                        result = _math_verify_compare(p, g)
                    except Exception as err:  # recorded in the verdict; sympy decides
                        notes.append(f"math-verify raised {type(err).__name__}: {err}"[:200])
                        continue
                    if result:
                        return Verdict(True, "math_verify")
                    decided = decided or result is not None
                if decided:
                    return Verdict(False, "math_verify")
                notes.append("math-verify could not parse")
            decided = False
            for p, g in pairs:
                result = _sympy_compare(p, g, config)
                if result:
                    return Verdict(True, "sympy", "; ".join(notes))
                decided = decided or result is not None
            if decided:
                return Verdict(False, "sympy", "; ".join(notes))
            notes.append("sympy could not parse")
            same = any(_string_key(p) == _string_key(g) for p, g in pairs)
            return Verdict(same, "string", "; ".join(notes))
    except CheckTimeout:
        return Verdict(False, "timeout", f"equivalence check exceeded {config.time_limit}s")


def is_equivalent(
    pred: str | None,
    gold: str,
    *,
    backend: str = "auto",
    config: MathCheckConfig = DEFAULT_CONFIG,
) -> bool:
    """``check_equivalence(...).equivalent``: True when ``pred`` matches ``gold``."""
    return check_equivalence(pred, gold, backend=backend, config=config).equivalent
