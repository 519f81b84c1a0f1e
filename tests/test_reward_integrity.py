"""Issue 11, item 1: test outcomes are decided outside the solution's reach.

Every trick of ``hostile_programs.REWARD_TRICKS`` (always-equal objects, lying subclasses,
forged reports, exits, patched builtins, reading the expected values, writing to other file
descriptors) must score zero on the test-pass level of the function-task reward, in the real
sandbox; an honest solution passes every unit (so the test can tell the difference).
"""

from __future__ import annotations

import pytest

from teamrl.tasks.coding.reward import leveled_reward
from tests.hostile_programs import REWARD_TRICKS

PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
TEST = """\
import math
METADATA = {}
def check(candidate):
    assert candidate(1, 2) == 3
    assert candidate(2, 5) == 7
    assert candidate(-4, 1) == -3, "negative"
    assert math.isclose(candidate(0.5, 0.25), 0.75)
    for i in range(3):
        assert candidate(i, i) == 2 * i
"""


def score(main: str):
    return leveled_reward("", main, prompt=PROMPT, test=TEST, entry_point="add")


def test_honest_solution_passes_every_unit():
    r = score("def add(a, b):\n    return a + b\n")
    assert r.passed == 5 and r.tests == 1.0 and r.run_error == ""


def test_honest_subclass_results_are_read_as_plain_values():
    # An int subclass holding the right value is read as that int.
    main = "def add(a, b):\n    class I(int):\n        pass\n    s = a + b\n    return I(s) if s == int(s) else s\n"
    r = score(main)
    assert r.passed == 5


def test_wrong_solution_shows_what_it_got():
    r = score("def add(a, b):\n    return a - b\n")
    assert r.passed == 0  # the loop unit needs add(1, 1) == 2 too
    assert r.units[0].got == "-1" and r.units[1].got == "-3"


@pytest.mark.parametrize("name", sorted(REWARD_TRICKS))
def test_reward_trick_scores_zero(name):
    r = score(REWARD_TRICKS[name])
    assert r.passed == 0, [(u.source, u.error) for u in r.units]
    assert r.tests == 0.0 and r.cooperation == 0.0
