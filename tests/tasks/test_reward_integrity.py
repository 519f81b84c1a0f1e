"""Issue 11, item 1: test outcomes are decided outside the solution's reach.

Every trick of ``hostile_programs.REWARD_TRICKS`` (always-equal objects, lying subclasses,
forged reports, exits, patched builtins, reading the expected values, writing to other file
descriptors) must score zero on the test-pass level of the function-task reward, in the real
sandbox; an honest solution passes every unit (so the test can tell the difference).
"""

from __future__ import annotations

import re

import pytest
from hostile_programs import REWARD_TRICKS

from teamrl.tasks.coding.reward import leveled_reward

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


# ---------------------------------------------------------------------------------------------
# The stdin/stdout judges (coder/tester, math tool agent): the program's output is its answer,
# compared in the trainer with a value the program never had. Tricks that pass nothing there.

STDIO_TRICKS = {
    "print_success_then_exit": "import sys\nprint('ALL TESTS PASSED')\nsys.exit(0)\n",
    "os_exit_after_ok": "import os\nprint('ok', flush=True)\nos._exit(0)\n",
    "always_equal_printed": (
        "class A:\n    def __eq__(self, o):\n        return True\n"
        "    def __str__(self):\n        return 'anything'\nprint(A())\n"
    ),
    "expected_from_environment_and_files": (
        "import os, glob\nfound = [v for v in os.environ.values() if v.strip().isdigit()]\n"
        "for p in glob.glob('/proc/*/fd/*') + glob.glob('/tmp/*'):\n"
        "    try:\n        found.append(open(p).read().strip())\n    except Exception:\n"
        "        pass\nprint(found[-1] if found else 'nothing')\n"
    ),
    "write_to_every_fd": (
        "import os\nfor fd in range(3, 256):\n    try:\n        os.write(fd, b'42\\n')\n"
        "    except OSError:\n        pass\n"
    ),
}


@pytest.mark.parametrize("name", sorted(STDIO_TRICKS))
def test_stdio_tricks_pass_no_case(name):
    from teamrl.tasks.coding.stdio import stdio_pass_ratio

    tests = [{"input": "6 7\n", "output": "42"}, {"input": "2 3\n", "output": "6"}]
    ratio, _ = stdio_pass_ratio(STDIO_TRICKS[name], tests, timeout_s=5.0)
    assert ratio == 0.0
    honest = "a, b = map(int, input().split())\nprint(a * b)\n"
    assert stdio_pass_ratio(honest, tests, timeout_s=5.0)[0] == 1.0


@pytest.mark.parametrize("name", sorted(STDIO_TRICKS))
def test_math_tool_tricks_earn_no_correct_answer(name):
    from teamrl.tasks.math.env import MathEnv, MathEnvConfig

    env = MathEnv(MathEnvConfig(mode="sequential", max_turns=1))
    env.reset({"question": "Compute 6 x 7.", "answer": "42"})
    step = env.step({"tool": f"```python\n{STDIO_TRICKS[name]}```"})
    assert step.local_rewards["tool"] <= 0.0 and step.reward_components["tool/correct"] == 0.0
    env.reset({"question": "Compute 6 x 7.", "answer": "42"})
    step = env.step({"tool": "```python\nprint(6 * 7)\n```"})
    assert step.local_rewards["tool"] == 1.0


# ---------------------------------------------------------------------------------------------
# Issue 20, item 5: every reward that is not a finite float is a RewardError naming the example,
# the turn and the agent, through the rollout itself (the joint tree and the agent-turn tree).


def _bad_rewards() -> dict:
    import fractions

    import numpy as np
    import torch

    class BrokenRepr(float):
        def __repr__(self):
            raise RuntimeError("no repr")

    return {
        "huge_int": 10**400,  # float(10**400) raises OverflowError
        "huge_negative_int": -(10**400),
        "int_past_str_limit": 10**5000,  # repr() itself raises past 4300 digits
        "huge_fraction": fractions.Fraction(10**400, 3),
        "numpy_array_of_huge_int": np.array(10**400, dtype=object),
        "nan": float("nan"),
        "inf": float("inf"),
        "numpy_inf": np.float32("inf"),
        "torch_nan": torch.tensor(float("nan")),
        "nan_broken_repr": BrokenRepr("nan"),
        "string": "1.0",
        "bytes": b"1",
        "none": None,
        "complex": 1 + 0j,
        "numpy_complex": np.complex128(1),
        "decimal": __import__("decimal").Decimal("0.5"),
        "dict": {"a": 1.0},
        "two_elements": np.array([1.0, 2.0]),
        "empty_tensor": torch.tensor([]),
    }


BAD_REWARDS = _bad_rewards()


@pytest.mark.parametrize("name", sorted(BAD_REWARDS))
@pytest.mark.parametrize("tree", ["joint", "turns"])
def test_a_reward_that_is_not_a_finite_float_is_a_reward_error(name, tree):
    from helpers.rollout_joint import _joint
    from helpers.rollout_turns import _turns

    from teamrl.rollout.common import RewardError

    rollout = _joint if tree == "joint" else _turns
    with pytest.raises(RewardError) as err:
        rollout(lambda completions, example: BAD_REWARDS[name], max_turns=1)
    message = str(err.value)
    # example 3 (its index in the data), turn 0, the agents of the step, which reward
    assert re.match(r"example 3, turn 0, .*agents \['a'", message), message
    assert "reward error: the team reward is " in message and "\n" not in message


def test_huge_local_reward_names_its_agent():
    from teamrl.envs.base import Step
    from teamrl.rollout.common import RewardError, check_rewards

    step = Step(observations={}, reward=1.0, local_rewards={"bob": 10**400})
    with pytest.raises(RewardError, match=r"^example 2, turn 1: reward error: local_rewards"):
        check_rewards(step, "example 2, turn 1")
    with pytest.raises(RewardError, match=r"\(agent bob\) is 1000000000"):
        check_rewards(step, "example 2, turn 1")


@pytest.mark.parametrize(
    "value, expected",
    [
        (True, 1.0),  # a pass/fail reward function returning a bool
        (False, 0.0),
        (10**300, 1e300),  # a big int that floats hold
        (__import__("fractions").Fraction(3, 4), 0.75),
    ],
)
def test_bools_and_big_but_finite_numbers_are_rewards(value, expected):
    import numpy as np
    import torch

    from teamrl.rollout.common import as_reward

    for form in (value, np.array(value, dtype=object)):
        assert as_reward(form, "the team reward", "here") == expected
    if isinstance(value, bool):
        assert as_reward(np.bool_(value), "r", "here") == expected
        assert as_reward(torch.tensor(value), "r", "here") == expected
