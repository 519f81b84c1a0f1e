"""Plan-Path: walk from the start to the goal on a grid with obstacles.

Board symbols: ``P`` the walker, ``G`` the goal, ``#`` an obstacle, ``.`` a free cell; row 0 is
the top. Moves U/D/L/R (or up/down/left/right). A move off the grid or into an obstacle is
invalid: it is counted and penalised, and the walker stays put.

Shaped reward of one move (all constants in :class:`PlanPathRewards`)::

    r = step_penalty + [invalid] * invalid_penalty + [reached goal] * win_bonus
        + shaping * (Phi(s') - Phi(s)),        Phi(s) = -(BFS distance from s to the goal)

Potential-based shaping (gamma = 1) telescopes, so over a list it adds
``shaping * (d_start - d_end)`` and never changes which plans are optimal.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

from teamrl.tasks.games.actions import MOVES, parse_moves
from teamrl.tasks.games.builders import game_spec, register_game
from teamrl.tasks.games.episode import apply_actions, rewards_class
from teamrl.tasks.games.seeds import board_fits_seed, example_int, example_seed

Cell = tuple[int, int]


PlanPathRewards = rewards_class(
    "PlanPathRewards",
    """
step_penalty      -0.01  added for every move tried (valid or not)
invalid_penalty   -0.1   added for a move off the grid, into an obstacle, or an unknown token
win_bonus         10.0   added when the goal is reached
shaping           0.1    lambda of the shaping lambda*(Phi(s')-Phi(s)), Phi = -BFS distance
""",
    __name__,
)


def bfs_distances(grid: tuple[str, ...], source: Cell) -> dict[Cell, int]:
    """Shortest number of moves from ``source`` to every free cell reachable from it."""
    dist = {source: 0}
    queue = deque([source])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES.values():
            nxt = (r + dr, c + dc)
            if nxt not in dist and _free(grid, nxt):
                dist[nxt] = dist[(r, c)] + 1
                queue.append(nxt)
    return dist


def _free(grid: tuple[str, ...], cell: Cell) -> bool:
    r, c = cell
    return 0 <= r < len(grid) and 0 <= c < len(grid[0]) and grid[r][c] != "#"


class PlanPathState:
    """A board (rows of ``.``/``#``), the walker's position and the goal."""

    def __init__(
        self,
        grid: tuple[str, ...],
        pos: Cell,
        goal: Cell,
        rewards: PlanPathRewards | None = None,
    ) -> None:
        grid = tuple(grid)
        if not grid or any(len(row) != len(grid[0]) for row in grid):
            raise ValueError(f"plan_path.grid: expected equal-length rows, got {grid!r}")
        if any(ch not in ".#" for row in grid for ch in row):
            raise ValueError(f"plan_path.grid: cells must be '.' or '#', got {grid!r}")
        for name, cell in (("pos", pos), ("goal", goal)):
            if not _free(grid, cell):
                raise ValueError(f"plan_path.{name}: {cell} is off the grid or an obstacle")
        self.grid = grid
        self.pos = tuple(pos)
        self.goal = tuple(goal)
        self.rewards = rewards or PlanPathRewards()
        self.dist = bfs_distances(grid, self.goal)  # read-only, shared by copies
        if self.pos not in self.dist:
            raise ValueError(f"plan_path: goal {goal} is unreachable from {pos}")

    @classmethod
    def from_text(cls, text: str, rewards: PlanPathRewards | None = None) -> PlanPathState:
        """Parse a board drawn with P, G, #, . (spaces ignored), e.g. ``"P.#\\n..G"``."""
        rows = [ln.replace(" ", "") for ln in text.strip().splitlines()]
        pos = goal = None
        grid = []
        for r, row in enumerate(rows):
            for c, ch in enumerate(row):
                if ch == "P":
                    pos = (r, c)
                elif ch == "G":
                    goal = (r, c)
            grid.append(row.replace("P", ".").replace("G", "."))
        if pos is None or goal is None:
            raise ValueError(f"plan_path.from_text: need one 'P' and one 'G', got {text!r}")
        return cls(tuple(grid), pos, goal, rewards)

    def copy(self) -> PlanPathState:
        new = object.__new__(PlanPathState)
        new.__dict__.update(self.__dict__)  # grid and dist are immutable/read-only
        return new

    def is_solved(self) -> bool:
        return self.pos == self.goal

    @property
    def shortest_path_length(self) -> int:
        """BFS length of a shortest path from the current position to the goal."""
        return self.dist[self.pos]

    def shortest_path(self) -> list[str]:
        """One shortest move list from the current position (ties broken in U, D, L, R order)."""
        path, pos = [], self.pos
        while pos != self.goal:
            for move, (dr, dc) in MOVES.items():
                nxt = (pos[0] + dr, pos[1] + dc)
                if self.dist.get(nxt) == self.dist[pos] - 1:
                    path.append(move)
                    pos = nxt
                    break
        return path

    def apply(self, actions: list) -> tuple[PlanPathState, float, dict]:
        """Simulate ``actions`` on a copy; returns (new state, shaped reward, info)."""
        return apply_actions(self, actions, PlanPathState._move)

    def _move(self, action: Any, comps: dict) -> bool:
        delta = MOVES.get(action) if isinstance(action, str) else None
        nxt = None if delta is None else (self.pos[0] + delta[0], self.pos[1] + delta[1])
        if nxt is None or not _free(self.grid, nxt):
            return False
        # Phi = -dist, so Phi(s') - Phi(s) = dist(s) - dist(s')
        comps["shaping"] += self.rewards.shaping * (self.dist[self.pos] - self.dist[nxt])
        self.pos = nxt
        return True

    def render(self) -> str:
        rows = []
        for r, row in enumerate(self.grid):
            cells = list(row)
            if r == self.goal[0]:
                cells[self.goal[1]] = "G"
            if r == self.pos[0]:
                cells[self.pos[1]] = "P"
            rows.append(" ".join(cells))
        return "\n".join(rows)


def generate_plan_path(
    seed: int, size: int = 10, density: float = 0.3, rewards: PlanPathRewards | None = None
) -> PlanPathState:
    """A random ``size`` x ``size`` board whose goal is reachable, at BFS distance >= size // 2.

    Each cell is an obstacle with probability ``density``; boards are redrawn until the
    distance condition holds and the board's content bucket matches the seed's split
    (``seeds.board_split``). The same (seed, size, density) always gives the same board.
    """
    if isinstance(size, bool) or not isinstance(size, int) or not 3 <= size <= 30:
        raise ValueError(f"plan_path.size: expected an int in 3..30, got {size!r}")
    if not isinstance(density, int | float) or not 0.0 <= density <= 0.6:
        raise ValueError(f"plan_path.density: expected a number in [0, 0.6], got {density!r}")
    rng = random.Random(f"plan_path/{size}/{density}/{seed}")
    min_dist = max(2, size // 2)
    for _ in range(1000):
        grid = tuple(
            "".join("#" if rng.random() < density else "." for _ in range(size))
            for _ in range(size)
        )
        free = [(r, c) for r in range(size) for c in range(size) if grid[r][c] == "."]
        if len(free) < 2:
            continue
        start, goal = rng.sample(free, 2)
        if bfs_distances(grid, goal).get(start, -1) >= min_dist:
            state = PlanPathState(grid, start, goal, rewards)
            if board_fits_seed(state.render(), seed):
                return state
    raise RuntimeError(f"plan_path: no valid board for seed={seed}, size={size}, {density=}")


RULES = """Game: Plan-Path. Move the walker P to the goal G on the grid below.
Symbols: P = walker, G = goal, # = obstacle, . = free cell. Row 0 is the top row, column 0 the left.
Moves: U (row - 1), D (row + 1), L (column - 1), R (column + 1). A move off the grid or into an
obstacle is invalid and penalised; the walker stays where it is. Each move costs a little,
moving closer to the goal earns a little, and reaching the goal earns a large bonus.
An action list is a Python-style list of moves, e.g. ['R', 'R', 'D']."""


def _build(example: dict, rewards: PlanPathRewards) -> PlanPathState:
    seed = example_seed(example, "plan_path")
    size = example_int(example, "size", 10, "plan_path")
    return generate_plan_path(seed, size, example.get("density", 0.3), rewards)


_GAME = """
name            plan_path
title           Plan-Path
action_example  ['R', 'R', 'D']
tool_hint       Compute a shortest path from P to G (for example with breadth-first search).
summary         Plan-Path grid navigation
describe        Plan-Path {size}x{size}
"""
SPEC = game_spec(_GAME, RULES, _build, parse_moves)

# Registers "plan_path" (tool + plan agents) and "plan_path_single"; the board parameters come first.
plan_path_task, plan_path_single_task = register_game(
    _GAME, SPEC, PlanPathRewards, {"size": 10, "density": 0.3}
)
