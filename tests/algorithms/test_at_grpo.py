"""AT-GRPO tree and trajectory GRPO on scripted agents: groups, own-successor rewards,
sequential visibility, no samples lost at termination, selection rules, returns."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from helpers.rollout_turns import CounterEnv, ScriptedTeam, run

from teamrl.algorithms.at_grpo import select_branch, trajectory_rollout
from teamrl.credit.advantages import compute_advantages
from teamrl.generation import Generation


def test_group_keys_and_sizes_never_merge_problems():
    team = ScriptedTeam()
    out = run(team, examples=[(0, {}), (1, {"start": 10})])
    groups: dict = {}
    for s in out.samples:
        groups.setdefault(s.group, []).append(s)
    # (problem, batch slot, turn, agent)
    assert set(groups) == {(p, p, t, a) for p in (0, 1) for t in (0, 1) for a in ("tool", "plan")}
    assert all(len(v) == 3 for v in groups.values())
    # one generate call per (turn, agent) node, covering both problems
    assert team.calls == 4


def test_each_branch_is_rewarded_on_its_own_successor():
    out = run(alpha=1.0, max_turns=1)
    tool = [s for s in out.samples if s.agent == "tool"]
    plan = [s for s in out.samples if s.agent == "plan"]
    # tool candidates add 0, 1, 2 to total 0: team = total, local = digit -> r = 2 * digit
    assert [s.reward for s in tool] == [0.0, 2.0, 4.0]
    # greedy keeps the tool's best branch (total 2); plan's candidates add 0, 1, 2 to it.
    # The reference code gave every later agent identical rewards; here they differ.
    assert [s.reward for s in plan] == [2.0 + 0, 3.0 + 1, 4.0 + 2]
    assert len({s.reward for s in plan}) == 3


def test_alpha_mixes_team_and_local_and_both_are_logged():
    out = run(alpha=0.5, max_turns=1)
    tool = [s for s in out.samples if s.agent == "tool"]
    assert [s.reward for s in tool] == [0.5 * k + k for k in range(3)]
    assert [s.team_reward for s in tool] == [0.0, 1.0, 2.0]
    assert [s.local_reward for s in tool] == [0.0, 1.0, 2.0]
    assert "reward/team/tool/mean" in out.metrics and "reward/local/plan/mean" in out.metrics


def test_later_agents_see_earlier_actions_of_the_same_turn():
    team = ScriptedTeam()
    run(team, max_turns=1)
    plan_obs = [o for a, o in team.seen if a == "plan"]
    assert plan_obs == ["tool:2"]  # the tool's committed (greedy) action


def test_no_samples_lost_when_the_last_agent_ends_the_episode():
    out = run(env=lambda: CounterEnv(goal=3), max_turns=3)
    # turn 0: tool picks 2 (total 2), plan picks 2 (total 4 >= 3): episode ends after plan
    assert {(s.turn, s.agent) for s in out.samples} == {(0, "tool"), (0, "plan")}
    assert sum(s.agent == "plan" for s in out.samples) == 3
    assert out.episodes[0]["success"] is True and out.episodes[0]["turns"] == 1


def test_termination_mid_turn_still_records_the_group():
    out = run(env=lambda: CounterEnv(goal=2), max_turns=2)
    assert [(s.turn, s.agent) for s in out.samples] == [(0, "tool")] * 3
    assert out.metrics["success_rate"] == 1.0


def test_selection_rules():
    rng = random.Random(0)
    assert select_branch([1.0, 3.0, 2.0], "greedy", 1.0, rng) == 1
    ties = {select_branch([3.0, 1.0, 3.0], "greedy", 1.0, random.Random(s)) for s in range(30)}
    assert ties == {0, 2}  # ties broken at random, never the worse branch
    assert select_branch([0.0, 5.0, 1.0], "sample", 1e-3, rng) == 1  # cold softmax = argmax
    counts = [0, 0, 0]
    for s in range(3000):
        counts[select_branch([0.0, 0.0, 0.0], "sample", 1.0, random.Random(s))] += 1
    assert all(900 < c < 1100 for c in counts)
    picks = {select_branch([0.0, 9.0, 0.0], "random", 1.0, random.Random(s)) for s in range(50)}
    assert picks == {0, 1, 2}
    with pytest.raises(ValueError, match="selection"):
        select_branch([1.0], "best", 1.0, rng)


def test_rollout_is_reproducible_by_seed():
    a = run(selection="random", seed=5)
    b = run(selection="random", seed=5)
    key = lambda out: [(s.group, s.reward) for s in out.samples]  # noqa: E731
    assert key(a) == key(b)
    assert any(key(run(selection="random", seed=s)) != key(a) for s in range(6, 12))


def test_returns_are_rewards_unless_discount_is_set():
    out = run(alpha=0.0, max_turns=2)
    assert all(s.return_ == s.reward for s in out.samples)


def test_discount_return_to_go_along_chosen_path():
    out = run(alpha=0.0, discount=0.5, max_turns=2)
    # alpha = 0: r = local digit. Greedy picks 2 at every node.
    # tool turn 0: R_k = k + 0.5 * 2 (its chosen reward at turn 1); turn 1: R_k = k
    t0 = [s.return_ for s in out.samples if s.agent == "tool" and s.turn == 0]
    t1 = [s.return_ for s in out.samples if s.agent == "tool" and s.turn == 1]
    assert t0 == [0 + 1.0, 1 + 1.0, 2 + 1.0]
    assert t1 == [0.0, 1.0, 2.0]


def test_trajectory_grpo_keeps_every_sample_and_uses_episode_baseline():
    # K=3 independent episodes; with one candidate per node each episode takes candidate 0,
    # so all episodes match: use a team that returns a different digit per episode instead.
    class PerEpisodeTeam(ScriptedTeam):
        def generate(self, jobs, ignore_eos=False):
            self.calls += 1
            return [[Generation([1], [i], [0.0], False)] for i, _ in enumerate(jobs)]

    out = run(
        PerEpisodeTeam(),
        env=lambda: CounterEnv(goal=3),
        rollout=trajectory_rollout,
        max_turns=2,
        alpha=0.0,
    )
    # episode i adds i at every action: ep0 never ends (4 actions, return 0); ep1 ends at its
    # 3rd action (total 3, return 3); ep2 ends at its 2nd action (total 4, return 4)
    eps = sorted(out.episodes, key=lambda e: e["episode"])
    assert [e["turns"] for e in eps] == [2, 2, 1]
    assert {s.group for s in out.samples} == {(0, 0)}
    assert len(out.samples) == 4 + 3 + 2  # every sample kept, also early-ended episodes'
    compute_advantages(out.samples, "mean", "none")
    # the baseline is the mean over EPISODES (7/3), not over the 9 samples
    adv = {s.episode[-1]: s.advantage for s in out.samples}
    assert adv == pytest.approx({0: -7 / 3, 1: 2 / 3, 2: 5 / 3})


def test_simultaneous_env_with_several_agents_is_rejected():
    class Simul(CounterEnv):
        def __init__(self):
            super().__init__()
            del self.turn_order

    with pytest.raises(ValueError, match="turn_order"):
        run(env=Simul)


def test_filter_groups_drops_only_zero_variance_groups():
    from teamrl.credit.filtering import drop_flat_groups
    from teamrl.sample import Sample

    def smp(group, ret):
        return Sample("a", "a", 0, group, [1], [2], [0.0], return_=ret)

    flat = [smp("flat", 1.0), smp("flat", 1.0)]
    live = [smp("live", 0.0), smp("live", 1.0)]
    assert drop_flat_groups(flat + live) == live


def test_simultaneous_env_runs_sequentially_with_lookahead_scoring():
    from teamrl.envs.functional import FunctionEnv
    from teamrl.envs.sequential import SequentialTurns

    # team reward of the joint action (a, b) = 10 a + b, defined only once both acted
    def reward(c, example):
        return 10.0 * int(c["tool"]) + int(c["plan"])

    team = ScriptedTeam()
    out = run(
        team,
        env=lambda: SequentialTurns(FunctionEnv(["tool", "plan"], reward)),
        examples=[(0, {"prompt": "p"})],
        max_turns=1,
        alpha=1.0,
    )
    tool = [s for s in out.samples if s.agent == "tool"]
    plan = [s for s in out.samples if s.agent == "plan"]
    # tool's candidates k are completed by one lookahead sample of plan (candidate 0): 10 k
    assert [s.reward for s in tool] == [0.0, 10.0, 20.0]
    # then plan acts for real on the chosen tool action (2): 20 + k
    assert [s.reward for s in plan] == [20.0, 21.0, 22.0]
    plan_obs = [o for a, o in team.seen if a == "plan"]
    assert all("[tool wrote]\n2" in o for o in plan_obs[-1:])  # sequential visibility
    assert out.episodes[0]["team_return"] == 22.0  # the lookahead estimate is not counted


def test_sequential_turns_validates_order():
    from teamrl.envs.functional import FunctionEnv
    from teamrl.envs.sequential import SequentialTurns

    with pytest.raises(ValueError, match="turn_order"):
        SequentialTurns(FunctionEnv(["a", "b"], lambda c, e: 0.0), ["a", "c"])


def test_a_repeated_example_gets_its_own_groups():
    # The data stream may return one example twice in a step (epoch wrap): trees must not merge.
    out = run(examples=[(0, {}), (0, {})])
    groups: dict = {}
    for s in out.samples:
        groups.setdefault(s.group, []).append(s)
    assert len(groups) == 2 * 2 * 2  # 2 slots x 2 turns x 2 agents
    assert all(len(v) == 3 for v in groups.values())


class PermutedTeam(ScriptedTeam):
    """Candidate k says ``digits[k]``: rewards are not monotone in k."""

    def __init__(self, digits=(2, 0, 1)):
        super().__init__()
        self.digits = digits

    def decode(self, agent, ids):
        return str(self.digits[ids[0]])


@pytest.mark.parametrize("selection", ["greedy", "sample", "random"])
def test_the_selected_branch_state_continues(selection):
    team = PermutedTeam()
    out = run(team, selection=selection, max_turns=1, seed=3)
    tool = [s for s in out.samples if s.agent == "tool"]
    plan = [s for s in out.samples if s.agent == "plan"]
    # plan candidates were scored on the chosen tool branch: reward = 2 * (chosen + d) ... with
    # alpha 1: team = chosen + d, local = d. Recover the chosen tool digit from plan's rewards.
    chosen = {s.reward - 2 * int(s.text) for s in plan}
    assert len(chosen) == 1
    chosen_digit = chosen.pop()
    assert chosen_digit in {int(s.text) for s in tool}
    # the plan agent saw exactly that branch's log
    plan_obs = [o for a, o in team.seen if a == "plan"]
    assert plan_obs == [f"tool:{int(chosen_digit)}"]
    if selection == "greedy":
        assert chosen_digit == 2  # candidate 0, not the last one


def test_sample_selection_follows_the_softmax():
    # rewards [0, ln 2] at temperature 1: probabilities 1/3 and 2/3
    import math

    picks = [
        select_branch([0.0, math.log(2)], "sample", 1.0, random.Random(s)) for s in range(6000)
    ]
    assert abs(sum(picks) / len(picks) - 2 / 3) < 0.02


def test_tool_candidates_earn_the_team_reward_on_the_game_env():
    """Tool/plan games: each tool candidate is scored by finishing the turn on its own copy, so
    alpha changes the tool agent's rewards (the reference gave the tool no team term here)."""
    from teamrl.tasks.games.episode import ToolPlanEnv
    from teamrl.tasks.games.plan_path import SPEC, PlanPathRewards

    class Result(SimpleNamespace):
        pass

    def runner(code):  # the "code" is the move list itself
        return Result(ok=True, stdout=code, stderr="", timed_out=False)

    board = {"seed": 5, "size": 4}

    class MovesTeam(ScriptedTeam):
        # tool candidate k prints one of three different move lists
        TOOL = ["['R', 'D']", "['L']", "['U', 'U']"]

        def decode(self, agent, ids):
            # the lookahead plan sample copies the tool's parsed list from its observation
            return self.TOOL[ids[0]] if agent == "tool" else "#### " + self.TOOL[ids[0]]

    def env():
        return ToolPlanEnv(SPEC, PlanPathRewards(), runner=runner, max_turns=1)

    def rewards(alpha):
        out = run(MovesTeam(), env=env, examples=[(0, board)], max_turns=1, alpha=alpha)
        return [s for s in out.samples if s.agent == "tool"]

    one, zero = rewards(1.0), rewards(0.0)
    assert [s.local_reward for s in one] == [s.local_reward for s in zero]
    assert [s.team_reward for s in one] != [0.0, 0.0, 0.0]
    assert [a.reward - b.reward for a, b in zip(one, zero)] == [s.team_reward for s in one]
