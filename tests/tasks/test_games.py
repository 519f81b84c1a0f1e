"""Plan-Path, Sudoku and Sokoban: rules, shaped rewards (by hand), generation, the env wrappers."""

from __future__ import annotations

import contextlib
import copy
import io
import traceback
from dataclasses import dataclass

import pytest

from teamrl.envs.base import clone
from teamrl.tasks.games import (
    PlanPathState,
    SokobanState,
    SudokuState,
    extract_code,
    find_conflicts,
    generate_plan_path,
    generate_sokoban,
    generate_sudoku,
    parse_moves,
    parse_placements,
    solve_sudoku,
    split_seeds,
)
from teamrl.tasks.games.plan_path import plan_path_single_task, plan_path_task
from teamrl.tasks.games.seeds import board_split
from teamrl.tasks.games.sokoban import sokoban_single_task, sokoban_task
from teamrl.tasks.games.sudoku import sudoku_single_task, sudoku_task
from teamrl.tasks.registry import make_task

# ---------------------------------------------------------------------------------------------
# A fake code runner: runs the (trusted, test-written) code in-process, same result fields as
# teamrl.sandbox.ExecResult.


@dataclass
class FakeResult:
    stdout: str
    stderr: str
    returncode: int
    timed_out: bool = False
    killed: str | None = None
    wall_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class FakeRunner:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, code: str) -> FakeResult:
        self.calls.append(code)
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(code, {})
        except Exception:
            return FakeResult(out.getvalue(), traceback.format_exc(), 1)
        return FakeResult(out.getvalue(), "", 0)


# Hand-built Plan-Path board. BFS distances to G: (0,0)=4, (0,1)=5, (1,0)=3, (2,0)=2, (2,1)=1.
PP_BOARD = """
P . #
. # .
. . G
"""


# ---------------------------------------------------------------------------------------------
# Parsing


def test_parse_moves_formats():
    assert parse_moves("think...\n#### ['U', 'R']\nbecause") == ["U", "R"]
    assert parse_moves("first [up, Left] then final [D, d]") == ["D", "D"]
    assert parse_moves("#### UURD") == ["U", "U", "R", "D"]
    # Issue 11: a list with a word that is not a move is no action list at all.
    assert parse_moves("#### right, down, jump") is None
    assert parse_moves("no list at all") is None
    assert parse_moves("R R\nL U", last_line_fallback=False) is None
    assert parse_moves("path:\nL U\n", last_line_fallback=True) == ["L", "U"]
    # a list with no move is no action (penalised), not a free zero-move answer: a reply that
    # leaves the "#### [" prefill open before prose scored 0, above every wrong move
    for empty in ("#### []", "#### [\n\nThe board shows the walker", "#### [ ]", "[]"):
        assert parse_moves(empty) is None, empty


def test_parse_placements_and_code_extraction():
    assert parse_placements("#### [(0, 1, 3), [1, 2, 4]]") == [(0, 1, 3), (1, 2, 4)]
    assert parse_placements("answer: [[2,0,1]] done") == [(2, 0, 1)]
    assert parse_placements("nothing") is None
    for empty in ("#### []", "#### [\nLet me think", "[ ]"):  # no placement: no action
        assert parse_placements(empty) is None, empty
    assert extract_code("print(1)") == "print(1)"
    text = "Plan:\n```python\ndef f():\n    return 2\n```\nthen\n```python\nprint(f())\n"
    assert extract_code(text) == "def f():\n    return 2\n\nprint(f())"


# ---------------------------------------------------------------------------------------------
# Plan-Path rules and rewards


def test_plan_path_moves_walls_bounds_and_rewards():
    s = PlanPathState.from_text(PP_BOARD)
    assert s.pos == (0, 0) and s.goal == (2, 2) and s.shortest_path_length == 4
    # R: valid, away from the goal: step -0.01 + 0.1 * (4 - 5)
    s1, r, info = s.apply(["R"])
    assert s1.pos == (0, 1) and r == pytest.approx(-0.11) and info["n_invalid"] == 0
    # U off the grid, then R into '#': both invalid, position unchanged
    s2, r, info = s1.apply(["U", "R"])
    assert s2.pos == (0, 1) and info["n_invalid"] == 2
    assert r == pytest.approx(2 * (-0.01 - 0.1))
    # unknown token counts as invalid
    _, r, info = s.apply(["jump"])
    assert info["n_invalid"] == 1 and r == pytest.approx(-0.11)
    # apply is pure
    assert s.pos == (0, 0)


def test_plan_path_win_and_unused_actions():
    s = PlanPathState.from_text(PP_BOARD)
    assert s.shortest_path() == ["D", "D", "R", "R"]
    done, r, info = s.apply(["D", "D", "R", "R", "U", "L"])
    # 4 steps -0.04, shaping 0.1 * (4 - 0) = 0.4, win +10; the two moves after the win unused
    assert done.is_solved() and info["solved"] and info["n_unused"] == 2
    assert r == pytest.approx(10.36)
    assert info["components"] == pytest.approx(
        {"step": -0.04, "invalid": 0.0, "shaping": 0.4, "win": 10.0}
    )
    assert s.render() == "P . #\n. # .\n. . G" and done.render().endswith(". . P")


def test_plan_path_generation_reproducible_and_solvable():
    boards = set()
    for size in (4, 5, 10):
        for seed in range(15):
            a = generate_plan_path(seed, size)
            assert a.render() == generate_plan_path(seed, size).render()
            d = a.shortest_path_length
            assert d >= max(2, size // 2)
            path = a.shortest_path()
            assert len(path) == d
            assert a.apply(path)[0].is_solved()
            boards.add(a.render())
    assert len(boards) > 40  # seeds give different boards
    with pytest.raises(ValueError, match="plan_path.size"):
        generate_plan_path(0, 2)


# ---------------------------------------------------------------------------------------------
# Sokoban rules and rewards


def test_sokoban_pushes_and_win_rewards():
    s = SokobanState.from_text("######\n#PB.G#\n######")
    s1, r, info = s.apply(["R"])
    # push: step -0.01, Phi -2 -> -1 gives +0.1
    assert s1.player == (1, 2) and s1.boxes == {(1, 3)} and r == pytest.approx(0.09)
    s2, r, info = s1.apply(["R"])
    # box onto goal: step -0.01, box_on +1, shaping +0.1, win +10
    assert s2.is_solved() and r == pytest.approx(11.09)
    assert info["components"]["box_on"] == 1.0 and info["components"]["win"] == 10.0
    assert "*" in s2.render() and s.boxes == {(1, 2)}  # original untouched


def test_sokoban_blocked_pushes_and_walls():
    s = SokobanState.from_text("#######\n#PBBGG#\n#######")
    same, r, info = s.apply(["R", "L", "U"])  # box into box, wall, wall
    assert info["n_invalid"] == 3 and same.player == (1, 1) and same.boxes == s.boxes
    assert r == pytest.approx(3 * (-0.01 - 0.05))
    wall = SokobanState.from_text("######\n#G.PB#\n######")
    _, r, info = wall.apply(["R"])  # box into wall
    assert info["n_invalid"] == 1 and r == pytest.approx(-0.06)


def test_sokoban_box_off_goal():
    s = SokobanState.from_text("#######\n#P*.BG#\n#######")
    assert not s.is_solved()
    s1, r, info = s.apply(["R"])
    # step -0.01, box_off -0.5, Phi -1 -> -2 gives -0.1
    assert r == pytest.approx(-0.61) and info["components"]["box_off"] == -0.5
    _, r, info = s1.apply(["R"])  # now the box would hit the other box
    assert info["n_invalid"] == 1


def test_sokoban_generation_reproducible_and_solvable():
    boards = set()
    for seed in range(20):
        a = generate_sokoban(seed)
        assert a.render() == generate_sokoban(seed).render()
        assert not a.is_solved() and a.height == a.width == 6 and len(a.boxes) == 1
        solution = a.solve()
        assert solution  # solvable and not trivially solved
        end, _, info = a.apply(solution)
        assert end.is_solved() and info["n_invalid"] == 0
        boards.add(a.render())
    assert len(boards) == 20
    two = generate_sokoban(3, size=7, n_boxes=2)
    assert len(two.boxes) == 2 and two.solve() is not None


# ---------------------------------------------------------------------------------------------
# Sudoku rules and rewards

SOLUTION = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]


def test_sudoku_conflicts():
    assert find_conflicts(SOLUTION) == []
    empty = [[0] * 4 for _ in range(4)]
    row = [r[:] for r in empty]
    row[0][0] = row[0][3] = 1
    col = [r[:] for r in empty]
    col[0][0] = col[3][0] = 1
    box = [r[:] for r in empty]
    box[0][0] = box[1][1] = 1
    assert find_conflicts(row) == ["row 0 has 1 more than once"]
    assert find_conflicts(col) == ["column 0 has 1 more than once"]
    assert find_conflicts(box) == ["box at (0, 0) has 1 more than once"]
    with pytest.raises(ValueError, match="sudoku.puzzle"):
        SudokuState(row)
    with pytest.raises(ValueError, match="sudoku.size"):
        generate_sudoku(0, size=5)


def _rectangle_puzzle() -> SudokuState:
    # (0,0),(0,2),(1,0),(1,2) empty: 1/3 and 3/1 both fit (two solutions); SOLUTION is the
    # reference for shaping.
    puzzle = [r[:] for r in SOLUTION]
    for r, c in ((0, 0), (0, 2), (1, 0), (1, 2)):
        puzzle[r][c] = 0
    return SudokuState(puzzle, SOLUTION)


def test_sudoku_invalid_placements_counted():
    s = _rectangle_puzzle()
    bad = [(0, 1, 3), (0, 0, 9), (5, 0, 1), (0, 0, 2), "x", (0, 0)]
    # clue, value out of range, off board, row/col/box conflict (2), not a triple, too short
    end, r, info = s.apply(bad)
    assert info["n_invalid"] == 6 and end.grid == s.grid
    assert r == pytest.approx(6 * (-0.01 - 0.1))


def test_sudoku_shaping_and_win():
    s = _rectangle_puzzle()
    s1, r, _ = s.apply([(0, 0, 3)])  # consistent but wrong: no shaping
    assert s1.grid[0][0] == 3 and r == pytest.approx(-0.01)
    s2, r, _ = s1.apply([(0, 0, 1)])  # overwrite with the right value: +0.1
    assert r == pytest.approx(0.09)
    _, r, _ = s2.apply([(0, 0, 3)])  # correct -> wrong: -0.1
    assert r == pytest.approx(-0.11)
    done, r, info = s.apply([(0, 0, 1), (0, 2, 3), (1, 0, 3), (1, 2, 1), (2, 2, 4)])
    assert done.is_solved() and info["n_unused"] == 1
    assert r == pytest.approx(-0.04 + 0.4 + 10.0)
    # the other valid completion also solves it (win), with no correct-cell shaping
    other, r, _ = s.apply([(0, 0, 3), (0, 2, 1), (1, 0, 1), (1, 2, 3)])
    assert other.is_solved() and r == pytest.approx(-0.04 + 10.0)
    assert s.grid[0][0] == 0  # apply is pure


def test_sudoku_generation_unique_and_reproducible():
    for seed in range(10):
        a = generate_sudoku(seed)
        assert a.grid == generate_sudoku(seed).grid
        empties = sum(v == 0 for row in a.grid for v in row)
        assert 1 <= empties <= 10
        count, sol = solve_sudoku(a.grid)
        assert count == 1 and tuple(map(tuple, sol)) == a.solution
        assert find_conflicts([list(r) for r in a.solution]) == []
        placements = [
            (r, c, a.solution[r][c]) for r in range(4) for c in range(4) if not a.grid[r][c]
        ]
        assert a.apply(placements)[0].is_solved()
    big = generate_sudoku(1, size=9)
    assert sum(v == 0 for row in big.grid for v in row) == 45
    assert solve_sudoku(big.grid)[0] == 1


# ---------------------------------------------------------------------------------------------
# Seeds and tasks


def test_seed_splits_disjoint():
    train, ev, test = split_seeds("train", 500), split_seeds("eval", 500), split_seeds("test", 500)
    assert len(set(train) | set(ev) | set(test)) == 1500
    task = plan_path_task(size=4, n_train=50, n_eval=20, n_test=20)
    seeds = [{e["seed"] for e in split} for split in (task.train, task.eval, task.test)]
    assert not (seeds[0] & seeds[1]) and not (seeds[0] & seeds[2]) and not (seeds[1] & seeds[2])
    assert task.train[0] == {
        "seed": 0,
        "size": 4,
        "density": 0.3,
        "hint": False,
        "tool_library": False,
    }
    assert set(task.agents) == {"tool", "plan"}
    with pytest.raises(ValueError, match="split"):
        split_seeds("dev", 3)


def test_train_and_test_boards_disjoint_by_content():
    # 6x6 Sokoban and 4x4 Plan-Path repeat boards across seeds; content buckets keep the
    # splits apart anyway.
    for gen in (generate_sokoban, lambda seed: generate_plan_path(seed, 4)):
        boards = {
            split: {gen(s).render() for s in split_seeds(split, n)}
            for split, n in (("train", 400), ("eval", 60), ("test", 60))
        }
        assert len(boards["test"]) > 30 and len(boards["train"]) > 200
        assert not boards["train"] & boards["test"] and not boards["train"] & boards["eval"]
        assert not boards["eval"] & boards["test"]
        assert all(board_split(b) == "test" for b in boards["test"])
    train = {str(generate_sudoku(s).solution) for s in split_seeds("train", 100)}
    test = {str(generate_sudoku(s).solution) for s in split_seeds("test", 30)}
    assert not train & test


def test_registry_and_reward_overrides():
    task = make_task("sokoban", n_train=2, n_eval=1, n_test=1, rewards={"win_bonus": 5})
    env = task.make_env()
    assert env.rewards.win_bonus == 5.0 and env.rewards.box_off_goal == -0.5
    for name in ("plan_path_single", "sudoku", "sudoku_single", "sokoban_single"):
        assert make_task(name, n_train=1, n_eval=1, n_test=1).train
    with pytest.raises(ValueError, match="unknown field 'bonus'"):
        sokoban_task(rewards={"bonus": 1})
    with pytest.raises(ValueError, match="max_turns"):
        sudoku_task(max_turns=0)


# ---------------------------------------------------------------------------------------------
# The two-agent env


def _pp_env(runner, max_turns=5):
    env = plan_path_task(size=4, n_train=1, n_eval=1, n_test=1, max_turns=max_turns, runner=runner)
    env = env.make_env()
    env.reset({"seed": 0, "size": 4})
    env.state = PlanPathState.from_text(PP_BOARD)  # hand-built board, rewards known
    return env


def test_tool_step_simulates_on_copy_and_plan_sees_it():
    runner = FakeRunner()
    env = _pp_env(runner)
    assert env.turn_order == ["tool", "plan"]
    code = "path = ['D', 'D', 'R', 'U']\nprint(path)"
    step = env.step({"tool": f"Here:\n```python\n{code}\n```"})
    assert runner.calls == [code]
    # D, D, R each +0.1 shaping; U into '#' invalid -0.1; 4 steps -0.04
    assert step.local_rewards == {"tool": pytest.approx(0.16)} and step.reward == 0.0
    assert step.pending  # team reward known only after the plan agent acts
    assert env.state.pos == (0, 0)  # the real state is unchanged
    assert not step.done and step.success is False
    plan_obs = step.observations["plan"]
    assert code in plan_obs and "['D', 'D', 'R', 'U']" in plan_obs and "1 invalid" in plan_obs
    with pytest.raises(ValueError, match="'plan' only"):
        env.step({"tool": "again"})
    step = env.step({"plan": "The tool bumps into a wall.\n#### [D, D, R, R]"})
    # team = the real transition; locals: the tool's simulation, the plan agent's gain over it
    assert step.reward == pytest.approx(10.36)
    assert step.local_rewards == {"tool": pytest.approx(0.16), "plan": pytest.approx(10.2)}
    assert step.success and all(step.terminations.values())
    assert step.reward_components["plan_win"] == 10.0
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step({"tool": "print([])"})


def test_failing_tool_code_and_missing_plan_list():
    env = _pp_env(FakeRunner(), max_turns=2)
    step = env.step({"tool": "```python\nprint(1 / 0)\n```"})
    assert step.local_rewards["tool"] == -1.0
    assert step.reward_components["tool_exec_ok"] == 0.0
    assert (
        "FAILED" in step.observations["plan"] and "ZeroDivisionError" in step.observations["plan"]
    )
    step = env.step({"plan": "I am not sure."})
    assert step.reward == -1.0 and env.state.pos == (0, 0) and not step.done
    assert "Turn 1" in step.observations["tool"] and "no action list" in step.observations["tool"]
    env.step({"tool": "print(['D'])"})
    step = env.step({"plan": "#### [D]"})  # second and last turn: truncated, not solved
    assert step.reward == pytest.approx(0.09) and env.state.pos == (1, 0)
    assert all(step.truncations.values()) and not any(step.terminations.values())


def test_long_tool_output_is_truncated_for_the_plan_agent():
    task = plan_path_task(
        size=4, n_train=1, n_eval=1, n_test=1, runner=FakeRunner(), max_output_chars=50
    )
    env = task.make_env()
    env.reset(task.train[0])
    step = env.step({"tool": "print('x' * 200)\nprint(['U'])"})
    plan_obs = step.observations["plan"]
    assert "x" * 50 + "\n... [truncated 156 characters]" in plan_obs and "x" * 51 not in plan_obs
    assert step.infos["actions"] == ["U"]  # parsing used the full output


def test_clone_independence():
    env = _pp_env(FakeRunner())
    env.step({"tool": "print(['D', 'D', 'R', 'R'])"})
    for branch in (clone(env), copy.deepcopy(env)):
        step = branch.step({"plan": "#### ['D', 'D', 'R', 'R']"})
        assert step.success and branch.state.is_solved()
    assert env.state.pos == (0, 0) and env.tool is not None and env.history == []
    step = env.step({"plan": "#### ['D']"})  # the original continues on its own
    assert env.state.pos == (1, 0) and not step.done


def test_two_agent_sudoku_and_sokoban_with_real_sandbox():
    # The real sandbox runs the tool code once per game.
    task = sudoku_task(n_train=1, n_eval=1, n_test=1)
    env = task.make_env()
    obs = env.reset(task.test[0])
    assert "Sudoku" in obs["tool"] and env.state.render() in obs["plan"]
    cells = [(r, c, env.state.solution[r][c]) for r in range(4) for c in range(4)]
    todo = [p for p in cells if not env.state.grid[p[0]][p[1]]]
    step = env.step({"tool": f"```python\nprint({todo!r})\n```"})
    assert step.local_rewards["tool"] == pytest.approx(10.0 + len(todo) * (0.1 - 0.01))
    assert step.reward_components["tool_solved"] == 1.0 and not env.state.is_solved()
    step = env.step({"plan": f"#### {todo}"})
    assert step.success

    task = sokoban_task(n_train=1, n_eval=1, n_test=1)
    env = task.make_env()
    env.reset(task.train[0])
    moves = env.state.solve()
    step = env.step({"tool": f"print({moves!r})"})
    assert step.reward_components["tool_solved"] == 1.0
    assert str(moves) in step.observations["plan"]
    assert env.step({"plan": f"#### {moves}"}).success


# ---------------------------------------------------------------------------------------------
# The single-agent env


def test_single_agent_env_multi_turn():
    task = sokoban_single_task(n_train=3, n_eval=1, n_test=1, max_turns=3)
    env = task.make_env()
    assert env.agents == ["solver"] and set(task.agents) == {"solver"}
    env.reset(task.train[2])
    start = env.state.render()
    step = env.step({"solver": "#### [jump]"})  # not a move list (issue 11): no action
    assert step.reward == pytest.approx(-1.0) and env.state.render() == start
    assert "no action list found" in step.observations["solver"] and not step.done
    moves = env.state.solve()
    end, expected, _ = env.state.apply(moves)
    step = env.step({"solver": f"#### {moves}"})
    assert step.reward == pytest.approx(expected) and step.success
    assert step.local_rewards == {"solver": step.reward} and all(step.terminations.values())

    task = plan_path_single_task(size=5, n_train=1, n_eval=1, n_test=1)
    env = task.make_env()
    env.reset(task.eval[0])
    step = env.step({"solver": f"#### {env.state.shortest_path()}"})
    assert step.success
    task = sudoku_single_task(n_train=1, n_eval=1, n_test=1)
    assert task.make_env().reset(task.train[0])["solver"].count("\n") > 5


def test_plan_path_hint_prints_a_shortest_path_and_leaves_the_board_alone():
    # the learning ladder's rung 1: copying the printed list must solve the board optimally
    plain = plan_path_task(size=5, n_train=3, n_eval=1, n_test=1)
    hinted = plan_path_task(size=5, n_train=3, n_eval=1, n_test=1, hint=True)
    for a, b in zip(plain.train, hinted.train):
        env_a, env_b = plain.make_env(), hinted.make_env()
        obs_a, obs_b = env_a.reset(a)["tool"], env_b.reset(b)["tool"]
        assert env_a.state.render() == env_b.state.render()  # the hint never changes the board
        assert "A shortest path from P to G:" not in obs_a
        line = next(ln for ln in obs_b.splitlines() if ln.startswith("A shortest path from P"))
        path = line.split(": ", 1)[1]
        assert len(eval(path)) == env_b.state.shortest_path_length  # noqa: S307 (our own list)
        env_b.step({"tool": "```python\nprint([])\n```"})
        step = env_b.step({"plan": f"#### {path}"})
        assert step.success and step.reward_components["plan_win"] > 0
    single = plan_path_single_task(size=5, n_train=1, n_eval=1, n_test=1, hint=True)
    assert "A shortest path from P to G" in single.make_env().reset(single.train[0])["solver"]
    with pytest.raises(ValueError, match="plan_path.hint"):
        plan_path_task(size=5, hint="yes")


def test_game_steps_set_the_protocol_fields():
    env = _pp_env(FakeRunner())
    tool = env.step({"tool": "```python\nprint(['D', 'D', 'R', 'R'])\n```"})
    assert tool.pending is True and tool.success is False
    assert tool.reward_components["tool_exec_ok"] == 1.0
    plan = env.step({"plan": "#### ['D', 'D', 'R', 'R']"})
    assert plan.pending is False and plan.success is True  # D, D, R, R reaches G
    assert plan.reward_components["plan_n_actions"] == 4.0


# ---------------------------------------------------------------------------------------------
# Issue 11, item 2: printed garbage is the no-action case, never cheap invalid moves


def test_garbage_is_no_action_and_scores_below_a_valid_list():
    garbage = ["ALL TESTS PASSED", "[ALL, TESTS, PASSED]", "#### ALL TESTS PASSED", "UP!!1"]
    for text in garbage:
        assert parse_moves(text, True) is None, text
        assert parse_placements(text, True) is None, text
    assert parse_placements("#### [(0, 1, 3), oops, (1, 2, 4)]") is None
    assert parse_moves("#### [U, R, D, D]") == ["U", "R", "D", "D"]
    # The tool agent printed garbage: the no-action penalty (-1.0), below a valid 4-move list
    # whose moves all fail (4 * (-0.01 - 0.1) = -0.44), where main gave it -0.33.
    env = _pp_env(FakeRunner())
    step = env.step({"tool": "```python\nprint('ALL TESTS PASSED')\n```"})
    garbage_reward = step.local_rewards["tool"]
    assert garbage_reward == pytest.approx(-1.0) and step.reward_components["tool_parsed"] == 0.0
    _, valid_reward, info = env.state.apply(["U", "L", "U", "L"])
    assert info["n_invalid"] == 4 and valid_reward == pytest.approx(-0.44)
    assert garbage_reward <= env.rewards.no_action_penalty < valid_reward


def test_a_plan_reply_that_answers_nothing_costs_the_no_action_penalty():
    # The AT-GRPO Plan-Path run's last step (issue 22): after the "#### [" prefill, a reply of
    # prose with no move scored 0 on the board (1.0 with the plan agent's credit over a failed
    # tool), above a real move. It must be the no-action case, like any reply without a list.
    env = _pp_env(FakeRunner(), max_turns=2)
    env.step({"tool": "```python\nprint(1 / 0)\n```"})
    step = env.step({"plan": "#### [\n\nThe walker should go around the wall."})
    assert step.reward == env.rewards.no_action_penalty == -1.0
    assert env.state.pos == (0, 0)


def test_plan_path_tool_library_gives_the_program_the_board_and_a_shortest_path():
    # hand case: from (0, 0) to (2, 2) around two obstacles, the only shortest list is D R R D
    state = PlanPathState.from_text("P # .\n. . .\n. # G")
    state.tool_library = True
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(state.tool_preamble() + "\nprint(shortest_path(grid, start, goal))", {})  # noqa: S102
    assert out.getvalue().strip() == "['D', 'R', 'R', 'D']"
    assert state.tool_preamble().startswith("grid = ['.#.', '...', '.#.']\nstart = (0, 0)")
    # every board, in the real sandbox: calling the library solves it in a shortest number of
    # moves; the plan agent is shown the tool's own code, never the preamble
    task = plan_path_task(size=5, n_train=4, n_eval=1, n_test=1, tool_library=True)
    call = "```python\nprint(shortest_path(grid, start, goal))"  # a block left open still runs
    for example in task.train:
        env = task.make_env()
        obs = env.reset(example)
        assert "shortest_path(grid, start, goal)" in obs["tool"]
        need = env.state.shortest_path_length
        step = env.step({"tool": call})
        assert step.reward_components["tool_exec_ok"] == 1.0
        assert step.reward_components["tool_solved"] == 1.0
        assert step.reward_components["tool_n_actions"] == need
        assert (
            "SOLVED" in step.observations["plan"]
            and "def shortest_path" not in step.observations["plan"]
        )
    # off by default: no preamble, no note, and the names do not exist for the program
    plain = plan_path_task(size=5, n_train=1, n_eval=1, n_test=1)
    env = plain.make_env()
    assert "shortest_path(grid" not in env.reset(plain.train[0])["tool"]
    assert env.state.tool_preamble() == "" and env.state.tool_note() == ""
    step = env.step({"tool": call})
    assert step.reward_components["tool_exec_ok"] == 0.0  # NameError: grid is not defined
    with pytest.raises(ValueError, match="plan_path.tool_library"):
        plan_path_task(size=5, tool_library="yes")
