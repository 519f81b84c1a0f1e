"""Stdin/stdout judging for the coder and the tester of ``code_contest`` (AT-GRPO coding).

Outputs match when they are equal after trailing whitespace is removed from every line and
trailing blank lines are dropped. Programs run through ``teamrl.tasks.run_program``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from teamrl.tasks.run_program import Runner, failure_text, run_programs


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
    codes, stdins = [runs[k][0] for k in todo], [runs[k][1] for k in todo]
    results = run_programs(codes, stdins, timeout_s, runner)
    out = [StdioResult(False, "", "no code")] * len(runs)
    for k, res in zip(todo, results):
        ok = bool(res.ok)
        out[k] = StdioResult(ok, res.stdout or "", "" if ok else failure_text(res))
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
