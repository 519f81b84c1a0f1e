"""Math answers as text: extraction from completions and a canonical surface form.

``extract_boxed``     the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces.
``extract_answer``    boxed, else ``#### X`` (GSM8K style), else "the answer is X" /
                      "Answer: X", else the last number in the text.
``normalize_answer``  the answer's canonical surface form, before any maths.
"""

from __future__ import annotations

import re

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def brace_group(text: str, start: int, end: int | None = None) -> tuple[str, int] | None:
    """Content of the balanced ``{...}`` opening at ``text[start]`` and the index after it.

    Escaped braces (``\\{``, ``\\}``) do not count. None when the group does not close
    before ``end`` (default: the end of the text).
    """
    depth, i = 0, start
    stop = len(text) if end is None else end
    while i < stop:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
        i += 1
    return None


def extract_boxed(text: str | None) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) whose braces balance.

    ``\\boxed 5`` (no braces) yields ``"5"``. A box that never closes (a truncated
    completion) is skipped in favour of an earlier complete one. None when there is none.
    """
    if not text:
        return None
    # A box that contains an unclosed box cannot close either, so each scan may stop where
    # the last unclosed box began: linear time even for "\boxed{" repeated many times.
    limit = len(text)
    for match in reversed(list(_BOX_RE.finditer(text))):
        i = match.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            group = brace_group(text, i, limit)
            if group is not None:
                return group[0].strip()
            limit = match.start()
        elif i > match.end():  # "\boxed 5": the next token
            token = re.match(r"[^\s$]+", text[i:])
            if token:
                return token.group(0)
    return None


_HASH_RE = re.compile(r"####\s*([^\n]+)")
_ANSWER_IS_RE = re.compile(
    r"(?:final answer|answer)\s*(?:is|:|=)\s*:?\s*([^\n]+)", flags=re.IGNORECASE
)
_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")


def _trim(answer: str) -> str:
    answer = answer.strip()
    if answer.endswith("."):
        answer = answer[:-1]
    return answer.strip().strip("$").strip()


def extract_answer(text: str | None) -> str | None:
    """The final answer of a completion, by the first rule that finds one:

    1. the last ``\\boxed{...}``;
    2. the text after the last ``####`` (GSM8K's marker), to the end of its line;
    3. the text after the last "answer is" / "answer:" (any case), to the end of its line;
    4. the last number in the text (``-12``, ``1,000``, ``3.5``, ``3/4``).

    Surrounding ``$`` and one trailing period are removed. None when nothing is found.
    """
    if not text:
        return None
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    for pattern in (_HASH_RE, _ANSWER_IS_RE):
        found = pattern.findall(text)
        if found and _trim(found[-1]):
            return _trim(found[-1])
    numbers = _NUMBER_RE.findall(text)
    return numbers[-1] if numbers else None


# --------------------------------------------------------------------------------------
# Normalisation and screening
# --------------------------------------------------------------------------------------

_DROP = (r"\left", r"\right", r"\displaystyle", r"\!", r"\,", r"\;", r"\:", r"\quad", "~")
_TEXT_CMD_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_DEGREE_RE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°")
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_UNIT_TAIL_RE = re.compile(r"^(-?[\d.,/]+)\s+[A-Za-z]{2,}(?:\s+[A-Za-z]{2,})*$")
_LHS_RE = re.compile(r"^\s*[A-Za-z](?:_\{?\w+\}?)?\s*=(?!=)(.+)$")


def normalize_answer(answer: str) -> str:
    """A canonical surface form of an answer string (before any maths).

    Unwraps ``$``/``\\(\\)``/``\\boxed``, drops spacing commands, ``\\left``/``\\right`` and
    degree signs, unwraps ``\\text{...}``, removes thousands commas and a trailing period,
    drops trailing unit words after a number ("42 apples"), and keeps the right-hand side of
    ``x = 5``.
    """
    s = answer.strip()
    boxed = extract_boxed(s)
    if boxed is not None:
        s = boxed
    for left, right in (("$", "$"), (r"\(", r"\)"), (r"\[", r"\]")):
        while s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            s = s[len(left) : len(s) - len(right)].strip()
    for token in _DROP:
        s = s.replace(token, " ")
    s = s.replace(r"\$", "")
    if s.count("$") == 1 and s.startswith("$"):  # a currency sign, not math mode
        s = s[1:]
    s = s.replace("{,}", ",")
    s = _TEXT_CMD_RE.sub(lambda m: m.group(1), s)
    s = _DEGREE_RE.sub("", s)
    s = _THOUSANDS_RE.sub("", s)
    s = " ".join(s.split())
    if s.endswith("."):
        s = s[:-1].rstrip()
    unit = _UNIT_TAIL_RE.match(s)
    if unit and not re.search(r"\b(?:pi|sqrt|oo)\b", s):
        s = unit.group(1)
    lhs = _LHS_RE.match(s)
    if lhs and "=" not in lhs.group(1):
        s = lhs.group(1).strip()
    return s


def answer_variants(answer: str) -> list[str]:
    """Readings of an answer: a trailing percent sign gives both ``p`` and ``p/100``."""
    s = answer.strip()
    for sign in (r"\%", "%"):
        if s.endswith(sign):
            base = s[: -len(sign)].strip()
            return [base, rf"\frac{{{base}}}{{100}}"] if base else [s]
    return [s]
