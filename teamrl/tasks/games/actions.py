"""Reading the games' actions out of text: action lists, moves and the tool agent's code."""

from __future__ import annotations

import re

from teamrl.text import clip, extract_code_block


def _bracket_spans(text: str) -> list[str]:
    """Top-level balanced ``[...]`` spans of ``text``, in order (nested lists stay whole)."""
    spans, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "]" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def extract_action_segment(text: str, *, last_line_fallback: bool = False) -> str | None:
    """The part of ``text`` that holds the action list, or None if there is none.

    Order of preference: after the last ``####`` marker, the first ``[...]`` list (or else the
    rest of that line); otherwise the last ``[...]`` list in the text; otherwise, only when
    ``last_line_fallback`` (used for program output), the last non-empty line.
    """
    if "####" in text:
        tail = text.rsplit("####", 1)[1]
        spans = _bracket_spans(tail)
        if spans:
            return spans[0]
        lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
        return lines[0] if lines else None
    spans = _bracket_spans(text)
    if spans:
        return spans[-1]
    if last_line_fallback:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return lines[-1] if lines else None
    return None


MOVE_ALIASES = {
    "u": "U",
    "up": "U",
    "d": "D",
    "down": "D",
    "l": "L",
    "left": "L",
    "r": "R",
    "right": "R",
}
# (d_row, d_col) per move; row 0 is the top of the board.
MOVES: dict[str, tuple[int, int]] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


def parse_moves(text: str, last_line_fallback: bool = False) -> list[str] | None:
    """A list of moves "U"/"D"/"L"/"R" from ``text``, or None when no well-formed action list
    is found.

    Words up/down/left/right (any case) and runs of the letters UDLR ("UURD") are moves,
    separated by commas, quotes, brackets or spaces. A list with any other word or character
    in it is not an action list (None: the no-action case, with its penalty), so printed text
    such as "ALL TESTS PASSED" never counts as three cheap invalid moves (issue 11).

    A list with no move in it (``[]``, or a ``[`` left open before prose, as a reply that
    follows a ``#### [`` prefill with a newline) is no action too: scored as zero moves it cost
    nothing, more than any wrong or invalid move, so a policy learnt to answer nothing.
    """
    segment = extract_action_segment(text, last_line_fallback=last_line_fallback)
    if segment is None or not _WELL_FORMED_MOVES.fullmatch(segment):
        return None
    moves: list[str] = []
    for token in re.findall(r"[A-Za-z]+", segment):
        if token.lower() in MOVE_ALIASES:
            moves.append(MOVE_ALIASES[token.lower()])
        elif set(token.upper()) <= set("UDLR"):
            moves.extend(token.upper())
        else:
            return None
    return moves or None


# Only move words, letters, separators and brackets may appear in a move list.
_WELL_FORMED_MOVES = re.compile(r"[A-Za-z\s,;'\"\[\]()]*")


def extract_code(completion: str) -> str:
    """The Python code of a completion: all ```python blocks joined, else the whole text.

    A block left open (a truncated generation) runs to the end of the text. Joining the blocks
    keeps a helper defined in one block usable from a later one (``extract_code_block``'s
    ``all_python`` mode).
    """
    return extract_code_block(completion, "all_python")


def format_actions(actions: list | None, limit: int = 300) -> str:
    """Short display of an action list for observations and history lines."""
    if actions is None:
        return "(no action list found)"
    text = "[" + ", ".join(str(a) if isinstance(a, tuple) else repr(a) for a in actions) + "]"
    return clip(text, limit, marker=" ...]")
