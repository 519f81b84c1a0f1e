"""Multi-turn feedback for the helper and main agents of the function tasks."""

from __future__ import annotations

import dataclasses

from teamrl.tasks.coding.code_text import FunctionCode, extract_code
from teamrl.tasks.coding.reward import AUX_NAME, LeveledReward

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
