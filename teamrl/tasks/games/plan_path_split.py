"""Plan-Path with split information: a scout sees the walls, a planner the start and the goal.

Neither half is a plan. The scout sees the board's walls (``#``) and free cells (``.``) but not
where the walker starts or where the goal is; the planner sees the walker ``P`` and the goal
``G`` on a grid of cells it cannot see (``?``). No program runs and no library call answers:
what the planner needs of the walls, the scout must tell it.

Turns (``max_turns``, the config's ``env.max_turns``), each ``scout`` then ``planner``:

* the scout writes a message; the planner reads it in the same turn;
* the planner either commits its move list after ``####``, which is applied from the start
  with Plan-Path's shaped reward (``PlanPathRewards``) and ends the episode, or, before the
  last turn, writes a message without ``####`` that the scout reads next turn. On the last
  turn its reply is the plan whatever it holds (no list: ``no_action_penalty``).

Every message stays in both agents' transcript; a teammate's reaches its reader through the
env's ``relay`` (``teamrl.envs.messages``), which the message ablation replaces. A message is
shown as ``[scout, turn 1]`` and the text; the label is its unused part (the control ablation
drops it).

``view`` picks the rows of a table on the same boards: ``split`` (the team above),
``full`` (one planner that sees the whole board: the upper reference), ``scout_alone`` and
``planner_alone`` (one agent with its own half: the floor). A lone agent commits as the
planner does; its messages reach nobody.

``routes`` (0: off) turns a board into a referential game: the planner is shown ``routes`` move
lists of the shortest path's length, each reaching the goal on an empty grid, and exactly one
of them misses every wall (the board's shortest path; the others are decoys a wall blocks,
drawn from the board's seed, labelled in a seeded order). The scout is shown, per label, what
each route walks onto (``.`` or ``#``), never the lists. Alone, the planner can only guess a
label (1 / ``routes``) and the scout has no list to give; the team wins when the scout says
which label is clear and the planner copies that list, or commits the label itself
(``#### A``: the env plays that route), so the game needs no list written out
(docs/plan-path-split.md).

``detour`` (default on) keeps only boards where every path is longer than the start-goal
Manhattan distance: some wall blocks every straight route, so the start and goal alone never
give a plan that is sure to work (docs/plan-path-split.md has a board by hand). Boards come
from ``plan_path.generate_plan_path`` (same seeds, same content-bucket split) and are scored by
``PlanPathState.apply``: this module adds views, turns and messages, nothing of the game.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from teamrl.envs.base import Step, Task, register_task
from teamrl.envs.messages import PASS_THROUGH, Message, Relay
from teamrl.tasks.games.actions import MOVES, format_actions, parse_moves
from teamrl.tasks.games.episode import check_one_agent, make_rewards, step_components
from teamrl.tasks.games.plan_path import PlanPathRewards, PlanPathState, generate_plan_path
from teamrl.tasks.games.seeds import example_int, example_seed, split_seeds
from teamrl.text import clip

NAME = "plan_path_split"

# view -> the agents, in turn order; the last one commits the plan
VIEWS: dict[str, tuple[str, ...]] = {
    "split": ("scout", "planner"),
    "full": ("planner",),
    "scout_alone": ("scout",),
    "planner_alone": ("planner",),
}
# (view, agent) -> (sees the walls, sees the start and the goal)
SEES: dict[tuple[str, str], tuple[bool, bool]] = {
    ("split", "scout"): (True, False),
    ("split", "planner"): (False, True),
    ("full", "planner"): (True, True),
    ("scout_alone", "scout"): (True, False),
    ("planner_alone", "planner"): (False, True),
}

RULES = """Game: Plan-Path with split information. Move the walker P from its start to the goal G
on a square grid with walls. Row 0 is the top row, column 0 the left.
Cells: P = walker, G = goal, # = wall, . = free cell, ? = a cell you cannot see.
Moves: U (row - 1), D (row + 1), L (column - 1), R (column + 1). A move off the grid or into a
wall is invalid and penalised; the walker stays where it is. Each move costs a little, moving
closer to the goal earns a little, and reaching the goal earns a large bonus.
A move list is a Python-style list of moves, e.g. ['R', 'R', 'D']."""

ROLES = {
    "split": {
        "scout": "You are the scout of a two-agent team playing Plan-Path. You see the walls of "
        "the board but not where the walker starts or where the goal is. Your teammate, the "
        "planner, sees the start and the goal but not the walls, and gives the move list. "
        "Tell the planner what it needs to know to find a path.",
        "planner": "You are the planner of a two-agent team playing Plan-Path. You see where "
        "the walker starts and where the goal is, but not the walls; your teammate, the "
        "scout, sees them. Use what the scout tells you and give the move list after '####'.",
    },
    "full": {
        "planner": "You play Plan-Path alone and see the whole board. Give the move list after "
        "'####'.",
    },
    "scout_alone": {
        "scout": "You play Plan-Path alone. You see the walls of the board but not where the "
        "walker starts or where the goal is. Give the move list after '####'.",
    },
    "planner_alone": {
        "planner": "You play Plan-Path alone. You see where the walker starts and where the "
        "goal is, but not the walls. Give the move list after '####'.",
    },
}

COMMIT = "####"  # before the last turn a planner's reply is a plan only with this marker


def needs_detour(state: PlanPathState) -> bool:
    """True when every path from the start to the goal is longer than their Manhattan
    distance: no straight (monotone) move list gets through, so walls decide the plan."""
    (r, c), (gr, gc) = state.pos, state.goal
    return state.shortest_path_length > abs(r - gr) + abs(c - gc)


LABELS = "ABCDEFGH"  # candidate routes' labels (``routes`` <= 8)


def walked_cells(state: PlanPathState, moves: list[str]) -> list[tuple[int, int]] | None:
    """The cells ``moves`` walks onto from the start on the board's grid with its walls
    ignored; None when a move leaves the grid."""
    size = len(state.grid)
    (r, c), cells = state.pos, []
    for move in moves:
        dr, dc = MOVES[move]
        r, c = r + dr, c + dc
        if not (0 <= r < size and 0 <= c < size):
            return None
        cells.append((r, c))
    return cells


def blocked_routes(state: PlanPathState) -> list[list[str]]:
    """Every move list of the shortest path's length that reaches the goal without leaving the
    grid or visiting a cell twice when walls are ignored, and walks onto at least one wall: the
    decoys a route game can draw (sorted, so a seed always draws the same one)."""
    size, length = len(state.grid), state.shortest_path_length
    (gr, gc), found = state.goal, []

    def walk(pos, moves, seen):
        left = length - len(moves)
        if abs(pos[0] - gr) + abs(pos[1] - gc) > left:
            return
        if left == 0:
            if any(state.grid[r][c] == "#" for r, c in seen[1:]):
                found.append(list(moves))
            return
        for move, (dr, dc) in MOVES.items():
            nxt = (pos[0] + dr, pos[1] + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in seen:
                walk(nxt, [*moves, move], [*seen, nxt])

    walk(state.pos, [], [state.pos])
    return sorted(found)


def candidate_routes(state: PlanPathState, seed: object, n: int) -> list[list[str]] | None:
    """``n`` candidate move lists for a route game: the board's shortest path and ``n - 1``
    blocked routes of its length (``blocked_routes``), drawn and ordered from ``seed``; None
    when the board has fewer decoys than that."""
    decoys = blocked_routes(state)
    if len(decoys) < n - 1:
        return None
    rng = random.Random(f"{NAME}/routes/{seed}")
    routes = [state.shortest_path(), *rng.sample(decoys, n - 1)]
    rng.shuffle(routes)
    return routes


def board_routes(example: dict) -> int:
    routes = example_int(example, "routes", 0, NAME)
    if not 0 <= routes <= len(LABELS) or routes == 1:
        raise ValueError(f"{NAME}.routes: expected 0 (off) or 2..{len(LABELS)}, got {routes}")
    return routes


def build_board(example: dict, rewards: Any = None) -> PlanPathState:
    """The board of an example ``{"seed", "size", "density", "detour", "routes"}`` (with
    ``routes``, only boards that have that many candidate routes)."""
    seed = example_seed(example, NAME)
    size = example_int(example, "size", 4, NAME)
    detour = example.get("detour", True)
    if not isinstance(detour, bool):
        raise ValueError(f"{NAME}.detour: expected true or false, got {detour!r}")
    routes = board_routes(example)

    def accept(state: PlanPathState) -> bool:
        if detour and not needs_detour(state):
            return False
        return not routes or len(blocked_routes(state)) >= routes - 1

    wanted = accept if detour or routes else None
    return generate_plan_path(seed, size, example.get("density", 0.3), rewards, wanted)


def view_grid(state: PlanPathState, walls: bool, ends: bool) -> str:
    """The board as an agent sees it: walls as ``#``/``.`` or every cell ``?``; P and G
    drawn only when ``ends``."""
    rows = []
    for r, row in enumerate(state.grid):
        cells = []
        for c, cell in enumerate(row):
            if ends and (r, c) == state.pos:
                cells.append("P")
            elif ends and (r, c) == state.goal:
                cells.append("G")
            else:
                cells.append(cell if walls else "?")
        rows.append(" ".join(cells))
    return "\n".join(rows)


@dataclass(frozen=True)
class Note:
    """One message of the transcript: who wrote it, in which turn (0-based), what."""

    sender: str
    turn: int
    text: str

    @property
    def label(self) -> str:
        return f"[{self.sender}, turn {self.turn + 1}]\n"


class SplitPlanPathEnv:
    """The env of one ``view`` (see the module docstring); ``relay`` shows each agent its
    teammate's messages."""

    def __init__(
        self,
        view: str,
        rewards: Any,
        *,
        max_turns: int = 2,
        max_message_chars: int = 400,
        scout_reward: float = 0.0,
    ) -> None:
        if view not in VIEWS:
            raise ValueError(f"{NAME}.view: expected one of {list(VIEWS)}, got {view!r}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"{NAME}.max_turns: expected an int >= 1, got {max_turns!r}")
        if isinstance(max_message_chars, bool) or not isinstance(max_message_chars, int):
            raise ValueError(
                f"{NAME}.max_message_chars: expected an int, got {max_message_chars!r}"
            )
        if max_message_chars < 1:
            raise ValueError(f"{NAME}.max_message_chars: expected >= 1, got {max_message_chars}")
        if isinstance(scout_reward, bool) or not isinstance(scout_reward, int | float):
            raise ValueError(f"{NAME}.scout_reward: expected a number, got {scout_reward!r}")
        self.scout_reward = float(scout_reward)
        self.view = view
        self.agents = list(VIEWS[view])
        self.turn_order = list(self.agents)
        self.rewards = rewards
        self.max_turns = max_turns
        self.max_message_chars = max_message_chars
        self.relay: Relay = PASS_THROUGH
        self.state: PlanPathState | None = None
        self.routes: list[list[str]] | None = None  # a route game's candidates, in label order
        self.turn = 0
        self.acting = 0  # index in turn_order of the agent whose step comes next
        self.transcript: list[Note] = []
        self.done = False

    def clone(self) -> SplitPlanPathEnv:
        """An independent copy (the board is immutable; ``apply`` copies)."""
        new = object.__new__(SplitPlanPathEnv)
        new.__dict__.update(self.__dict__)
        new.transcript = list(self.transcript)
        return new

    def reset(self, example: dict) -> dict[str, str]:
        self.state = build_board(example, self.rewards)
        n = board_routes(example)
        self.routes = candidate_routes(self.state, example["seed"], n) if n else None
        self.turn, self.acting, self.transcript, self.done = 0, 0, [], False
        return self._observations()

    def step(self, actions: dict[str, str]) -> Step:
        if self.state is None:
            raise RuntimeError(f"{NAME}: call reset(example) before step")
        if self.done:
            raise RuntimeError(f"{NAME}: the episode is over; call reset(example)")
        agent = self.turn_order[self.acting]
        text = check_one_agent(actions, agent, NAME)
        last_turn = self.turn + 1 >= self.max_turns
        if self.acting + 1 < len(self.turn_order):  # the scout of a team: a message
            self._write(agent, text)
            self.acting += 1
            step = self._going_on(pending=True)
            if self.routes and self.scout_reward:
                named = self._named_label(text)
                clear = LABELS[self.routes.index(self.state.shortest_path())]
                step.local_rewards[agent] = self.scout_reward * (named == clear)
            return step
        if COMMIT in text or last_turn:
            return self._commit(agent, text)
        self._write(agent, text)  # the planner's message for the next turn
        self.turn, self.acting = self.turn + 1, 0
        return self._going_on(pending=False)

    def _write(self, agent: str, text: str) -> None:
        body = clip(text.strip(), self.max_message_chars, marker=" ...[cut]")
        self.transcript.append(Note(agent, self.turn, body))

    def _going_on(self, pending: bool) -> Step:
        """A step that ends nothing: a message written. ``pending``: the turn's reward comes
        with the planner's reply (AT-GRPO scores the scout's candidates by finishing the turn
        on a copy)."""
        return Step(
            observations=self._observations(),
            reward=0.0,
            terminations={a: False for a in self.agents},
            truncations={a: False for a in self.agents},
            success=False,
            pending=pending,
        )

    def _commit(self, agent: str, text: str) -> Step:
        """The plan: applied from the start; the episode ends, solved or not. In a route game
        a label right after ``####`` (``#### B``) plays that candidate's list, for an agent who
        is shown the lists (the planner; a scout alone sees no list, so it must write one)."""
        moves = self._chosen_route(text) if SEES[(self.view, agent)][1] else None
        if moves is None:
            moves = parse_moves(text, False)
        if moves is None:
            reward, info = self.rewards.no_action_penalty, None
        else:
            self.state, reward, info = self.state.apply(moves)
        self.done = True
        solved = bool(info and info["solved"])
        comps = step_components(f"{agent}_", info, reward)
        comps["messages"] = float(len(self.transcript))
        comps["commit_turn"] = float(self.turn + 1)
        return Step(
            observations=self._observations(),
            reward=float(reward),
            terminations={a: True for a in self.agents},
            truncations={a: False for a in self.agents},
            local_rewards={agent: float(reward)},
            infos={"actions": moves},
            success=solved,
            reward_components=comps,
        )

    def _label(self, before: str, text: str) -> str | None:
        """The first of this board's candidate labels that ``text`` holds as a word right
        after the pattern ``before``."""
        found = re.search(rf"{before}\b([A-{LABELS[len(self.routes) - 1]}])\b", text)
        return found.group(1) if found else None

    def _named_label(self, text: str) -> str | None:
        """The first candidate label a message names as a word (``B`` in "route B is clear")."""
        return self._label("", text)

    def _chosen_route(self, text: str) -> list[str] | None:
        """The candidate list a route game's reply names by its label, else None."""
        label = self._label(rf"{COMMIT}\s*", text) if self.routes else None
        return list(self.routes[LABELS.index(label)]) if label else None

    # --- what each agent sees ------------------------------------------------------------------

    def _observations(self) -> dict[str, str]:
        return {a: self._observation(a) for a in self.agents}

    def _observation(self, agent: str) -> str:
        walls, ends = SEES[(self.view, agent)]
        seen = self._seen_by(agent)
        return (
            f"{RULES}\n\n{ROLES[self.view][agent]}\n\n"
            f"Your view of the board ({self._what(walls, ends)}):\n"
            f"{view_grid(self.state, walls, ends)}{self._ends_line(ends)}\n\n"
            f"{self._routes_view(walls, ends)}"
            f"Messages so far:\n{seen}\n\n"
            f"Turn {self.turn + 1} of {self.max_turns}. {self._ask(agent)}"
        )

    def _seen_by(self, receiver: str) -> str:
        """The transcript as ``receiver`` is shown it: its own notes as written, each
        teammate's through the relay (not once the episode is over: those observations reach
        no prompt)."""
        lines = []
        for note in self.transcript:
            text = note.label + note.text
            if note.sender != receiver and not self.done:
                text = self.relay.show(
                    Message(note.sender, receiver, note.turn, text, "message", note.label)
                )
            lines.append(text)
        return "\n".join(lines) if lines else "(none)"

    @staticmethod
    def _what(walls: bool, ends: bool) -> str:
        if walls and ends:
            return "the whole board"
        if walls:
            return "the walls; the start and the goal are hidden"
        return "the start and the goal; every other cell is hidden"

    def _ends_line(self, ends: bool) -> str:
        if not ends:
            return ""
        (r, c), (gr, gc) = self.state.pos, self.state.goal
        return f"\nThe walker P is at row {r}, column {c}; the goal G at row {gr}, column {gc}."

    def _routes_view(self, walls: bool, ends: bool) -> str:
        """A route game's candidates as this agent sees them: the move lists to who sees the
        start and the goal, what each route walks onto to who sees the walls (empty without a
        route game)."""
        if not self.routes:
            return ""
        lines = [
            f"Candidate routes ({len(self.routes)}, each as long as the shortest path; exactly "
            "one of them walks onto no wall):"
        ]
        for label, moves in zip(LABELS, self.routes, strict=False):
            parts = [f"{label}:"]
            if ends:
                parts.append(format_actions(moves))
            if walls:
                cells = walked_cells(self.state, moves) or []
                walks = " ".join(self.state.grid[r][c] for r, c in cells)
                parts.append(f"walks onto {walks}" if ends else walks)
            lines.append(" ".join(parts))
        return "\n".join(lines) + "\n\n"

    def _ask(self, agent: str) -> str:
        if agent != self.turn_order[-1]:  # the scout of a team
            if self.routes:
                return (
                    "Write your message to the planner: the label of the candidate route that "
                    "walks onto no wall (#)."
                )
            return "Write your message to the planner."
        ask = "Give the move list after '####', for example #### ['R', 'D']. It ends the game."
        if self.routes:
            ask = (
                "Give the label of the candidate route to take after '####', for example "
                "#### A (or a move list, #### ['R', 'D']). It ends the game."
            )
        if self.turn + 1 < self.max_turns and len(self.agents) > 1:
            ask += " Or write a message to the scout, without '####': it answers next turn."
        return ask


def plan_path_split_task(
    view: str = "split",
    size: int = 4,
    density: float = 0.3,
    detour: bool = True,
    n_train: int = 10_000,
    n_eval: int = 100,
    n_test: int = 100,
    max_turns: int = 2,
    rewards: dict | None = None,
    max_message_chars: int = 400,
    routes: int = 0,
    scout_reward: float = 0.0,
) -> Task:
    """Plan-Path with split information (see the module docstring). ``view``: ``split``,
    ``full``, ``scout_alone`` or ``planner_alone``; ``rewards`` overrides fields of
    :class:`PlanPathRewards`; ``routes`` (0: off; 2..8) makes each board a route game (the
    module docstring), where ``scout_reward`` is the scout's own (local) reward for a message
    whose first label is the clear route's (0: none, the team reward only); examples are
    ``{"seed", "size", "density", "detour", "routes"}`` from the disjoint seed ranges (train,
    eval, test)."""
    constants = make_rewards(PlanPathRewards, rewards, NAME)
    params = {"size": size, "density": density, "detour": detour}
    if routes:
        params["routes"] = routes
    build_board({"seed": 0, **params}, constants)  # fail now, not mid-run, on bad params

    def make_env() -> SplitPlanPathEnv:
        return SplitPlanPathEnv(
            view,
            constants,
            max_turns=max_turns,
            max_message_chars=max_message_chars,
            scout_reward=scout_reward,
        )

    make_env()  # validates view, max_turns, max_message_chars and scout_reward

    def examples(split: str, n: int) -> list[dict]:
        return [{"seed": s, **params} for s in split_seeds(split, n)]

    return Task(
        name=NAME,
        make_env=make_env,
        train=examples("train", n_train),
        eval=examples("eval", n_eval),
        test=examples("test", n_test),
        agents=dict(ROLES[view]),
        description=f"Plan-Path split {size}x{size}, view {view}"
        + (f", a route game of {routes}" if routes else ""),
    )


register_task(
    NAME,
    "Plan-Path with split information: a scout sees the walls, a planner the start and goal; "
    "messages, then the planner's move list (view: split, full, scout_alone, planner_alone)",
)(plan_path_split_task)
