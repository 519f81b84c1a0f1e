"""``gencode`` tier 3: a few steps chained (sorting with a key, grouping, a helper's logic
applied in a loop)."""

from __future__ import annotations

import random

from teamrl.tasks.coding.gen_templates import (
    SENTENCE,
    WORDS,
    Helper,
    Spec,
    distinct,
    int_list,
    ints,
    many,
    template,
    unary,
    word_list,
)


@template("second_largest", 3)
def _second_largest(r: random.Random) -> Spec:
    return unary(
        r,
        ["second_largest", "runner_up"],
        int_list(0, 9),
        "int",
        "Return the second largest distinct number of xs, or None if xs has fewer than two "
        "distinct numbers.",
        "u = sorted(set(xs))\nreturn u[-2] if len(u) >= 2 else None",
    )


@template("run_length", 3)
def _run_length(r: random.Random) -> Spec:
    return Spec(
        r.choice(["run_length", "compress"]),
        "s: str",
        "str",
        "Return the run-length code of s: each run of one repeated letter becomes the letter "
        'followed by the run\'s length ("aaab" becomes "a3b1").',
        "out = ''\ni = 0\nwhile i < len(s):\n    j = i\n    while j < len(s) and s[j] == s[i]:\n"
        "        j += 1\n    out += s[i] + str(j - i)\n    i = j\nreturn out",
        many(lambda: "".join(r.choice("ab") * r.randint(1, 3) for _ in range(r.randint(0, 4)))),
    )


@template("group_by_letter", 3)
def _group_by_letter(r: random.Random) -> Spec:
    return Spec(
        r.choice(["group_by_letter", "by_first_letter"]),
        "ws: List[str]",
        "Dict[str, List[str]]",
        "Return a dict mapping each first letter to the words of ws starting with it, in order.",
        "d = {}\nfor w in ws:\n    d.setdefault(w[0], []).append(w)\nreturn d",
        many(lambda: [r.choice(WORDS[:8]) for _ in range(r.randint(0, 6))]),
    )


@template("caesar_shift", 3)
def _caesar_shift(r: random.Random) -> Spec:
    k = r.randint(1, 5)
    return unary(
        r,
        ["caesar", "shift_letters"],
        SENTENCE,
        "str",
        f"Return s with every lower-case letter moved {k} places forward in the alphabet "
        "(wrapping from 'z' to 'a'); other characters stay.",
        "return ''.join(aux(c) for c in s)",
        Helper(
            "c: str",
            "str",
            f"the letter c moved {k} places forward (wrapping), or c if not a lower-case letter",
            f"if 'a' <= c <= 'z':\n    return chr((ord(c) - 97 + {k}) % 26 + 97)\nreturn c",
        ),
    )


@template("merge_counts", 3)
def _merge_counts(r: random.Random) -> Spec:
    def make() -> tuple:
        return tuple(
            {k: r.randint(1, 9) for k in r.sample(WORDS[:6], r.randint(0, 3))} for _ in range(2)
        )

    return Spec(
        r.choice(["merge_counts", "add_dicts"]),
        "a: Dict[str, int], b: Dict[str, int]",
        "Dict[str, int]",
        "Return a dict with every key of a or b, mapped to the sum of its values in both "
        "(a missing key counts 0).",
        "out = dict(a)\nfor k, v in b.items():\n    out[k] = out.get(k, 0) + v\nreturn out",
        distinct(make),
    )


@template("most_common", 3)
def _most_common(r: random.Random) -> Spec:
    return unary(
        r,
        ["most_common", "mode"],
        int_list(0, 5, (1, 8)),
        "int",
        "Return the number that appears most often in xs (the smallest one on a tie; xs is "
        "never empty).",
        "return min(set(xs), key=lambda x: (-xs.count(x), x))",
    )


@template("primes_only", 3)
def _primes_only(r: random.Random) -> Spec:
    return unary(
        r,
        ["primes_only", "keep_primes"],
        int_list(0, 40),
        "List[int]",
        "Return the prime numbers of xs, in order.",
        "return [x for x in xs if aux(x)]",
        Helper(
            "n: int",
            "bool",
            "True if n is a prime number",
            "if n < 2:\n    return False\nfor d in range(2, int(n ** 0.5) + 1):\n"
            "    if n % d == 0:\n        return False\nreturn True",
        ),
    )


@template("sort_by_length", 3)
def _sort_by_length(r: random.Random) -> Spec:
    return unary(
        r,
        ["sort_by_length", "order_words"],
        word_list(),
        "List[str]",
        "Return the words of ws sorted by length, and alphabetically among words of one length.",
        "return sorted(ws, key=lambda w: (len(w), w))",
    )


@template("vowel_rich_words", 3)
def _vowel_rich_words(r: random.Random) -> Spec:
    t = r.randint(1, 2)
    return unary(
        r,
        ["vowel_rich", "wordy_vowels"],
        word_list(),
        "List[str]",
        f"Return the words of ws that contain more than {t} vowels (a, e, i, o, u), in order.",
        f"return [w for w in ws if aux(w) > {t}]",
        Helper(
            "w: str",
            "int",
            "the number of vowels in the word w",
            'return sum(1 for c in w if c in "aeiou")',
        ),
    )


@template("transpose", 3)
def _transpose(r: random.Random) -> Spec:
    def make() -> list:
        n, m = r.randint(1, 3), r.randint(1, 3)
        return [[r.randint(0, 9) for _ in range(m)] for _ in range(n)]

    return Spec(
        r.choice(["transpose", "flip_grid"]),
        "grid: List[List[int]]",
        "List[List[int]]",
        "Return the transpose of grid (a non-empty list of rows of equal length): row i of "
        "the result is column i of grid.",
        "return [[row[i] for row in grid] for i in range(len(grid[0]))]",
        many(make),
    )


@template("flatten_above", 3)
def _flatten_above(r: random.Random) -> Spec:
    t = r.randint(0, 6)
    return Spec(
        r.choice(["flatten_above", "collect_big"]),
        "rows: List[List[int]]",
        "List[int]",
        f"Return the numbers of all the lists in rows that are greater than {t}, in order.",
        f"return [x for row in rows for x in row if x > {t}]",
        many(lambda: [ints(r, 0, 12, (0, 4)) for _ in range(r.randint(0, 4))]),
    )


@template("mean_above", 3)
def _mean_above(r: random.Random) -> Spec:
    t = r.randint(0, 6)
    return unary(
        r,
        ["mean_above", "average_big"],
        int_list(0, 20),
        "int",
        f"Return the sum of the numbers of xs greater than {t}, floor-divided by how many "
        "there are (0 if there are none).",
        f"big = [x for x in xs if x > {t}]\nreturn sum(big) // len(big) if big else 0",
    )


@template("acronym", 3)
def _acronym(r: random.Random) -> Spec:
    return unary(
        r,
        ["acronym", "initials"],
        SENTENCE,
        "str",
        "Return the first letters of the words of s (separated by spaces), in upper case, "
        "joined together.",
        "return ''.join(w[0].upper() for w in s.split())",
    )


@template("alternating_sum", 3)
def _alternating_sum(r: random.Random) -> Spec:
    return unary(
        r,
        ["alternating_sum", "plus_minus"],
        int_list(),
        "int",
        "Return xs[0] - xs[1] + xs[2] - xs[3] + ... (0 for an empty list).",
        "return sum(x if i % 2 == 0 else -x for i, x in enumerate(xs))",
    )


@template("collatz_steps", 3)
def _collatz_steps(r: random.Random) -> Spec:
    return Spec(
        r.choice(["collatz_steps", "steps_to_one"]),
        "n: int",
        "int",
        "Return how many steps take n (>= 1) to 1, where a step halves an even number and "
        "turns an odd number m into 3 * m + 1.",
        "steps = 0\nwhile n != 1:\n    n = aux(n)\n    steps += 1\nreturn steps",
        many(lambda: r.randint(1, 40)),
        Helper(
            "n: int",
            "int",
            "n // 2 if n is even, else 3 * n + 1",
            "return n // 2 if n % 2 == 0 else 3 * n + 1",
        ),
    )


@template("balanced_brackets", 3)
def _balanced_brackets(r: random.Random) -> Spec:
    return Spec(
        r.choice(["balanced", "brackets_match"]),
        "s: str",
        "bool",
        "Return True if the round brackets of s are balanced: every '(' is closed by a later "
        "')' and no ')' comes before its '('.",
        "depth = 0\nfor c in s:\n    if c == '(':\n        depth += 1\n    elif c == ')':\n"
        "        depth -= 1\n        if depth < 0:\n            return False\nreturn depth == 0",
        many(lambda: "".join(r.choice("()") for _ in range(r.randint(0, 6)))),
    )


@template("count_in_range", 3)
def _count_in_range(r: random.Random) -> Spec:
    lo = r.randint(0, 5)
    hi = lo + r.randint(2, 6)
    return unary(
        r,
        ["count_in_range", "between_count"],
        int_list(-3, 15),
        "Dict[str, int]",
        f"Return a dict with keys 'below', 'inside' and 'above': how many numbers of xs are "
        f"below {lo}, from {lo} to {hi} inclusive, and above {hi}.",
        "d = {'below': 0, 'inside': 0, 'above': 0}\nfor x in xs:\n    d[aux(x)] += 1\nreturn d",
        Helper(
            "x: int",
            "str",
            f"'below' if x < {lo}, 'above' if x > {hi}, else 'inside'",
            f"if x < {lo}:\n    return 'below'\nif x > {hi}:\n    return 'above'\nreturn 'inside'",
        ),
    )
