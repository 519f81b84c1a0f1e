"""Plan-Path with split information: what each agent's prompt holds, the turn protocol, scores
by hand for a scripted team and for each half alone, the views, the boards per seed."""

from __future__ import annotations

import pytest

import teamrl.tasks.games.plan_path_split as split
from teamrl.envs.base import clone
from teamrl.envs.messages import Message
from teamrl.tasks.games import PlanPathState
from teamrl.tasks.games.plan_path_split import build_board, needs_detour, plan_path_split_task
from teamrl.tasks.games.seeds import SEED_RANGES
from teamrl.tasks.registry import make_task

# Hand-made boards. A and B share the start and the goal, A and C share the walls.
A = "P#G\n...\n..."  # the wall at (0, 1) forces D R R U (4 moves; Manhattan distance 2)
B = "P.G\n.#.\n..."  # the top row is free: R R
C = "G#P\n...\n..."  # A mirrored: D L L U


@pytest.fixture
def boards(monkeypatch):
    """Examples {"seed": "A"} (or B, C) build that hand-made board; seeds build their own."""
    hand = {"A": A, "B": B, "C": C}
    real = split.build_board

    def build(example: dict, rewards=None) -> PlanPathState:
        name = example["seed"]
        return PlanPathState.from_text(hand[name], rewards) if name in hand else real(example)

    monkeypatch.setattr(split, "build_board", build)


def env(view: str = "split", max_turns: int = 1) -> split.SplitPlanPathEnv:
    return plan_path_split_task(
        view=view, n_train=2, n_eval=1, n_test=1, max_turns=max_turns
    ).make_env()


def grid_lines(prompt: str) -> list[str]:
    """The lines of a prompt that draw board cells."""
    return [ln for ln in prompt.splitlines() if ln.strip() and set(ln) <= set(".#?PG ")]


def play(e, board: str, script: dict, **example) -> object:
    """One episode with scripted agents (``script[agent](observation) -> reply``) on the board
    of ``{"seed": board, **example}``; the last step."""
    obs = e.reset({"seed": board, **example})
    while True:
        agent = e.turn_order[e.acting]
        step = e.step({agent: script[agent](obs[agent])})
        obs = step.observations
        if step.done:
            return step


def test_each_agent_sees_only_its_half_of_a_hand_made_board(boards):
    obs = env().reset({"seed": "A"})
    scout, planner = obs["scout"], obs["planner"]
    # the scout: the walls, no start and no goal
    assert grid_lines(scout) == [". # .", ". . .", ". . ."]
    assert "row 0, column 0" not in scout and "row 0, column 2" not in scout
    # the planner: P and G on hidden cells, no wall
    assert grid_lines(planner) == ["P ? G", "? ? ?", "? ? ?"]
    assert "The walker P is at row 0, column 0; the goal G at row 0, column 2." in planner
    assert not any("#" in ln for ln in grid_lines(planner))
    assert "Messages so far:\n(none)" in scout and "Messages so far:\n(none)" in planner
    # what each sees is a function of its half only: equal prompts on boards that share it
    e = env()
    assert e.reset({"seed": "B"})["planner"] == planner  # other walls, same start and goal
    assert e.reset({"seed": "C"})["scout"] == scout  # same walls, other start and goal
    assert e.reset({"seed": "B"})["scout"] != scout and e.reset({"seed": "C"})["planner"] != planner


def copy_view(prompt: str) -> str:
    """A scout that sends the rows of its board."""
    return "\n".join(grid_lines(prompt))


def best_guess(prompt: str) -> str:
    """A planner: P and G from its own view, the walls from the scout's rows where a message
    holds them (else every hidden cell counts as free); a shortest path on that board."""
    mine = grid_lines(prompt)[:3]
    theirs = [ln for ln in grid_lines(prompt)[3:] if "?" not in ln] or [
        ln.replace("?", ".") for ln in mine
    ]
    cells = [
        [m if m in "PG" else t for m, t in zip(mr.split(), tr.split())]
        for mr, tr in zip(mine, theirs)
    ]
    board = PlanPathState.from_text("\n".join("".join(row) for row in cells))
    return f"#### {board.shortest_path()}"


class Mute:
    """A relay that shows every message as the empty string (the ablation's 'empty')."""

    def show(self, message: Message) -> str:
        return ""


def test_a_team_that_sends_the_walls_solves_what_each_half_alone_cannot(boards):
    team = {"scout": copy_view, "planner": best_guess}
    # default constants: step -0.01, invalid -0.1, win +10, shaping 0.1 x (d_start - d_end)
    for board in ("A", "C"):  # D R R U on A, D L L U on C: 4 moves, 4 -> 0
        step = play(env(), board, team)
        assert step.success and step.reward == pytest.approx(-0.04 + 0.4 + 10.0)
    # the planner alone plans as if every hidden cell were free: R R, A's wall twice
    alone = play(env("planner_alone"), "A", {"planner": best_guess})
    assert not alone.success and alone.reward == pytest.approx(-0.02 - 0.2)
    # its view of A is its view of B, so it answers both alike, and what solves B fails on A
    assert env("planner_alone").reset({"seed": "A"}) == env("planner_alone").reset({"seed": "B"})
    # the scout alone sees A and C alike (same walls), so any answer of its is the same on
    # both: A's solution on C goes D (4 -> 3), R twice off the grid, U (3 -> 4)
    e = env("scout_alone")
    assert e.reset({"seed": "A"}) == e.reset({"seed": "C"})
    on_c = play(e, "C", {"scout": lambda obs: "#### ['D', 'R', 'R', 'U']"})
    assert not on_c.success and on_c.reward == pytest.approx(-0.04 - 0.2 + 0.1 * (4 - 4))
    # and the team without the message is the planner alone again
    muted = env()
    muted.relay = Mute()
    step = play(muted, "A", team)
    assert not step.success and step.reward == pytest.approx(-0.02 - 0.2)


def test_turns_messages_both_ways_and_the_commit(boards):
    e = env(max_turns=2)
    obs = e.reset({"seed": "A"})
    assert e.turn_order == ["scout", "planner"]
    assert "Turn 1 of 2." in obs["planner"] and "Or write a message to the scout" in obs["planner"]
    step = e.step({"scout": "wall at row 0, column 1"})
    assert step.pending and not step.done and step.reward == 0.0
    assert "[scout, turn 1]\nwall at row 0, column 1" in step.observations["planner"]
    with pytest.raises(ValueError, match=r"plan_path_split.step: expected an action for 'planner'"):
        e.step({"scout": "again"})
    step = e.step({"planner": "which way round it?"})  # no '####' before the last turn
    assert not step.pending and not step.done and step.reward == 0.0
    scout = step.observations["scout"]
    assert "[planner, turn 1]\nwhich way round it?" in scout and "Turn 2 of 2." in scout
    branch = clone(e)  # a tree's copy goes on alone
    planner = e.step({"scout": "go down first"}).observations["planner"]
    assert "Turn 2 of 2." in planner and "Or write a message" not in planner  # the last turn
    last = e.step({"planner": "['D', 'R', 'R', 'U']"})  # the last turn's reply is the plan
    assert last.done and last.success and last.reward == pytest.approx(10.36)
    assert last.reward_components["messages"] == 3.0
    assert last.reward_components["commit_turn"] == 2.0
    assert last.local_rewards == {"planner": pytest.approx(10.36)}
    assert len(branch.transcript) == 2 and not branch.done
    branch.step({"scout": "x"})
    no_plan = branch.step({"planner": "I give up"})
    assert no_plan.done and not no_plan.success and no_plan.reward == -1.0
    with pytest.raises(RuntimeError, match="the episode is over"):
        e.step({"scout": "more"})


def test_a_message_reaches_its_reader_through_the_relay_labelled(boards):
    seen = []

    class Recording:
        def show(self, message: Message) -> str:
            seen.append(message)
            return "<shown>"

    e = env(max_turns=2)
    e.relay = Recording()
    e.reset({"seed": "A"})
    step = e.step({"scout": "  walls: (0, 1)  "})
    assert "Messages so far:\n<shown>\n\nTurn 1 of 2." in step.observations["planner"]
    assert "[scout, turn 1]\nwalls: (0, 1)" in step.observations["scout"]  # its own: as written
    assert seen[-1] == Message(
        "scout", "planner", 0, "[scout, turn 1]\nwalls: (0, 1)", "message", "[scout, turn 1]\n"
    )


def test_views_pick_the_agents_and_what_they_see(boards):
    agents = {view: env(view).agents for view in split.VIEWS}
    assert agents == {
        "split": ["scout", "planner"],
        "full": ["planner"],
        "scout_alone": ["scout"],
        "planner_alone": ["planner"],
    }
    full = env("full").reset({"seed": "A"})["planner"]
    assert grid_lines(full) == ["P # G", ". . .", ". . ."]
    assert "Or write a message" not in full  # one agent, one turn: nobody to write to
    task = make_task("plan_path_split", view="scout_alone", n_train=1, n_eval=1, n_test=1)
    assert list(task.agents) == ["scout"] and "alone" in task.agents["scout"]
    with pytest.raises(ValueError, match=r"^plan_path_split.view: expected one of .*got 'both'$"):
        plan_path_split_task(view="both")
    with pytest.raises(ValueError, match=r"^plan_path_split.max_message_chars: expected >= 1"):
        plan_path_split_task(max_message_chars=0)
    with pytest.raises(ValueError, match=r"^plan_path_split.detour: expected true or false"):
        plan_path_split_task(detour="yes")


def test_long_messages_are_cut(boards):
    e = plan_path_split_task(n_train=1, n_eval=1, n_test=1, max_turns=1, max_message_chars=10)
    e = e.make_env()
    e.reset({"seed": "A"})
    planner = e.step({"scout": "x" * 50}).observations["planner"]
    assert "[scout, turn 1]\n" + "x" * 10 + " ...[cut]\n\nTurn 1 of 1." in planner


def test_boards_per_seed_are_fixed_need_a_detour_and_held_out_ones_are_not_trained_on():
    task = make_task("plan_path_split", n_train=400, n_eval=32, n_test=32)
    assert task.test[0] == {"seed": 1_500_000, "size": 4, "density": 0.3, "detour": True}
    # the same seed, the same board, by hand (the first test board)
    assert build_board(task.test[0]).render() == "P # G #\n. . . #\n. . . #\n. . . ."
    assert [build_board(ex).render() for ex in task.test] == [
        build_board(ex).render() for ex in task.test
    ]
    seeds = {name: {ex["seed"] for ex in getattr(task, name)} for name in ("train", "eval", "test")}
    for name, found in seeds.items():
        assert found <= set(SEED_RANGES[name]), name
    assert not seeds["train"] & seeds["test"] and not seeds["eval"] & seeds["test"]
    # by content too: no held-out board is a training board
    train = {build_board(ex).render() for ex in task.train}
    held_out = [build_board(ex) for ex in task.eval + task.test]
    assert not train & {b.render() for b in held_out}
    assert all(needs_detour(b) for b in held_out)
    # without the detour filter a seed gives Plan-Path's own board
    from teamrl.tasks.games import generate_plan_path

    plain = {"seed": 1_500_000, "size": 4, "detour": False}
    assert build_board(plain).render() == generate_plan_path(1_500_000, 4, 0.3).render()


# --- the route game (routes: 2) ------------------------------------------------------------------


def route_env(view: str = "split") -> split.SplitPlanPathEnv:
    return plan_path_split_task(view=view, n_train=2, n_eval=1, n_test=1, routes=2).make_env()


def routes_block(prompt: str) -> list[str]:
    """The candidate lines of a prompt ("A: ..."), without the header."""
    return [ln for ln in prompt.splitlines() if ln[:2] in ("A:", "B:", "C:")]


def test_the_decoys_of_a_hand_made_board_are_its_blocked_routes_of_the_shortest_length():
    # A: P#G / ... / ...: 4-move lists from (0, 0) to (0, 2) that stay on the grid and never
    # revisit a cell: D R R U (clear), D R U R and R D R U (each walks onto the wall at (0, 1));
    # R R D U comes back to the goal, R D U R back to (0, 1): revisits, not routes
    board = PlanPathState.from_text(A)
    assert split.blocked_routes(board) == [["D", "R", "U", "R"], ["R", "D", "R", "U"]]
    assert split.walked_cells(board, ["D", "R", "U", "R"]) == [(1, 0), (1, 1), (0, 1), (0, 2)]
    assert split.walked_cells(board, ["U"]) is None  # off the grid
    routes = split.candidate_routes(board, "A", 2)
    assert ["D", "R", "R", "U"] in routes
    assert [r for r in routes if r != ["D", "R", "R", "U"]][0] in split.blocked_routes(board)
    assert split.candidate_routes(board, "A", 2) == routes  # the seed decides
    assert split.candidate_routes(board, "A", 4) is None  # only 2 decoys


def test_in_a_route_game_the_planner_sees_the_lists_and_the_scout_what_they_walk_onto(boards):
    e = route_env()
    obs = e.reset({"seed": "A", "routes": 2})
    clear = e.routes.index(["D", "R", "R", "U"])
    decoy = 1 - clear
    # the decoy is one of A's two blocked routes; by hand, what each walks onto
    decoy_walks = {"['D', 'R', 'U', 'R']": ". . # .", "['R', 'D', 'R', 'U']": "# . . ."}
    lists = {0: "['D', 'R', 'R', 'U']", 1: repr(e.routes[decoy]).replace('"', "'")}
    walks = {0: ". . . .", 1: decoy_walks[lists[1]]}
    want_planner = [f"{'AB'[clear]}: {lists[0]}", f"{'AB'[decoy]}: {lists[1]}"]
    want_scout = [f"{'AB'[clear]}: {walks[0]}", f"{'AB'[decoy]}: {walks[1]}"]
    assert sorted(routes_block(obs["planner"])) == sorted(want_planner)
    assert sorted(routes_block(obs["scout"])) == sorted(want_scout)
    # one agent who sees everything is shown both, side by side
    full = route_env("full").reset({"seed": "A", "routes": 2})["planner"]
    assert f"{'AB'[clear]}: {lists[0]} walks onto {walks[0]}" in routes_block(full)
    # without a route game no candidate line is drawn
    assert routes_block(env().reset({"seed": "A"})["planner"]) == []


def test_the_team_wins_the_route_game_when_the_scout_names_the_clear_route(boards):
    def scout(obs):  # names the label whose route walks onto no wall
        return next(ln[0] for ln in routes_block(obs) if "#" not in ln)

    def planner(obs):  # copies the list of the label in the scout's message, else A's
        said = obs.split("[scout, turn 1]\n")[-1][:1] if "[scout, turn 1]" in obs else "A"
        line = next(ln for ln in routes_block(obs) if ln.startswith(said + ":"))
        return "#### " + line.split(": ", 1)[1]

    step = play(route_env(), "A", {"scout": scout, "planner": planner}, routes=2)
    assert step.success and step.reward == pytest.approx(-0.04 + 0.4 + 10.0)
    # muted, the planner takes A's list: a win only where A is the clear route
    muted = route_env()
    muted.relay = Mute()
    e = route_env()
    e.reset({"seed": "A", "routes": 2})
    assert play(muted, "A", {"scout": scout, "planner": planner}, routes=2).success == (
        e.routes[0] == ["D", "R", "R", "U"]
    )


def test_route_games_refuse_a_bad_count_and_balance_their_labels():
    for bad in (1, 9, -1):
        with pytest.raises(ValueError, match=rf"plan_path_split.routes: .* got {bad}"):
            plan_path_split_task(routes=bad, n_train=1, n_eval=1, n_test=1)
    task = plan_path_split_task(routes=2, n_train=1, n_eval=1, n_test=40)
    clear = []
    for example in task.test:
        e = task.make_env()
        e.reset(example)
        assert len(e.routes) == 2 and all(len(r) == e.state.shortest_path_length for r in e.routes)
        walks = [split.walked_cells(e.state, r) for r in e.routes]
        walls = [sum(e.state.grid[r][c] == "#" for r, c in w) for w in walks]
        assert sorted(w == 0 for w in walls) == [False, True]  # exactly one route is clear
        clear.append(walls.index(0))
    assert 10 <= sum(clear) <= 30  # the clear route's label is drawn, not fixed


def test_a_route_games_planner_may_commit_a_label_and_the_env_plays_its_list(boards):
    e = route_env()
    e.reset({"seed": "A", "routes": 2})
    clear = "AB"[e.routes.index(["D", "R", "R", "U"])]
    decoy = "AB"["AB".index(clear) ^ 1]
    win = play(
        route_env(), "A", {"scout": lambda o: "", "planner": lambda o: f"#### {clear}"}, routes=2
    )
    assert win.success and win.reward == pytest.approx(-0.04 + 0.4 + 10.0)
    # the decoy walks onto the wall: one invalid move, and it does not end on the goal
    lose = play(
        route_env(), "A", {"scout": lambda o: "", "planner": lambda o: f"#### {decoy}."}, routes=2
    )
    assert not lose.success and lose.infos["actions"] == e.routes["AB".index(decoy)]
    # a label past the candidates, or a label without a route game, is not a plan
    past = play(route_env(), "A", {"scout": lambda o: "", "planner": lambda o: "#### C"}, routes=2)
    plain = play(env(), "A", {"scout": lambda o: "", "planner": lambda o: f"#### {clear}"})
    for step in (past, plain):
        assert step.infos["actions"] is None
        assert step.reward == pytest.approx(split.PlanPathRewards().no_action_penalty)


def test_a_scout_reward_pays_the_scout_for_naming_the_clear_route_first(boards):
    def scout_step(text: str, reward: float):
        e = plan_path_split_task(
            n_train=1, n_eval=1, n_test=1, routes=2, scout_reward=reward
        ).make_env()
        e.reset({"seed": "A", "routes": 2})
        clear = "AB"[e.routes.index(["D", "R", "R", "U"])]
        return e.step({"scout": text.format(clear=clear, decoy="AB"["AB".index(clear) ^ 1])})

    assert scout_step("Route {clear} is clear", 0.5).local_rewards == {"scout": 0.5}
    # the first label it names counts: the decoy first earns nothing, the clear one after it
    # does not help; nor does a message without a label
    for text in ("Route {decoy}, not {clear}", "the clear route", "Route{clear}"):
        assert scout_step(text, 0.5).local_rewards == {"scout": 0.0}, text
    assert scout_step("Route {clear}", 0.0).local_rewards == {}  # off: the team reward only
    with pytest.raises(ValueError, match="plan_path_split.scout_reward: expected a number"):
        plan_path_split_task(n_train=1, n_eval=1, n_test=1, scout_reward="1")


def test_a_scout_alone_cannot_commit_a_label_it_was_shown_no_list_for(boards):
    e = plan_path_split_task(view="scout_alone", n_train=1, n_eval=1, n_test=1, routes=2).make_env()
    obs = e.reset({"seed": "A", "routes": 2})
    clear = "AB"[e.routes.index(["D", "R", "R", "U"])]
    assert "['D', 'R', 'R', 'U']" not in obs["scout"]  # it sees what routes walk onto, no list
    step = e.step({"scout": f"#### {clear}"})
    assert step.infos["actions"] is None and not step.success
