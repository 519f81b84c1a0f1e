"""Seeds of the generated games: disjoint train/eval/test ranges, and the examples' fields.

Eval and test come from the held-out range, disjoint from each other; a board's content
bucket (``board_split``) keeps train and test puzzles apart even when two seeds give one board.
"""

from __future__ import annotations

import hashlib

# Disjoint seed ranges: eval and test come from the held-out range, disjoint from each other.
SEED_RANGES: dict[str, range] = {
    "train": range(0, 1_000_000),
    "eval": range(1_000_000, 1_500_000),
    "test": range(1_500_000, 2_000_000),
}


def seed_split(seed: int) -> str | None:
    """The split whose seed range holds ``seed`` (None outside all ranges)."""
    return next((name for name, seeds in SEED_RANGES.items() if seed in seeds), None)


def board_split(key: str) -> str:
    """The split a board belongs to by *content*: a sha256 bucket of ``key`` (its text).

    Small boards repeat across seeds (6x6 Sokoban has only a few thousand distinct rooms), so
    disjoint seeds alone would put training boards in the test set. Generators redraw until
    ``board_split(board) == seed_split(seed)``: 80% of boards are train-only, 10% eval-only and
    10% test-only, whatever the seed.
    """
    bucket = hashlib.sha256(key.encode()).digest()[0] % 10
    return "test" if bucket == 0 else "eval" if bucket == 1 else "train"


def board_fits_seed(key: str, seed: int) -> bool:
    """True if a board with text ``key`` may be used for ``seed`` (see :func:`board_split`)."""
    split = seed_split(seed)
    return split is None or board_split(key) == split


def split_seeds(split: str, n: int) -> list[int]:
    """The first ``n`` seeds of ``split`` ("train", "eval" or "test")."""
    if split not in SEED_RANGES:
        raise ValueError(f"split: expected one of {sorted(SEED_RANGES)}, got {split!r}")
    seeds = SEED_RANGES[split]
    if not 0 <= n <= len(seeds):
        raise ValueError(f"n_{split}: expected 0..{len(seeds)}, got {n}")
    return list(seeds[:n])


def example_int(example: dict, key: str, default: int, game: str) -> int:
    """``example[key]`` as an int (``default`` if absent), with a clear error otherwise."""
    value = example.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{game}.{key}: expected an int, got {value!r}")
    return value


def example_seed(example: dict, game: str) -> int:
    if not isinstance(example, dict) or "seed" not in example:
        raise ValueError(f"{game}: example must be a dict with a 'seed', got {example!r}")
    return example_int(example, "seed", 0, game)
