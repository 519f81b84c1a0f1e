"""Sudoku, 4x4 (2x2 boxes, default) or 9x9 (3x3 boxes).

Action format: a list of placements ``(row, col, value)`` with 0-based row and column and
``value`` in 1..size, e.g. ``[(0, 1, 3), (2, 0, 4)]`` (tuples or inner lists). A placement is
invalid (counted, penalised, not applied) if it is off the board, its value is out of range, it
targets a given clue, or the value already appears elsewhere in the same row, column or box.
Cells the agent filled earlier may be overwritten. The puzzle is solved when the grid is full
with no conflicts.

Shaped reward of one placement (constants in :class:`SudokuRewards`)::

    r = step_penalty + [invalid] * invalid_penalty + [solved] * win_bonus
        + shaping * (Phi(s') - Phi(s)),     Phi(s) = number of non-clue cells equal to the solution

Generated puzzles have a unique solution (cells are removed only while the solution stays
unique), so "equal to the solution" is well defined.
"""

from __future__ import annotations

import random
import re
from math import isqrt
from typing import Any

from teamrl.tasks.games.actions import extract_action_segment
from teamrl.tasks.games.builders import game_spec, register_game
from teamrl.tasks.games.episode import apply_actions, rewards_class
from teamrl.tasks.games.seeds import board_fits_seed, example_int, example_seed

Grid = list[list[int]]


SudokuRewards = rewards_class(
    "SudokuRewards",
    """
step_penalty      -0.01  added for every placement tried (valid or not)
invalid_penalty   -0.1   added for a placement off the board, on a clue, or in conflict
win_bonus         10.0   added when the grid is solved
shaping           0.1    lambda of lambda*(Phi(s')-Phi(s)), Phi = correctly filled cells
""",
    __name__,
)


def box_shape(size: int) -> tuple[int, int]:
    """(box rows, box cols) of a ``size`` x ``size`` Sudoku."""
    if size not in (4, 9):
        raise ValueError(f"sudoku.size: expected 4 or 9, got {size!r}")
    b = isqrt(size)
    return b, b


def find_conflicts(grid: Grid) -> list[str]:
    """Human-readable conflicts: a value repeated in a row, column or box (0 = empty)."""
    n = len(grid)
    br, bc = box_shape(n)
    units = {f"row {r}": [(r, c) for c in range(n)] for r in range(n)}
    units |= {f"column {c}": [(r, c) for r in range(n)] for c in range(n)}
    for r0 in range(0, n, br):
        for c0 in range(0, n, bc):
            cells = [(r, c) for r in range(r0, r0 + br) for c in range(c0, c0 + bc)]
            units[f"box at ({r0}, {c0})"] = cells
    conflicts = []
    for name, cells in units.items():
        values = [grid[r][c] for r, c in cells if grid[r][c]]
        for v in sorted({v for v in values if values.count(v) > 1}):
            conflicts.append(f"{name} has {v} more than once")
    return conflicts


def _candidates(grid: Grid, r: int, c: int) -> set[int]:
    """Values that (r, c) could hold given every *other* cell of its row, column and box."""
    n = len(grid)
    br, bc = box_shape(n)
    r0, c0 = r - r % br, c - c % bc
    peers = {(r, j) for j in range(n)} | {(i, c) for i in range(n)}
    peers |= {(i, j) for i in range(r0, r0 + br) for j in range(c0, c0 + bc)}
    peers.discard((r, c))
    return set(range(1, n + 1)) - {grid[i][j] for i, j in peers}


def solve_sudoku(grid: Grid, limit: int = 2) -> tuple[int, Grid | None]:
    """(number of solutions found, capped at ``limit``; the first solution or None).

    Backtracking that always fills the empty cell with the fewest candidates.
    """
    work = [row[:] for row in grid]
    first: list[Grid] = []

    def search() -> int:
        best = None
        for r, row in enumerate(work):
            for c, v in enumerate(row):
                if v == 0:
                    cand = _candidates(work, r, c)
                    if best is None or len(cand) < len(best[2]):
                        best = (r, c, cand)
        if best is None:
            if not first:
                first.append([row[:] for row in work])
            return 1
        r, c, cand = best
        count = 0
        for v in sorted(cand):
            work[r][c] = v
            count += search()
            work[r][c] = 0
            if count >= limit:
                break
        return count

    if find_conflicts(work):
        return 0, None
    count = search()
    return count, (first[0] if first else None)


class SudokuState:
    """The current grid (0 = empty), the clue cells and the solution."""

    def __init__(
        self, puzzle: Grid, solution: Grid | None = None, rewards: SudokuRewards | None = None
    ) -> None:
        n = len(puzzle)
        box_shape(n)
        if any(len(row) != n for row in puzzle) or any(
            not isinstance(v, int) or not 0 <= v <= n for row in puzzle for v in row
        ):
            raise ValueError(f"sudoku.puzzle: expected {n} rows of {n} ints in 0..{n}")
        if find_conflicts(puzzle):
            raise ValueError(f"sudoku.puzzle: {find_conflicts(puzzle)}")
        if solution is None:
            count, solution = solve_sudoku(puzzle, limit=1)
            if count == 0:
                raise ValueError("sudoku.puzzle: has no solution")
        self.size = n
        self.grid = [list(row) for row in puzzle]
        self.clues = frozenset((r, c) for r in range(n) for c in range(n) if puzzle[r][c])
        self.solution = tuple(tuple(row) for row in solution)
        self.rewards = rewards or SudokuRewards()

    def copy(self) -> SudokuState:
        new = object.__new__(SudokuState)
        new.__dict__.update(self.__dict__)
        new.grid = [row[:] for row in self.grid]  # the only mutable field
        return new

    def is_solved(self) -> bool:
        return all(all(row) for row in self.grid) and not find_conflicts(self.grid)

    def potential(self) -> float:
        """Phi = number of non-clue cells equal to the solution."""
        n = self.size
        return float(
            sum(
                self.grid[r][c] == self.solution[r][c]
                for r in range(n)
                for c in range(n)
                if (r, c) not in self.clues
            )
        )

    def _valid(self, action) -> bool:
        if not isinstance(action, tuple | list) or len(action) != 3:
            return False
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in action):
            return False
        r, c, v = action
        n = self.size
        if not (0 <= r < n and 0 <= c < n and 1 <= v <= n) or (r, c) in self.clues:
            return False
        return v in _candidates(self.grid, r, c)

    def apply(self, actions: list) -> tuple[SudokuState, float, dict]:
        """Simulate placements on a copy; returns (new state, shaped reward, info)."""
        return apply_actions(self, actions, SudokuState._place)

    def _place(self, action: Any, comps: dict) -> bool:
        if not self._valid(action):
            return False
        r, c, v = action
        before = self.grid[r][c] == self.solution[r][c]
        self.grid[r][c] = v
        comps["shaping"] += self.rewards.shaping * ((v == self.solution[r][c]) - before)
        return True

    def render(self) -> str:
        n = self.size
        br, bc = box_shape(n)
        lines = []
        for r, row in enumerate(self.grid):
            if r and r % br == 0:
                lines.append("-+-".join(["-" * (2 * bc - 1)] * (n // bc)))
            groups = [
                " ".join(str(v) if v else "." for v in row[c : c + bc]) for c in range(0, n, bc)
            ]
            lines.append(" | ".join(groups))
        return "\n".join(lines)


def _random_full_grid(rng: random.Random, n: int) -> Grid:
    """A random valid full grid: the pattern (b*(r%b) + r//b + c) % n with shuffled bands,
    rows within bands, stacks, columns within stacks, and digits."""
    b = isqrt(n)

    def order() -> list[int]:
        return [g * b + i for g in rng.sample(range(b), b) for i in rng.sample(range(b), b)]

    rows, cols, digits = order(), order(), rng.sample(range(1, n + 1), n)
    return [[digits[(b * (r % b) + r // b + c) % n] for c in cols] for r in rows]


def generate_sudoku(
    seed: int, size: int = 4, n_empty: int | None = None, rewards: SudokuRewards | None = None
) -> SudokuState:
    """A puzzle with a unique solution and (up to) ``n_empty`` empty cells.

    The full grid is drawn until its content bucket matches the seed's split; its cells are
    emptied in random order, each kept empty only if the solution stays unique; if fewer than
    ``n_empty`` can be removed, the puzzle has fewer.
    Default ``n_empty``: 10 for 4x4, 45 for 9x9.
    """
    box_shape(size)
    if n_empty is None:
        n_empty = 10 if size == 4 else 45
    if isinstance(n_empty, bool) or not isinstance(n_empty, int) or not 1 <= n_empty < size**2:
        raise ValueError(f"sudoku.n_empty: expected an int in 1..{size**2 - 1}, got {n_empty!r}")
    rng = random.Random(f"sudoku/{size}/{n_empty}/{seed}")
    # A unique-solution puzzle determines its solution, so bucketing solutions by content keeps
    # train and test puzzles disjoint (seeds.board_split).
    for _ in range(1000):
        solution = _random_full_grid(rng, size)
        if board_fits_seed(str(solution), seed):
            break
    else:
        raise RuntimeError(f"sudoku: no grid for seed={seed}, size={size}")
    puzzle = [row[:] for row in solution]
    cells = [(r, c) for r in range(size) for c in range(size)]
    rng.shuffle(cells)
    removed = 0
    for r, c in cells:
        if removed == n_empty:
            break
        value, puzzle[r][c] = puzzle[r][c], 0
        if solve_sudoku(puzzle, limit=2)[0] == 1:
            removed += 1
        else:
            puzzle[r][c] = value
    return SudokuState(puzzle, solution, rewards)


_TRIPLE = re.compile(r"[(\[]\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*[)\]]")


def parse_placements(text: str, last_line_fallback: bool = False) -> list | None:
    """Placements ``(row, col, value)`` from the action list in ``text``; None if there is no
    well-formed list (anything but triples, commas, spaces and brackets in it: issue 11), and
    None for a list with no placement (``[]``: no action, with its penalty, not a free answer;
    see ``parse_moves``)."""
    segment = extract_action_segment(text, last_line_fallback=last_line_fallback)
    if segment is None or _TRIPLE.sub("", segment).strip("[](), \t\n"):
        return None
    return [tuple(int(x) for x in m) for m in _TRIPLE.findall(segment)] or None


RULES = """Game: Sudoku. Fill the empty cells (.) so that every row, every column and every box
(separated by | and -) contains each number from 1 to N exactly once (N = the board width).
Rows and columns are numbered from 0 (row 0 is the top, column 0 the left).
An action is a placement (row, col, value). A placement is invalid and penalised if it is off
the board, changes a given number, or repeats a value already in its row, column or box. You may
overwrite numbers you placed earlier. Each correct number earns a little; solving earns a bonus.
An action list is a Python-style list of placements, e.g. [(0, 1, 3), (2, 0, 4)]."""


def _build(example: dict, rewards: SudokuRewards) -> SudokuState:
    seed = example_seed(example, "sudoku")
    size = example_int(example, "size", 4, "sudoku")
    n_empty = example.get("n_empty")
    return generate_sudoku(seed, size, n_empty, rewards)


_GAME = """
name            sudoku
title           Sudoku
action_example  [(0, 1, 3), (2, 0, 4)]
tool_hint       Solve the grid (for example with backtracking search) and print a placement
    for every empty cell.
summary         Sudoku 4x4 (or 9x9)
describe        Sudoku {size}x{size}
"""
SPEC = game_spec(_GAME, RULES, _build, parse_placements)

# Registers "sudoku" (tool + plan agents) and "sudoku_single"; the board parameters come first.
sudoku_task, sudoku_single_task = register_game(
    _GAME, SPEC, SudokuRewards, {"size": 4, "n_empty": None}
)
