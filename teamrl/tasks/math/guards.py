"""What keeps a math check from hanging the trainer: limits, a screen and a time box.

Predictions are screened before any parsing (``screen``: length cap, bracket depth, power
towers such as ``9**9**9``, huge exponents and factorials are refused), and the whole check
runs under ``time_box`` (SIGALRM in the main thread, a watchdog thread elsewhere), which
raises ``CheckTimeout``. A single long C call such as a big-integer power cannot be
interrupted by either, which is why the screen exists.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from teamrl.tasks.options import option


@dataclass(frozen=True)
class MathCheckConfig:
    """Limits and tolerances of ``check_equivalence``: bounds on the work a prediction may
    cause before and while it is parsed, and when two numbers count as equal."""

    max_chars: int = option(400, "Predictions longer than this are refused unchecked.")
    max_exponent: int = option(10_000, "Largest |exponent| allowed in a power.")
    max_digits: int = option(20_000, "Largest estimated number of digits of a numeric power.")
    max_factorial: int = option(1_000, "Largest number allowed with !, binom, etc.")
    max_depth: int = option(20, "Deepest bracket nesting allowed in a prediction.")
    time_limit: float = option(3.0, "Seconds for one whole check (time_box); <= 0: no limit.")
    rel_tol: float = option(1e-6, "Sympy fallback: |a - b| <= rel_tol * max(1, |gold|) is equal.")


DEFAULT_CONFIG = MathCheckConfig()


_POW_RE = re.compile(r"\^|\*\*")
_INT_RE = re.compile(r"\d+")
_FACTORIAL_HINT_RE = re.compile(r"!|factorial|binom|choose|gamma|\\Gamma", re.IGNORECASE)


def _exponent_at(text: str, i: int) -> tuple[str, int]:
    """The exponent starting at ``text[i]`` (after ``^``/``**``) and the index after it."""
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] in "{(":
        close = "}" if text[i] == "{" else ")"
        depth = 0
        for j in range(i, len(text)):
            if text[j] in "{(":
                depth += 1
            elif text[j] in "})":
                depth -= 1
                if depth == 0 and text[j] == close:
                    return text[i + 1 : j], j + 1
        return text[i + 1 :], len(text)
    token = re.match(r"-?[\w.]+|\\[A-Za-z]+", text[i:])
    end = i + (len(token.group(0)) if token else 0)
    return text[i:end], end


def _base_before(text: str, i: int) -> str:
    """The bracketed group that ends just before ``text[i]`` (a power's base), or ""."""
    j = i - 1
    while j >= 0 and text[j] == " ":
        j -= 1
    if j < 0 or text[j] not in ")}]":
        return ""
    depth = 0
    for k in range(j, -1, -1):
        depth += (text[k] in ")}]") - (text[k] in "({[")
        if depth == 0:
            return text[k : j + 1]
    return text[: j + 1]


def screen(text: str, config: MathCheckConfig = DEFAULT_CONFIG) -> str | None:
    """Why ``text`` is too dangerous to parse, or None when it looks safe.

    Refuses: more than ``max_chars`` characters; brackets nested deeper than ``max_depth``;
    ``(a^m)^n`` with ``m * n`` above ``max_exponent``; power towers (an exponent containing or
    followed by another power, e.g. ``9**9**9``, ``10^{10^{10}}``); an exponent with an
    integer above ``max_exponent``; factorial-like operators (``!``, ``binom``, ...) with an
    integer above ``max_factorial`` or next to a power.
    """
    if len(text) > config.max_chars:
        return f"prediction has {len(text)} characters (max_chars={config.max_chars})"
    depth = deepest = 0
    for ch in text:
        depth += (ch in "([{") - (ch in ")]}")
        deepest = max(deepest, depth)
    if deepest > config.max_depth:  # deep nesting makes the parsers crawl
        return f"brackets nested {deepest} deep (max_depth={config.max_depth})"
    for match in _POW_RE.finditer(text):
        exponent, end = _exponent_at(text, match.end())
        outer = [int(n) for n in _INT_RE.findall(exponent)]
        base = _base_before(text, match.start())
        if outer and _POW_RE.search(base):  # (a^m)^n is a^(m*n)
            inner = [int(n) for n in _INT_RE.findall(base)]
            if inner and max(inner) * max(outer) > config.max_exponent:
                return f"nested powers near {text[max(0, match.start() - 30) : match.end() + 10]!r}"
        chained = re.match(r"\s*(?:\^|\*\*)", text[end:])
        if _POW_RE.search(exponent) or chained:
            # numeric towers explode; symbolic ones (e^{-x^2}, 2^{2^n}) stay symbolic
            tower = exponent + (_exponent_at(text, chained.end() + end)[0] if chained else "")
            if not re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", tower)):
                return f"power tower near {text[match.start() : match.start() + 40]!r}"
        ints = [int(n) for n in _INT_RE.findall(exponent)]
        if ints and max(ints) > config.max_exponent:
            return f"exponent {max(ints)} exceeds max_exponent={config.max_exponent}"
    if _FACTORIAL_HINT_RE.search(text):
        if any(int(n) > config.max_factorial for n in _INT_RE.findall(text)):
            return f"factorial-like operator on a number above {config.max_factorial}"
        if _POW_RE.search(text):  # (10^6)! slips past the literal check
            return "factorial-like operator together with a power"
    return None


# --------------------------------------------------------------------------------------
# Time box
# --------------------------------------------------------------------------------------


class CheckTimeout(BaseException):
    """Raised inside a check by the time box. A BaseException so that libraries that catch
    ``Exception`` (math-verify does) cannot swallow it."""


def _in_import(frame) -> bool:
    """Whether a stack is inside the import machinery, where an exception raised from the
    outside could leave a module lock held (and hang every later import of that module)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


_RETRY = 0.01  # seconds to wait when the deadline falls inside an import


@contextlib.contextmanager
def time_box(seconds: float) -> Iterator[str]:
    """Raise ``CheckTimeout`` inside the block once ``seconds`` have passed.

    In the main thread (with no other ITIMER_REAL running; we never clobber someone else's
    alarm) a SIGALRM does it. Elsewhere, e.g. in a rollout's reward thread pool, a watchdog
    timer thread asks CPython to raise the exception asynchronously in the checking thread
    (``PyThreadState_SetAsyncExc``). A deadline that falls inside an import is postponed by
    10 ms (see ``_in_import``). Both interrupt Python code only: a single long C call (a
    huge integer power) runs to its end, hence ``screen``. Yields the mechanism used.
    """
    if seconds <= 0:
        yield "off"
        return
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    ):

        def _on_alarm(signum, frame):
            if _in_import(frame):
                signal.setitimer(signal.ITIMER_REAL, _RETRY)
                return
            raise CheckTimeout

        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield "signal"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        return

    ident = threading.get_ident()
    lock = threading.Lock()
    state = {"finished": False, "timer": None}

    def _fire() -> None:
        with lock:  # never raise into the thread once it has left the block
            if state["finished"]:
                return
            if _in_import(sys._current_frames().get(ident)):
                _arm(_RETRY)
                return
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(ident), ctypes.py_object(CheckTimeout)
            )

    def _arm(delay: float) -> None:
        state["timer"] = threading.Timer(delay, _fire)
        state["timer"].daemon = True
        state["timer"].start()

    _arm(seconds)
    try:
        yield "watchdog"
    finally:
        with lock:
            state["finished"] = True
            state["timer"].cancel()
        # drop an exception that was requested but not yet delivered
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
