"""Plan-Path: walk from the start to the goal on a grid with obstacles.

Board symbols: ``P`` the walker, ``G`` the goal, ``#`` an obstacle, ``.`` a free cell; row 0 is
the top. Moves U/D/L/R (or up/down/left/right). A move off the grid or into an obstacle is
invalid: it is counted and penalised, and the walker stays put.

Shaped reward of one move (all constants in :class:`PlanPathRewards`)::

    r = step_penalty + [invalid] * invalid_penalty + [reached goal] * win_bonus
        + [reached goal in a shortest number of moves] * optimal_bonus
        + shaping * (gamma * Phi(s') - Phi(s)),   Phi(s) = -(BFS distance from s to the goal)

With gamma = 1 (``shaping_gamma``, the default) the potential-based term telescopes: over a
list it adds ``shaping * (d_start - d_end)`` and never changes which plans are optimal, and an
invalid move (which stays put) gets no shaping. With gamma < 1 an invalid move earns
``shaping * (1 - gamma) * d``, as in the reference.

``PAPER_REWARDS`` holds the reference implementation's Plan-Path constants (PettingLLMs'
``PlanPathGridEnvState``: r_step -0.01, r_invalid -0.10 *instead of* the step cost, r_goal +1,
r_opt +0.5, lambda 1, gamma 0.99, Phi = -Manhattan distance). The defaults here differ (win +10,
lambda 0.1, the Sokoban scale); see docs/results.md, "Plan-Path shaping check". The one
structural difference left is the potential: BFS distance here, Manhattan there (equal when no
obstacle is in the way; BFS is the exact distance-to-go).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import Any

from teamrl.tasks.games.actions import MOVES, format_actions, parse_moves
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
shaping           0.1    lambda of the shaping lambda*(gamma*Phi(s')-Phi(s)), Phi = -BFS distance
optimal_bonus     0.0    added with win_bonus when the list reached the goal in a shortest number of moves
shaping_gamma     1.0    gamma of the shaping; 1 = telescoping (no bias); an invalid move stays put
""",
    __name__,
)


# The reference's Plan-Path constants (see the module docstring), as a ``rewards`` override:
# ``env.kwargs.rewards`` in a config. invalid_penalty is -0.09 because here the step cost is
# added to an invalid move too (-0.01 - 0.09 = the reference's -0.10).
PAPER_REWARDS: dict[str, float] = {
    "step_penalty": -0.01,
    "invalid_penalty": -0.09,
    "win_bonus": 1.0,
    "optimal_bonus": 0.5,
    "shaping": 1.0,
    "shaping_gamma": 0.99,
    "no_action_penalty": -1.0,
}
# What the experiments use: the reference's constants with gamma = 1. With gamma < 1 and
# Phi = -distance, every move (an invalid one too) earns lambda * (1 - gamma) * d, so far from
# the goal long lists of invalid moves score above answering nothing (d > 10 on 10x10 boards);
# gamma = 1 keeps the shaping a pure telescoping sum lambda * (d_start - d_end).
PROPOSED_REWARDS: dict[str, float] = {**PAPER_REWARDS, "shaping_gamma": 1.0}


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
        self.show_hint = False  # the learning ladder's rung 1: the prompt gives a shortest path
        self.tool_library = False  # the tool's programs get the board and shortest_path()
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

    def hint(self) -> str:
        """The line the prompt adds under the board when ``show_hint`` is set, else ""."""
        if not self.show_hint:
            return ""
        return f"A shortest path from P to G: {format_actions(self.shortest_path())}"

    def tool_preamble(self) -> str:
        """Python run before the tool agent's program when ``tool_library`` is set, else "":
        the board as data and a path-finding function (see ``TOOL_LIBRARY``)."""
        if not self.tool_library:
            return ""
        board = f"grid = {list(self.grid)!r}\nstart = {self.pos!r}\ngoal = {self.goal!r}\n"
        return board + TOOL_LIBRARY

    def tool_note(self) -> str:
        """What the tool agent's prompt says about the library ("" when it is off)."""
        if not self.tool_library:
            return ""
        return (
            "Your program starts with these names defined: grid (a list of row strings, '#' is an "
            "obstacle), start and goal ((row, column) tuples), and shortest_path(grid, start, "
            "goal), which returns a shortest action list."
        )

    def apply(self, actions: list) -> tuple[PlanPathState, float, dict]:
        """Simulate ``actions`` on a copy; returns (new state, shaped reward, info)."""
        return apply_actions(self, actions, PlanPathState._move, win_extra=PlanPathState._optimal)

    def _move(self, action: Any, comps: dict) -> bool:
        delta = MOVES.get(action) if isinstance(action, str) else None
        nxt = None if delta is None else (self.pos[0] + delta[0], self.pos[1] + delta[1])
        valid = nxt is not None and _free(self.grid, nxt)
        nxt = nxt if valid else self.pos  # an invalid move stays put
        # Phi = -dist, so gamma * Phi(s') - Phi(s) = dist(s) - gamma * dist(s'); staying put
        # earns lambda * (1 - gamma) * dist(s), which is 0 when gamma = 1.
        rw = self.rewards
        comps["shaping"] += rw.shaping * (self.dist[self.pos] - rw.shaping_gamma * self.dist[nxt])
        self.pos = nxt
        return valid

    def _optimal(self, tried: int) -> float:
        """At the win: optimal_bonus when the list took no detour and no invalid move (``self``
        is the state the list started from)."""
        return self.rewards.optimal_bonus if tried == self.dist[self.pos] else 0.0

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


# The tool agent's library (``tool_library: true``), run in the sandbox before its program. A
# 1.7B tool agent writes this search itself (the paper's setting); SmolLM2-135M cannot (its
# programs fail: docs/results.md, the learning ladder), so this setting asks the tool agent only
# to call the library and print the list, and the plan agent to use what the simulation shows.
TOOL_LIBRARY = """
from collections import deque


def shortest_path(grid, start, goal):
    steps = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
    start, goal = tuple(start), tuple(goal)
    came = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            moves = []
            while came[cell] is not None:
                cell, move = came[cell]
                moves.append(move)
            return moves[::-1]
        for move, (dr, dc) in steps.items():
            r, c = cell[0] + dr, cell[1] + dc
            free = 0 <= r < len(grid) and 0 <= c < len(grid[0]) and grid[r][c] != "#"
            if free and (r, c) not in came:
                came[(r, c)] = (cell, move)
                queue.append((r, c))
    return []
"""


def generate_plan_path(
    seed: int,
    size: int = 10,
    density: float = 0.3,
    rewards: PlanPathRewards | None = None,
    accept: Callable[[PlanPathState], bool] | None = None,
) -> PlanPathState:
    """A random ``size`` x ``size`` board whose goal is reachable, at BFS distance >= size // 2.

    Each cell is an obstacle with probability ``density``; boards are redrawn until the
    distance condition holds, ``accept(board)`` too where given (Plan-Path split's detour), and
    the board's content bucket matches the seed's split (``seeds.board_split``). The same
    (seed, size, density, accept) always gives the same board; without ``accept`` a seed gives
    the board it always gave.
    """
    if isinstance(size, bool) or not isinstance(size, int) or not 3 <= size <= 30:
        raise ValueError(f"plan_path.size: expected an int in 3..30, got {size!r}")
    if not isinstance(density, int | float) or not 0.0 <= density <= 0.6:
        raise ValueError(f"plan_path.density: expected a number in [0, 0.6], got {density!r}")
    rng = random.Random(f"plan_path/{size}/{density}/{seed}")
    min_dist = max(2, size // 2)
    # a filter keeps a tenth of the boards or fewer (a 4x4 detour), and the test bucket a tenth
    # of those: more draws, so a held-out seed still finds one
    for _ in range(1000 if accept is None else 20_000):
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
            if board_fits_seed(state.render(), seed) and (accept is None or accept(state)):
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
    hint = example.get("hint", False)
    if not isinstance(hint, bool):
        raise ValueError(f"plan_path.hint: expected true or false, got {hint!r}")
    library = example.get("tool_library", False)
    if not isinstance(library, bool):
        raise ValueError(f"plan_path.tool_library: expected true or false, got {library!r}")
    state = generate_plan_path(seed, size, example.get("density", 0.3), rewards)
    state.show_hint = hint  # after generation: the board never depends on either option
    state.tool_library = library
    return state


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
# ``hint`` (the learning ladder's rung 1) prints a shortest path under the board;
# ``tool_library`` gives the tool agent's programs the board and ``shortest_path`` (a one-agent
# solver has no sandbox, so there it changes nothing).
plan_path_task, plan_path_single_task = register_game(
    _GAME,
    SPEC,
    PlanPathRewards,
    {"size": 10, "density": 0.3, "hint": False, "tool_library": False},
)
