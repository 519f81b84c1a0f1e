"""Text helpers shared by the task families: one code-block extractor, one clipping helper.

``extract_code_block(text, mode)`` finds the code a completion holds. The tasks need four
different rules, each named after what it is for:

==================  ====================================================  ==================
mode                rule                                                  when nothing found
==================  ====================================================  ==================
``"program"``       the last ```python (``py``, ``python3``, any case)    the whole text,
                    block, else the last bare ``````` block; an unclosed  ``"\\n"`` stripped
                    block runs to the end; the block's ``"\\n"`` stripped
``"all_blocks"``    every ```python/```py/bare block (any case; not       the text unchanged
                    ``python3``), unclosed ones included, each
                    ``"\\n"``-stripped, joined by ``"\\n"``
``"all_python"``    every ```python/```py block (exact case), unclosed    the text unchanged
                    ones included, ``"\\n"``-stripped, blank ones
                    dropped, joined by a blank line
``"last_closed"``   the last *closed* block tagged python/python3/py or   None
                    bare (any case), whitespace-stripped; an unclosed
                    block (a truncated completion) never counts
==================  ====================================================  ==================

Callers: coding's program and feedback (``program``), coding's function finder
(``all_blocks``: a function may sit in any block), the games' tool agent (``all_python``:
a helper defined in one block stays usable from a later one), the math tool agent
(``last_closed``: no code block is a -1 reward, so a truncated block must not pass).

``clip(text, limit, marker=..., keep=...)`` shortens a long text for a prompt or a log line.
"""

from __future__ import annotations

import re

# Any fence: its language tag (group 1, may be empty) and body (group 2), to ``` or the end.
_ANY_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_FENCE = re.compile(r"```(?:python|py)[ \t]*\n(.*?)(?:```|\Z)", re.S)
_CLOSED_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)

CODE_BLOCK_MODES = ("program", "all_blocks", "all_python", "last_closed")


def extract_code_block(text: str, mode: str) -> str | None:
    """The code in ``text`` by the rule ``mode`` (see the module docstring's table)."""
    if mode == "program":
        blocks = [(lang.lower(), body) for lang, body in _ANY_FENCE.findall(text)]
        for wanted in (("python", "py", "python3"), ("",)):
            picked = [body for lang, body in blocks if lang in wanted]
            if picked:
                return picked[-1].strip("\n")
        return text.strip("\n")
    if mode == "all_blocks":
        found = _ANY_FENCE.findall(text)
        blocks = [body for lang, body in found if lang.lower() in ("python", "py", "")]
        return "\n".join(b.strip("\n") for b in blocks) if blocks else text
    if mode == "all_python":
        blocks = [b.strip("\n") for b in _PYTHON_FENCE.findall(text)]
        blocks = [b for b in blocks if b.strip()]
        return "\n\n".join(blocks) if blocks else text
    if mode == "last_closed":
        closed = _CLOSED_FENCE.findall(text or "")
        return closed[-1].strip() if closed and closed[-1].strip() else None
    raise ValueError(f"extract_code_block.mode: expected one of {CODE_BLOCK_MODES}, got {mode!r}")


def clip(text: str, limit: int, *, marker: str = "...", keep: str = "head") -> str:
    """``text`` cut to about ``limit`` characters, with ``marker`` where the cut is.

    ``keep="head"`` keeps the first ``limit`` characters and appends the marker;
    ``keep="both"`` keeps ``limit // 2`` characters at each end (a program's head and an
    output's tail both matter) with the marker between them. ``{cut}`` in the marker is
    replaced by the number of characters removed. A text of at most ``limit`` characters is
    returned unchanged.
    """
    if len(text) <= limit:
        return text
    if keep == "head":
        return text[:limit] + marker.replace("{cut}", str(len(text) - limit))
    if keep == "both":
        half = limit // 2
        return text[:half] + marker.replace("{cut}", str(len(text) - 2 * half)) + text[-half:]
    raise ValueError(f"clip.keep: expected 'head' or 'both', got {keep!r}")
