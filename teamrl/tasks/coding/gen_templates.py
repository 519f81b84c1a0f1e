"""The problem families of ``gencode``: small function problems at a small model's level.

A *template* is one family ("the sum of the multiples of k", "count the vowels", ...). Given a
seeded ``random.Random`` it returns a ``Spec``: the entry point's name and signature, the
docstring, the reference body (our code, never shown to the agents), the argument tuples of
the tests and, for the cooperative families, a helper spec: the function ``aux`` the prompt
asks the helper agent for (CoopHumanEval's idea) and the reference ``aux``. The constants,
thresholds, names and inputs vary with the draw, so one family yields many instances.

Tier 1 is here; tiers 2 and 3 are in ``gen_tier2`` and ``gen_tier3``. Tiers: 1 is one builtin or comprehension; 2 a loop with a condition, a small dict or string
walk; 3 a few steps chained (sorting with a key, grouping, a nested helper's logic).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

WORDS = (
    "apple banana cat dog egg fish grape house ice jam kite lemon moon nest orange pear queen "
    "rain sun tree umbrella violin water yard zebra bird cake door"
).split()


@dataclass(frozen=True)
class Helper:
    """The function ``aux`` the prompt asks the helper agent for, and its reference body."""

    params: str
    returns: str
    doc: str
    body: str


@dataclass(frozen=True)
class Spec:
    """One drawn problem: ``def {entry}({params}) -> {returns}`` with ``doc``; ``body`` is the
    reference body (it may call ``aux`` when ``helper`` is set); ``args`` the tests' argument
    tuples (the first is the docstring's example, the rest are the hidden asserts)."""

    entry: str
    params: str
    returns: str
    doc: str
    body: str
    args: list[tuple]
    helper: Helper | None = None


@dataclass(frozen=True)
class Template:
    name: str
    tier: int
    draw: Callable[[random.Random], Spec]


TEMPLATES: dict[str, Template] = {}


def template(name: str, tier: int) -> Callable:
    def register(draw: Callable[[random.Random], Spec]) -> Callable[[random.Random], Spec]:
        if name in TEMPLATES:
            raise ValueError(f"gencode template {name!r} registered twice")
        TEMPLATES[name] = Template(name, tier, draw)
        return draw

    return register


# -- input makers -------------------------------------------------------------------------

N_ARGS = 6  # one example + five hidden asserts


def ints(r: random.Random, lo: int = -9, hi: int = 20, n: tuple[int, int] = (0, 7)) -> list[int]:
    return [r.randint(lo, hi) for _ in range(r.randint(*n))]


def words(r: random.Random, n: tuple[int, int] = (0, 6)) -> list[str]:
    return [r.choice(WORDS) for _ in range(r.randint(*n))]


def sentence(r: random.Random) -> str:
    return " ".join(words(r, (1, 6)))


def many(make: Callable[[], object]) -> list[tuple]:
    """``N_ARGS`` one-argument tuples, distinct where the draw allows, the longest first (the
    docstring's example shows a case with something in it)."""
    return distinct(lambda: (make(),))


def distinct(make: Callable[[], tuple]) -> list[tuple]:
    """``N_ARGS`` argument tuples from ``make``, distinct where 100 draws allow, the longest
    (by ``repr``) first."""
    out: list[tuple] = []
    for _ in range(100):
        args = make()
        if args not in out:
            out.append(args)
        if len(out) == N_ARGS:
            break
    while len(out) < N_ARGS:
        out.append(make())
    first = max(range(len(out)), key=lambda i: len(repr(out[i])))
    return [out[first], *out[:first], *out[first + 1 :]]


# -- families of one parameter ------------------------------------------------------------
#
# Most families take one list of ints, one sentence or one list of words: ``unary`` builds
# their ``Spec`` from an ``Arg``, which names the parameter and the drawing of its test values
# together (``xs: List[int]`` is always drawn by ``ints``). A family whose inputs are its own
# (a dict, a grid, two lists, a string of brackets) builds its ``Spec`` itself.


@dataclass(frozen=True)
class Arg:
    """A family's one parameter (``param``, as the signature writes it) and how one test value
    of it is drawn (``draw``)."""

    param: str
    draw: Callable[[random.Random], object]


def int_list(lo: int = -9, hi: int = 20, n: tuple[int, int] = (0, 7)) -> Arg:
    """``xs: List[int]``, drawn by ``ints``."""
    return Arg("xs: List[int]", lambda r: ints(r, lo, hi, n))


def word_list(n: tuple[int, int] = (0, 6)) -> Arg:
    """``ws: List[str]``, drawn by ``words``."""
    return Arg("ws: List[str]", lambda r: words(r, n))


SENTENCE = Arg("s: str", sentence)  # lower-case words separated by single spaces


def unary(
    r: random.Random,
    names: str | list[str],
    arg: Arg,
    returns: str,
    doc: str,
    body: str,
    helper: Helper | None = None,
) -> Spec:
    """The ``Spec`` of a family of one parameter ``arg``: the entry point's name drawn from
    ``names`` (or ``names`` itself, a str), then the ``N_ARGS`` test values (``many``). The
    draws come in that order, as a family that builds its ``Spec`` itself makes them, so a seed
    draws the same problem either way."""
    entry = names if isinstance(names, str) else r.choice(names)
    return Spec(entry, arg.param, returns, doc, body, many(lambda: arg.draw(r)), helper)


# -- tier 1: one builtin or comprehension -------------------------------------------------


@template("add_constant", 1)
def _add_constant(r: random.Random) -> Spec:
    k = r.randint(1, 9)
    return unary(
        r,
        ["add_to_all", "shift_up", "plus_each"],
        int_list(),
        "List[int]",
        f"Return a new list with {k} added to every number of xs.",
        f"return [x + {k} for x in xs]",
    )


@template("multiply_all", 1)
def _multiply_all(r: random.Random) -> Spec:
    k = r.randint(2, 6)
    return unary(
        r,
        ["scale", "times_each", "multiply_all"],
        int_list(),
        "List[int]",
        f"Return a new list with every number of xs multiplied by {k}.",
        f"return [x * {k} for x in xs]",
    )


@template("square_each", 1)
def _square_each(r: random.Random) -> Spec:
    return unary(
        r,
        ["squares", "square_each", "square_all"],
        int_list(),
        "List[int]",
        "Return the list of the squares of the numbers in xs, in order.",
        "return [x * x for x in xs]",
    )


@template("absolute_values", 1)
def _absolute_values(r: random.Random) -> Spec:
    return unary(
        r,
        ["absolute_values", "abs_all", "magnitudes"],
        int_list(),
        "List[int]",
        "Return the list of the absolute values of the numbers in xs, in order.",
        "return [abs(x) for x in xs]",
    )


@template("largest_or_smallest", 1)
def _largest_or_smallest(r: random.Random) -> Spec:
    big = r.random() < 0.5
    word, fn = ("largest", "max") if big else ("smallest", "min")
    return unary(
        r,
        f"{word}_number",
        int_list(n=(1, 7)),
        "int",
        f"Return the {word} number in xs (xs is never empty).",
        f"return {fn}(xs)",
    )


@template("count_value", 1)
def _count_value(r: random.Random) -> Spec:
    v = r.randint(0, 5)
    return unary(
        r,
        ["count_value", "how_many", "occurrences"],
        int_list(0, 5, (0, 9)),
        "int",
        f"Return how many times the number {v} appears in xs.",
        f"return xs.count({v})",
    )


@template("contains_value", 1)
def _contains_value(r: random.Random) -> Spec:
    v = r.randint(0, 9)
    return unary(
        r,
        ["has_value", "contains", "includes"],
        int_list(0, 9),
        "bool",
        f"Return True if the number {v} is in xs, else False.",
        f"return {v} in xs",
    )


@template("change_case", 1)
def _change_case(r: random.Random) -> Spec:
    up = r.random() < 0.5
    word, method = ("upper", "upper") if up else ("lower", "lower")
    return Spec(
        f"to_{word}",
        "s: str",
        "str",
        f"Return s with every letter in {word} case.",
        f"return s.{method}()",
        many(lambda: "".join(c.upper() if r.random() < 0.4 else c for c in sentence(r))),
    )


@template("repeat_text", 1)
def _repeat_text(r: random.Random) -> Spec:
    n = r.randint(2, 4)
    return Spec(
        r.choice(["repeat", "repeat_text", "echo"]),
        "s: str",
        "str",
        f"Return s repeated {n} times, with nothing between the copies.",
        f"return s * {n}",
        many(lambda: r.choice(WORDS)[: r.randint(0, 4)]),
    )


@template("first_items", 1)
def _first_items(r: random.Random) -> Spec:
    n = r.randint(1, 4)
    first = r.random() < 0.5
    word, body = ("first", f"return xs[:{n}]") if first else ("last", f"return xs[-{n}:]")
    return unary(
        r,
        f"{word}_{n}" if r.random() < 0.5 else f"take_{word}",
        int_list(),
        "List[int]",
        f"Return the {word} {n} numbers of xs (all of xs if it is shorter), in order.",
        body,
    )


@template("join_words", 1)
def _join_words(r: random.Random) -> Spec:
    sep = r.choice(["-", ", ", "+", " / ", "_"])
    return unary(
        r,
        ["join_words", "glue", "link_words"],
        word_list(),
        "str",
        f"Return the words of ws joined into one string, with {sep!r} between them.",
        f"return {sep!r}.join(ws)",
    )


@template("starts_with", 1)
def _starts_with(r: random.Random) -> Spec:
    p = r.choice(["a", "b", "c", "s", "t", "pe", "ba"])
    return Spec(
        r.choice(["starts_with", "has_prefix", "begins_with"]),
        "s: str",
        "bool",
        f"Return True if s starts with {p!r}, else False.",
        f"return s.startswith({p!r})",
        many(lambda: r.choice(WORDS + ["", p])),
    )


@template("longer_than", 1)
def _longer_than(r: random.Random) -> Spec:
    t = r.randint(2, 6)
    return Spec(
        r.choice(["is_long", "longer_than", "is_wordy"]),
        "s: str",
        "bool",
        f"Return True if s has more than {t} characters, else False.",
        f"return len(s) > {t}",
        many(lambda: r.choice(WORDS)),
    )


@template("every_other", 1)
def _every_other(r: random.Random) -> Spec:
    start = r.randint(0, 1)
    which = "even" if start == 0 else "odd"
    return unary(
        r,
        f"{which}_positions",
        int_list(n=(0, 8)),
        "List[int]",
        f"Return the items of xs at {which} positions (counting from 0), in order.",
        f"return xs[{start}::2]",
    )


@template("total_plus", 1)
def _total_plus(r: random.Random) -> Spec:
    k = r.randint(1, 20)
    return unary(
        r,
        ["total_plus", "sum_and_add", "padded_sum"],
        int_list(),
        "int",
        f"Return the sum of the numbers in xs plus {k}.",
        f"return sum(xs) + {k}",
    )
