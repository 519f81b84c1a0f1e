"""The shared text helpers: one hand-written case per code-block mode, and clipping."""

from __future__ import annotations

import pytest

from teamrl.text import clip, extract_code_block

# A completion with a bare block, then a ```python block, then a ```py block.
MIXED = "intro\n```\nbare = 1\n```\nmid\n```python\nx = 1\n```\n```py\ny = 2\n```\nend"


def test_program_mode_prefers_the_last_python_block_then_bare_then_text():
    assert extract_code_block(MIXED, "program") == "y = 2"
    assert extract_code_block("```\nbare = 1\n```", "program") == "bare = 1"
    # A ```Python3 tag counts (any case); an unclosed block runs to the end.
    assert extract_code_block("```Python3\nz = 3\n", "program") == "z = 3"
    # No block: the whole text, newlines at both ends stripped.
    assert extract_code_block("\nprint(1)\n\n", "program") == "print(1)"


def test_all_blocks_mode_joins_python_and_bare_blocks_with_one_newline():
    assert extract_code_block(MIXED, "all_blocks") == "bare = 1\nx = 1\ny = 2"
    # python3 is not one of its tags; with no usable block the text comes back unchanged.
    text = "```python3\nz = 3\n```"
    assert extract_code_block(text, "all_blocks") == text


def test_all_python_mode_joins_python_blocks_with_a_blank_line():
    assert extract_code_block(MIXED, "all_python") == "x = 1\n\ny = 2"
    # Bare blocks do not count, blank ones are dropped, the tag is case-sensitive.
    assert extract_code_block("```python\n\n```\n```PYTHON\nq = 1\n```", "all_python") == (
        "```python\n\n```\n```PYTHON\nq = 1\n```"
    )
    assert extract_code_block("```python\na = 1\n", "all_python") == "a = 1"  # left open


def test_last_closed_mode_needs_a_closed_block():
    assert extract_code_block(MIXED, "last_closed") == "y = 2"
    assert extract_code_block("```PY\n  k = 1  \n```", "last_closed") == "k = 1"
    # An unclosed (truncated) block and an empty block give None.
    assert extract_code_block("```python\nx = 1\n", "last_closed") is None
    assert extract_code_block("```python\n   \n```", "last_closed") is None
    assert extract_code_block("no code at all", "last_closed") is None


def test_unknown_mode_names_the_mode():
    with pytest.raises(ValueError, match="mode.*'first'"):
        extract_code_block("x", "first")


def test_clip_keeps_the_head_or_both_ends_and_counts_the_cut():
    assert clip("abcdef", 6) == "abcdef"
    assert clip("abcdefgh", 5, marker="...(cut)") == "abcde...(cut)"
    assert clip("abcdefgh", 5, marker=" [{cut} cut]") == "abcde [3 cut]"
    # both ends: limit // 2 = 2 characters each side, 10 - 4 = 6 cut
    assert clip("0123456789", 5, marker="|{cut}|", keep="both") == "01|6|89"
    with pytest.raises(ValueError, match="keep"):
        clip("abcdefgh", 3, keep="tail")
