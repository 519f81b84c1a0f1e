"""Math problem sets, normalised to ``{"question", "answer", "source", "id"}`` rows.

Upstream loaders (``datasets.load_dataset``; the upstream id is the default, and
``dataset_id`` may name a local folder in the same layout, which is how the tests run):

    GSM8K          openai/gsm8k, config "main", splits train/test; the final answer is the
                   text after "####" in ``answer`` (thousands commas removed).
    AIME 2024      Maxwell-Jia/AIME_2024 (the set PettingLLMs evaluates on), split "train"
                   (30 problems, one parquet file): ``ID``, ``Problem``, ``Answer`` (an int).
                   Lower-case columns are read too, so HuggingFaceH4/aime_2024 (``id``,
                   ``problem``, ``answer``) also works as ``dataset_id``.
    AIME 2025      yentinglin/aime_2025, split "train" (30 problems, contests I and II in one
                   config): ``problem``, ``answer``. Chosen over opencompass/AIME2025, which
                   splits the contests into two configs; it is also the set PettingLLMs used.
    OlympiadBench  Hothan/OlympiadBench, config "OE_TO_maths_en_COMP" (open-ended, text-only,
                   English competition maths), split "train": ``question``, ``final_answer``
                   (a list; several answers are joined with ", ").

A malformed row raises ``ValueError`` naming the source, the row index and the field.
A local folder is re-read on every call (see ``_load_rows``).

``arithmetic_problems`` is a procedural, fully offline set of arithmetic expressions and
word problems with exact integer answers; its splits are disjoint by construction (each
question's SHA-256 decides its split, so the same text can never land in two splits).
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from teamrl.errors import ConfigError
from teamrl.tasks.hub import check_dataset_id, load_dataset
from teamrl.tasks.options import option

# what a user whose hub data cannot be fetched (no network) can pass instead
HUB_INSTEAD = (
    "env.kwargs.source=arithmetic for the builtin problems, or a local folder holding a copy "
    "of the dataset as env.kwargs.dataset_id (train_dataset_id for a benchmark's training set)"
)

# --------------------------------------------------------------------------------------
# Upstream loaders
# --------------------------------------------------------------------------------------


def _load_rows(
    dataset_id: str, name: str | None, split: str, limit: int | None, cache_dir: str | None
) -> Any:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(f"env.kwargs.limit: expected None or an integer >= 0, got {limit!r}")
    check_dataset_id(dataset_id)
    # The datasets cache keys a local folder by its name, not its content, so a folder that
    # changed (or another folder of the same name) would be served stale: rebuild it.
    fresh = "force_redownload" if os.path.isdir(dataset_id) else None
    ds = load_dataset(
        dataset_id,
        name,
        split=split,
        cache_dir=cache_dir,
        download_mode=fresh,
        dataset=dataset_id,
        instead=HUB_INSTEAD,
    )
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    return ds


def _text(row: dict, index: int, source: str, names: tuple[str, ...]) -> str:
    """The first of ``names`` present in ``row``, as a non-empty string."""
    for name in names:
        if name in row and row[name] is not None:
            value = row[name]
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise ValueError(
                    f"{source} row {index}: field {name!r} must be a string, "
                    f"got {type(value).__name__} {value!r:.60}"
                )
            value = str(value).strip()
            if not value:
                raise ValueError(f"{source} row {index}: field {name!r} is empty")
            return value
    raise ValueError(f"{source} row {index}: missing field {' or '.join(map(repr, names))}")


def _row_id(row: dict, index: int, source: str, split: str, names=("id",)) -> Any:
    for name in names:
        value = row.get(name)
        if value is not None and value != "":
            return value
    return f"{source}-{split}-{index}"


def _gsm8k_row(row: dict, i: int, split: str) -> tuple[str, str, str]:
    """GSM8K: the gold answer is what follows ``####``."""
    question = _text(row, i, "gsm8k", ("question",))
    solution = _text(row, i, "gsm8k", ("answer",))
    if "####" not in solution:
        raise ValueError(
            f"gsm8k row {i}: field 'answer' has no '#### <final answer>' marker: {solution[-60:]!r}"
        )
    final = solution.rsplit("####", 1)[1].strip().replace(",", "")
    if not final:
        raise ValueError(f"gsm8k row {i}: field 'answer' is empty after '####'")
    return question, final, f"gsm8k-{split}-{i}"


def _aime_row(source: str) -> Callable[[dict, int, str], tuple[str, str, str]]:
    # Column names in either casing: Maxwell-Jia/AIME_2024 capitalises them (ID, Problem,
    # Answer), the HuggingFaceH4 and yentinglin sets do not.
    def read(row: dict, i: int, split: str) -> tuple[str, str, str]:
        question = _text(row, i, source, ("problem", "Problem", "question", "Question"))
        answer = _text(row, i, source, ("answer", "Answer"))
        if answer.isdigit():  # "033" and 33 are the same AIME answer
            answer = str(int(answer))
        return question, answer, _row_id(row, i, source, split, ("id", "ID"))

    return read


def _olympiadbench_row(row: dict, i: int, split: str) -> tuple[str, str, str]:
    """OlympiadBench: ``final_answer`` items (``$...$`` stripped) joined with ", "."""
    question = _text(row, i, "olympiadbench", ("question",))
    finals = row.get("final_answer")
    if isinstance(finals, str):
        finals = [finals]
    if not isinstance(finals, (list, tuple)) or not finals:
        raise ValueError(
            f"olympiadbench row {i}: field 'final_answer' must be a non-empty list, "
            f"got {finals!r:.60}"
        )
    parts = []
    for item in finals:
        text = str(item).strip() if item is not None else ""
        text = text[1:-1].strip() if len(text) >= 2 and text[0] == text[-1] == "$" else text
        if not text:
            raise ValueError(f"olympiadbench row {i}: field 'final_answer' has an empty item")
        parts.append(text)
    return question, ", ".join(parts), _row_id(row, i, "olympiadbench", split)


def _loader(
    source: str,
    default_id: str,
    default_name: str | None,
    read: Callable[[dict, int, str], tuple[str, str, str]],
    doc: str,
) -> Callable[..., list[dict]]:
    """``load(split, *, dataset_id, name, limit, cache_dir)``: one benchmark's rows
    ``{"question", "answer", "source", "id"}``, each read from a hub row by ``read``."""

    def load(
        split: str = "train",
        *,
        dataset_id: str = default_id,
        name: str | None = default_name,
        limit: int | None = None,
        cache_dir: str | None = None,
    ) -> list[dict]:
        rows = []
        for i, row in enumerate(_load_rows(dataset_id, name, split, limit, cache_dir)):
            question, answer, row_id = read(row, i, split)
            rows.append({"question": question, "answer": answer, "source": source, "id": row_id})
        return rows

    load.__name__ = load.__qualname__ = f"load_{source}"
    load.__doc__ = doc
    return load


load_gsm8k = _loader(
    "gsm8k",
    "openai/gsm8k",
    "main",
    _gsm8k_row,
    "GSM8K grade-school word problems; the gold answer is what follows ``####``.",
)
load_aime2024 = _loader(
    "aime2024",
    "Maxwell-Jia/AIME_2024",
    None,
    _aime_row("aime2024"),
    "AIME 2024 I and II (30 problems, integer answers 0-999).",
)
load_aime2025 = _loader(
    "aime2025",
    "yentinglin/aime_2025",
    None,
    _aime_row("aime2025"),
    "AIME 2025 I and II (30 problems, integer answers 0-999).",
)
load_olympiadbench = _loader(
    "olympiadbench",
    "Hothan/OlympiadBench",
    "OE_TO_maths_en_COMP",
    _olympiadbench_row,
    'OlympiadBench open-ended problems; ``final_answer`` items are joined with ", ".',
)


LOADERS = {
    "gsm8k": load_gsm8k,
    "aime2024": load_aime2024,
    "aime2025": load_aime2025,
    "olympiadbench": load_olympiadbench,
}


# --------------------------------------------------------------------------------------
# Procedural arithmetic
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArithmeticConfig:
    """Difficulty knobs of ``arithmetic_problems``."""

    min_ops: int = option(1, "Fewest operations in a problem.")
    max_ops: int = option(3, "Most operations in a problem.")
    max_value: int = option(20, "Largest operand (operands are drawn from 1..max_value).")
    word_ratio: float = option(0.5, "Share of word problems (when a template fits the op range).")

    def __post_init__(self) -> None:
        if not 1 <= self.min_ops <= self.max_ops:
            raise ValueError(
                f"arithmetic: expected 1 <= min_ops <= max_ops, got {self.min_ops}, {self.max_ops}"
            )
        if self.max_value < 2:
            raise ValueError(f"arithmetic.max_value: expected >= 2, got {self.max_value}")
        if not 0.0 <= self.word_ratio <= 1.0:
            raise ValueError(f"arithmetic.word_ratio: expected 0..1, got {self.word_ratio}")


# A tree is an int (a leaf) or (op, left, right) with op in "+-*/".
_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}
_SPLITS = {"train": (0, 80), "eval": (80, 90), "test": (90, 100)}  # SHA-256 buckets of 100


def _value(tree) -> Fraction:
    if isinstance(tree, int):
        return Fraction(tree)
    op, left, right = tree
    a, b = _value(left), _value(right)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return a / b  # divisors are leaves >= 2 (or template constants), never 0


def _render(tree, symbols: dict[str, str]) -> str:
    """Infix text with the fewest safe brackets: a left child is bracketed when it binds
    looser than its parent, a right child when it binds looser or equally (a - (b - c))."""
    if isinstance(tree, int):
        return str(tree)
    op, left, right = tree
    text_l, text_r = _render(left, symbols), _render(right, symbols)
    if not isinstance(left, int) and _PREC[left[0]] < _PREC[op]:
        text_l = f"({text_l})"
    if not isinstance(right, int) and _PREC[right[0]] <= _PREC[op]:
        text_r = f"({text_r})"
    return f"{text_l} {symbols[op]} {text_r}"


_PYTHON = {"+": "+", "-": "-", "*": "*", "/": "/"}
_DISPLAY = {"+": "+", "-": "-", "*": "×", "/": "÷"}


def _random_tree(rng: random.Random, n_ops: int, max_value: int):
    if n_ops == 0:
        return rng.randint(1, max_value)
    n_left = rng.randint(0, n_ops - 1)
    left = _random_tree(rng, n_left, max_value)
    op = rng.choice("+-*/")
    if op == "/":  # exact division: the divisor is a leaf that divides the left value
        value = _value(left)
        divisors = [d for d in range(2, min(12, max_value) + 1) if value % d == 0]
        if divisors and n_ops - 1 - n_left == 0:
            return ("/", left, rng.choice(divisors))
        op = rng.choice("+-*")
    return (op, left, _random_tree(rng, n_ops - 1 - n_left, max_value))


_NAMES = ("Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jonas")
_ITEMS = ("apples", "pencils", "stickers", "marbles", "cards", "shells")


def _word_boxes(rng: random.Random, m: int):
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    a, b = rng.randint(2, m), rng.randint(2, m)
    c = rng.randint(1, a * b)
    text = (
        f"{name} has {a} boxes with {b} {item} in each box and gives {c} {item} to a friend. "
        f"How many {item} does {name} have now?"
    )
    return text, ("-", ("*", a, b), c)


def _word_change(rng: random.Random, m: int):
    name = rng.choice(_NAMES)
    a, b = rng.randint(2, m), rng.randint(2, m)
    paid = a * b + rng.randint(0, m)
    text = (
        f"{name} buys {a} notebooks that cost {b} dollars each and pays with {paid} dollars. "
        f"How many dollars of change does {name} get back?"
    )
    return text, ("-", paid, ("*", a, b))


def _word_reading(rng: random.Random, m: int):
    name = rng.choice(_NAMES)
    a, b, c = rng.randint(2, m), rng.randint(2, m), rng.randint(2, m)
    text = (
        f"{name} reads {a} pages every day for {b} days, then {c} more pages on Sunday. "
        f"How many pages does {name} read in total?"
    )
    return text, ("+", ("*", a, b), c)


def _word_teams(rng: random.Random, m: int):
    teams, size, extra = rng.randint(2, m), rng.randint(2, m), rng.randint(1, m)
    text = (
        f"{teams * size} students are split equally into {teams} teams. Then {extra} more "
        f"students join each team. How many students are in each team now?"
    )
    return text, ("+", ("/", teams * size, teams), extra)


def _word_bags(rng: random.Random, m: int):
    trays, per_tray = rng.randint(2, m), rng.randint(2, m)
    total = trays * per_tray
    bag = rng.randint(2, min(m, total))
    bags = rng.randint(1, total // bag)
    sold = total - bag * bags
    text = (
        f"A baker bakes {trays} trays of {per_tray} cookies each and sells {sold} cookies. "
        f"The rest are packed into bags of {bag}. How many bags does the baker fill?"
    )
    return text, ("/", ("-", ("*", trays, per_tray), sold), bag)


def _word_found(rng: random.Random, m: int):
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    a, b = rng.randint(2, m), rng.randint(2, m)
    text = f"{name} had {a} {item} and found {b} more. How many {item} does {name} have now?"
    return text, ("+", a, b)


def _word_savings(rng: random.Random, m: int):
    name = rng.choice(_NAMES)
    a, b = rng.randint(2, m), rng.randint(2, m)
    text = f"{name} saves {a} dollars every week for {b} weeks. How many dollars is that?"
    return text, ("*", a, b)


# (number of operations, template)
_WORD_TEMPLATES = (
    (1, _word_found),
    (1, _word_savings),
    (2, _word_boxes),
    (2, _word_change),
    (2, _word_reading),
    (2, _word_teams),
    (3, _word_bags),
)


def _split_of(question: str) -> str:
    bucket = int(hashlib.sha256(question.encode()).hexdigest(), 16) % 100
    return next(s for s, (lo, hi) in _SPLITS.items() if lo <= bucket < hi)


def arithmetic_problems(
    split: str,
    n: int,
    seed: int = 0,
    *,
    config: ArithmeticConfig | None = None,
) -> list[dict]:
    """``n`` distinct generated problems of ``split`` ("train", "eval" or "test").

    Deterministic in ``(split, n, seed, config)``. Problems are drawn from one stream per
    seed and kept when the SHA-256 of their question falls in the split's bucket (80/10/10),
    so splits never share a question. Rows also carry ``expression`` (a Python expression
    whose value is the answer), ``kind`` ("expression" or "word") and ``n_ops``.
    """
    if split not in _SPLITS:
        raise ValueError(f"split: expected one of {sorted(_SPLITS)}, got {split!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n: expected an integer >= 0, got {n!r}")
    cfg = config or ArithmeticConfig()
    rng = random.Random(f"arithmetic-{seed}")
    templates = [t for k, t in _WORD_TEMPLATES if cfg.min_ops <= k <= cfg.max_ops]
    rows: list[dict] = []
    seen: set[str] = set()
    for _ in range(200 * n + 1000):
        if len(rows) == n:
            break
        if templates and rng.random() < cfg.word_ratio:
            question, tree = rng.choice(templates)(rng, cfg.max_value)
            kind = "word"
        else:
            tree = _random_tree(rng, rng.randint(cfg.min_ops, cfg.max_ops), cfg.max_value)
            question = f"Compute {_render(tree, _DISPLAY)}."
            kind = "expression"
        if question in seen or _split_of(question) != split:
            continue
        seen.add(question)
        value = _value(tree)
        if value.denominator != 1:  # a generator bug, never a data property
            raise RuntimeError(f"arithmetic: non-integer answer {value} for {question!r}")
        digest = hashlib.sha256(question.encode()).hexdigest()[:12]
        rows.append(
            {
                "question": question,
                "answer": str(value.numerator),
                "source": "arithmetic",
                "id": f"arithmetic-{digest}",
                "expression": _render(tree, _PYTHON),
                "kind": kind,
                "n_ops": _count_ops(tree),
            }
        )
    if len(rows) < n:
        raise ValueError(
            f"arithmetic_problems: found only {len(rows)} distinct {split} problems of {n}; "
            f"raise max_value or max_ops"
        )
    return rows


def _count_ops(tree) -> int:
    return 0 if isinstance(tree, int) else 1 + _count_ops(tree[1]) + _count_ops(tree[2])
