"""Coding rows: a hand-made function task (4 test units), HumanEval, MBPP and CodeContests rows
in the upstream formats, and a folder of JSONL splits to load them from."""

from __future__ import annotations

import json

PROMPT = (
    "from typing import List\n\n\n"
    "def sum_of_squares(xs: List[int]) -> int:\n"
    '    """Return the sum of the squares of the numbers in xs."""\n'
)
TEST = (
    "def check(candidate):\n"
    "    assert candidate([]) == 0\n"
    "    assert candidate([1, 2]) == 5\n"
    "    assert candidate([3]) == 9\n"
    "    assert candidate([-1, 1]) == 2\n"
    "    assert True\n"
)
ENTRY = "sum_of_squares"


def _write_jsonl(folder, name: str, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


HE_ROW = {
    "task_id": "HumanEval/0",
    "prompt": PROMPT,
    "canonical_solution": "    return sum(x * x for x in xs)\n",
    "test": TEST,
    "entry_point": ENTRY,
}


MBPP_ROW = {
    "source_file": "x.py",
    "task_id": 2,
    "prompt": "Write a function to find the shared elements from the given two lists.",
    "code": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))\n",
    "test_imports": ["import math"],
    "test_list": [
        "assert set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))",
        "assert math.isclose(len(similar_elements((1, 2), (2, 3))), 1)",
    ],
}


def _cc_row(name: str, **over) -> dict:
    row = {
        "name": name,
        "description": "Print the sum of two integers.",
        "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
        "private_tests": {"input": ["5 5\n", "1 2\n"], "output": ["10\n", "3\n"]},
        "generated_tests": {"input": ["0 0\n"], "output": ["0\n"]},
        "source": 2,
        "difficulty": 7,
        "solutions": {
            "language": [2, 1, 3],
            "solution": ["int main(){}", "print 1", "a, b = map(int, input().split())\nprint(a+b)"],
        },
        "incorrect_solutions": {"language": [], "solution": []},
        "time_limit": {"seconds": 2, "nanos": 500000000},
        "memory_limit_bytes": 256000000,
    }
    row.update(over)
    return row
