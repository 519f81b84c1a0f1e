"""Sokoban: push every box onto a goal.

Board symbols: ``#`` wall, ``.`` floor, ``G`` goal, ``B`` box, ``*`` box on a goal, ``P`` player,
``+`` player on a goal; row 0 is the top. Moves U/D/L/R. Walking into a wall, or pushing a box
into a wall or another box, is invalid: counted, penalised, nothing moves.

Shaped reward of one move (constants in :class:`SokobanRewards`, defaults as in PettingLLMs)::

    r = step_penalty + [invalid] * invalid_penalty
        + [a box reaches a goal] * box_on_goal + [a box leaves a goal] * box_off_goal
        + [all boxes on goals] * win_bonus + shaping * (Phi(s') - Phi(s)),
    Phi(s) = -sum over boxes of the Manhattan distance to the nearest goal.

The on/off bonuses are asymmetric (+1 / -0.5), so with several boxes pushing one box on and off
a goal repeatedly gains reward; with the default single box, on-goal is the win and ends the
list. Generation plays the game backwards from the solved state (pulling boxes), so every
generated board is solvable; :meth:`SokobanState.solve` finds an optimal solution by BFS.
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


SokobanRewards = rewards_class(
    "SokobanRewards",
    """
step_penalty      -0.01  added for every move tried (valid or not)
invalid_penalty   -0.05  added for walking into a wall, a blocked push, or an unknown token
box_on_goal       1.0    added when a box enters a goal
box_off_goal      -0.5   added when a box leaves a goal
win_bonus         10.0   added when all boxes are on goals
shaping           0.1    lambda of lambda*(Phi(s')-Phi(s)), Phi = -sum of box-to-nearest-goal distances
""",
    __name__,
)


class SokobanState:
    """Walls, goals, boxes (frozensets of (row, col)) and the player's cell."""

    def __init__(
        self,
        height: int,
        width: int,
        walls: frozenset[Cell],
        goals: frozenset[Cell],
        boxes: frozenset[Cell],
        player: Cell,
        rewards: SokobanRewards | None = None,
    ) -> None:
        self.height, self.width = height, width
        self.walls, self.goals, self.boxes = frozenset(walls), frozenset(goals), frozenset(boxes)
        self.player = tuple(player)
        self.rewards = rewards or SokobanRewards()
        if not self.boxes or len(self.boxes) != len(self.goals):
            raise ValueError(
                f"sokoban: expected as many boxes as goals (>= 1), got "
                f"{len(self.boxes)} boxes and {len(self.goals)} goals"
            )
        for name, cells in (("goals", self.goals), ("boxes", self.boxes)):
            bad = [c for c in cells if c in self.walls or not self._inside(c)]
            if bad:
                raise ValueError(f"sokoban.{name}: {bad} are walls or off the board")
        if self.player in self.walls or self.player in self.boxes or not self._inside(player):
            raise ValueError(f"sokoban.player: {player} is a wall, a box or off the board")

    @classmethod
    def from_text(cls, text: str, rewards: SokobanRewards | None = None) -> SokobanState:
        """Parse a board drawn with # . G B * P + (spaces ignored)."""
        rows = [ln.replace(" ", "") for ln in text.strip().splitlines()]
        walls, goals, boxes, players = set(), set(), set(), []
        for r, row in enumerate(rows):
            for c, ch in enumerate(row):
                if ch not in "#.GB*P+":
                    raise ValueError(f"sokoban.from_text: unknown symbol {ch!r} at {(r, c)}")
                if ch == "#":
                    walls.add((r, c))
                if ch in "G*+":
                    goals.add((r, c))
                if ch in "B*":
                    boxes.add((r, c))
                if ch in "P+":
                    players.append((r, c))
        if len(players) != 1 or len({len(row) for row in rows}) != 1:
            raise ValueError(f"sokoban.from_text: need one player and equal rows, got {text!r}")
        return cls(len(rows), len(rows[0]), walls, goals, boxes, players[0], rewards)

    def _inside(self, cell: Cell) -> bool:
        return 0 <= cell[0] < self.height and 0 <= cell[1] < self.width

    def _open(self, cell: Cell) -> bool:
        return self._inside(cell) and cell not in self.walls

    def copy(self) -> SokobanState:
        new = object.__new__(SokobanState)
        new.__dict__.update(self.__dict__)  # all fields immutable
        return new

    def is_solved(self) -> bool:
        return self.boxes <= self.goals

    def potential(self) -> float:
        """Phi = -sum over boxes of the Manhattan distance to the nearest goal."""
        return -float(
            sum(min(abs(b[0] - g[0]) + abs(b[1] - g[1]) for g in self.goals) for b in self.boxes)
        )

    def apply(self, actions: list) -> tuple[SokobanState, float, dict]:
        """Simulate ``actions`` on a copy; returns (new state, shaped reward, info)."""
        return apply_actions(self, actions, SokobanState._move, extra=("box_on", "box_off"))

    def _move(self, action: Any, comps: dict) -> bool:
        rw = self.rewards
        delta = MOVES.get(action) if isinstance(action, str) else None
        if delta is None:
            return False
        nxt = (self.player[0] + delta[0], self.player[1] + delta[1])
        beyond = (nxt[0] + delta[0], nxt[1] + delta[1])
        pushing = nxt in self.boxes
        if not self._open(nxt) or (pushing and (not self._open(beyond) or beyond in self.boxes)):
            return False
        if pushing:
            phi = self.potential()
            self.boxes = (self.boxes - {nxt}) | {beyond}
            if beyond in self.goals and nxt not in self.goals:
                comps["box_on"] += rw.box_on_goal
            elif nxt in self.goals and beyond not in self.goals:
                comps["box_off"] += rw.box_off_goal
            comps["shaping"] += rw.shaping * (self.potential() - phi)
        self.player = nxt
        return True

    def solve(self, max_states: int = 200_000) -> list[str] | None:
        """A shortest move list solving the board (BFS over player and boxes), None if none."""
        start = (self.player, self.boxes)
        parent: dict = {start: None}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            player, boxes = node
            if boxes <= self.goals:
                path = []
                while parent[node] is not None:
                    node, move = parent[node]
                    path.append(move)
                return path[::-1]
            for move, (dr, dc) in MOVES.items():
                nxt = (player[0] + dr, player[1] + dc)
                if not self._open(nxt):
                    continue
                new_boxes = boxes
                if nxt in boxes:
                    beyond = (nxt[0] + dr, nxt[1] + dc)
                    if not self._open(beyond) or beyond in boxes:
                        continue
                    new_boxes = (boxes - {nxt}) | {beyond}
                child = (nxt, new_boxes)
                if child not in parent:
                    if len(parent) >= max_states:
                        raise RuntimeError(f"sokoban.solve: more than {max_states} states")
                    parent[child] = (node, move)
                    queue.append(child)
        return None

    def render(self) -> str:
        rows = []
        for r in range(self.height):
            cells = []
            for c in range(self.width):
                cell = (r, c)
                if cell in self.walls:
                    ch = "#"
                elif cell == self.player:
                    ch = "+" if cell in self.goals else "P"
                elif cell in self.boxes:
                    ch = "*" if cell in self.goals else "B"
                else:
                    ch = "G" if cell in self.goals else "."
                cells.append(ch)
            rows.append(" ".join(cells))
        return "\n".join(rows)


def _connected(cells: set[Cell]) -> bool:
    if not cells:
        return False
    start = next(iter(cells))
    seen, queue = {start}, deque([start])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES.values():
            nxt = (r + dr, c + dc)
            if nxt in cells and nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return len(seen) == len(cells)


def generate_sokoban(
    seed: int, size: int = 6, n_boxes: int = 1, rewards: SokobanRewards | None = None
) -> SokobanState:
    """A solvable ``size`` x ``size`` room (walled border, a few inner walls) with ``n_boxes``.

    Boxes start on their goals and the game is played backwards: the player walks at random
    and, with probability 0.7, pulls a box that is right behind it. Every backward move undoes
    a legal forward move, so the result is solvable. Redrawn until some box is off its goal and
    the board's content bucket matches the seed's split (``seeds.board_split``).
    """
    if isinstance(size, bool) or not isinstance(size, int) or not 5 <= size <= 12:
        raise ValueError(f"sokoban.size: expected an int in 5..12, got {size!r}")
    interior = [(r, c) for r in range(1, size - 1) for c in range(1, size - 1)]
    if isinstance(n_boxes, bool) or not isinstance(n_boxes, int):
        raise ValueError(f"sokoban.n_boxes: expected an int, got {n_boxes!r}")
    if not 1 <= n_boxes <= len(interior) // 4:
        raise ValueError(
            f"sokoban.n_boxes: expected 1..{len(interior) // 4} for size {size}, got {n_boxes}"
        )
    rng = random.Random(f"sokoban/{size}/{n_boxes}/{seed}")
    border = {(r, c) for r in range(size) for c in range(size)} - set(interior)
    for _ in range(1000):
        floor = set(interior)
        for cell in rng.sample(interior, rng.randint(0, len(interior) // 8)):
            if _connected(floor - {cell}):
                floor.discard(cell)
        walls = frozenset(border | (set(interior) - floor))
        goals = frozenset(rng.sample(sorted(floor), n_boxes))
        boxes = set(goals)
        player = rng.choice(sorted(floor - boxes))
        for _ in range(rng.randint(3 * size, 6 * size)):
            dr, dc = rng.choice(list(MOVES.values()))
            nxt = (player[0] + dr, player[1] + dc)
            if nxt not in floor or nxt in boxes:
                continue
            behind = (player[0] - dr, player[1] - dc)
            if behind in boxes and rng.random() < 0.7:  # pull: the box follows the player
                boxes.remove(behind)
                boxes.add(player)
            player = nxt
        if not boxes <= goals:
            state = SokobanState(size, size, walls, goals, frozenset(boxes), player, rewards)
            if board_fits_seed(state.render(), seed):
                return state
    raise RuntimeError(f"sokoban: no board for seed={seed}, size={size}, n_boxes={n_boxes}")


RULES = """Game: Sokoban. Push every box onto a goal.
Symbols: # = wall, . = floor, G = goal, B = box, * = box on a goal, P = player, + = player on a
goal. Row 0 is the top row, column 0 the left.
Moves: U (row - 1), D (row + 1), L (column - 1), R (column + 1). Walking into a box pushes it one
cell in the same direction. Walking into a wall, or pushing a box into a wall or another box, is
invalid and penalised (nothing moves). Boxes cannot be pulled, so avoid pushing a box into a
corner that is not a goal. The puzzle is solved when every box is on a goal.
An action list is a Python-style list of moves, e.g. ['U', 'L', 'L']."""


def _build(example: dict, rewards: SokobanRewards) -> SokobanState:
    seed = example_seed(example, "sokoban")
    size = example_int(example, "size", 6, "sokoban")
    n_boxes = example_int(example, "n_boxes", 1, "sokoban")
    return generate_sokoban(seed, size, n_boxes, rewards)


_GAME = """
name            sokoban
title           Sokoban
action_example  ['U', 'L', 'L']
tool_hint       Search for a move list that pushes every box onto a goal (for example a
    breadth-first search over the player and box positions).
summary         Sokoban box pushing
describe        Sokoban {size}x{size}, {n_boxes} box(es)
"""
SPEC = game_spec(_GAME, RULES, _build, parse_moves)

# Registers "sokoban" (tool + plan agents) and "sokoban_single"; the board parameters come first.
sokoban_task, sokoban_single_task = register_game(
    _GAME, SPEC, SokobanRewards, {"size": 6, "n_boxes": 1}
)
