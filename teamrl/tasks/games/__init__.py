"""Procedurally generated puzzle games (Plan-Path, Sudoku, Sokoban) as text environments.

Each game has a two-agent task (``tool`` writes code, ``plan`` commits the actions) and a
single-agent task (``<game>_single``); see :mod:`teamrl.tasks.games.episode` and :mod:`teamrl.tasks.games.builders`.
"""

from teamrl.tasks.games.actions import extract_code, parse_moves
from teamrl.tasks.games.episode import GameSpec, SingleAgentEnv, ToolPlanEnv
from teamrl.tasks.games.plan_path import PlanPathRewards, PlanPathState, generate_plan_path
from teamrl.tasks.games.seeds import SEED_RANGES, split_seeds
from teamrl.tasks.games.sokoban import SokobanRewards, SokobanState, generate_sokoban
from teamrl.tasks.games.sudoku import (
    SudokuRewards,
    SudokuState,
    find_conflicts,
    generate_sudoku,
    parse_placements,
    solve_sudoku,
)

__all__ = [
    "SEED_RANGES",
    "GameSpec",
    "PlanPathRewards",
    "PlanPathState",
    "SingleAgentEnv",
    "SokobanRewards",
    "SokobanState",
    "SudokuRewards",
    "SudokuState",
    "ToolPlanEnv",
    "extract_code",
    "find_conflicts",
    "generate_plan_path",
    "generate_sokoban",
    "generate_sudoku",
    "parse_moves",
    "parse_placements",
    "solve_sudoku",
    "split_seeds",
]
