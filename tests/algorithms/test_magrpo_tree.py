"""MAGRPO returns and advantages, computed by hand on small trees (no model involved)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from helpers.rollout_joint import ScriptedTeam, reward_table, two_turn_env

from teamrl.algorithms.magrpo import joint_rollout
from teamrl.credit.advantages import (
    advantage_warnings,
    baseline_advantages,
    compute_advantages,
)
from teamrl.envs.functional import FunctionEnv
from teamrl.rollout.common import RewardError
from teamrl.sample import Sample


def test_aligned_single_turn_returns_and_mean_baseline():
    rewards = {(0, 0): 1.0, (1, 1): 3.0, (2, 2): 2.0}
    team = ScriptedTeam()
    env = lambda: FunctionEnv(["a", "b"], reward_table(rewards))  # noqa: E731
    out = joint_rollout(team, env, [(0, {"prompt": "p"})], num_generations=3, max_turns=1)
    assert team.generate_calls == 1  # one call for both agents and all samples
    assert len(out.samples) == 6
    for s in out.samples:
        g = int(s.text[1:])
        assert s.return_ == rewards[(g, g)]
        assert s.group == (0, 0, "root", s.agent)  # (problem, batch slot, node, agent)
    compute_advantages(out.samples, "mean", "none")
    adv = {(s.agent, s.text): s.advantage for s in out.samples}
    # mean of [1, 3, 2] = 2
    assert adv[("a", "a0")] == pytest.approx(-1.0)
    assert adv[("a", "a1")] == pytest.approx(1.0)
    assert adv[("b", "b2")] == pytest.approx(0.0)


def test_cross_mode_credits_marginal_mean():
    # G=2, N=2: 4 joint actions. a0 is in (0,0),(0,1): mean (1 + 3)/2 = 2. a1: (5 + 7)/2 = 6.
    # b0 is in (0,0),(1,0): (1 + 5)/2 = 3.  b1: (3 + 7)/2 = 5.
    rewards = {(0, 0): 1.0, (0, 1): 3.0, (1, 0): 5.0, (1, 1): 7.0}
    team = ScriptedTeam()
    env = lambda: FunctionEnv(["a", "b"], reward_table(rewards))  # noqa: E731
    out = joint_rollout(
        team, env, [(0, {"prompt": "p"})], num_generations=2, max_turns=1, joint_mode="cross"
    )
    credit = {s.text: s.return_ for s in out.samples}
    assert credit == {"a0": 2.0, "a1": 6.0, "b0": 3.0, "b1": 5.0}
    compute_advantages(out.samples, "mean", "none")
    adv = {s.text: s.advantage for s in out.samples}
    assert adv == {"a0": -2.0, "a1": 2.0, "b0": -1.0, "b1": 1.0}


def test_two_turn_tree_discounted_returns():
    """Turn 0 reward r0(g); each child's turn-1 reward r1 depends on the parent branch.

    R_root_j = r0_j + gamma * mean_k r1(j, k)  with gamma = 0.5.
    """
    gamma = 0.5

    team = ScriptedTeam()
    out = joint_rollout(
        team, two_turn_env, [(0, {"prompt": "p"})], num_generations=2, max_turns=2, discount=gamma
    )
    assert team.generate_calls == 2  # one per turn, covering every node
    root = out.roots[0]
    assert set(root.children) == {0, 1}
    # child of branch 0: rewards [0, 1] -> mean 0.5; child of branch 1: [10, 11] -> mean 10.5
    assert root.children[0].rewards == [0.0, 1.0]
    assert root.children[1].rewards == [10.0, 11.0]
    assert root.returns == [1.0 + gamma * 0.5, 2.0 + gamma * 10.5]
    groups = {s.group for s in out.samples}
    assert groups == {(0, 0, n, ag) for n in ("root", "0", "1") for ag in "ab"}
    compute_advantages(out.samples, "mean", "none")
    root_a = sorted(
        (s for s in out.samples if s.group == (0, 0, "root", "a")), key=lambda s: s.text
    )
    diff = (2.0 + gamma * 10.5) - (1.0 + gamma * 0.5)
    assert [s.advantage for s in root_a] == pytest.approx([-diff / 2, diff / 2])
    leaf = sorted((s for s in out.samples if s.group == (0, 0, "1", "b")), key=lambda s: s.text)
    assert [s.return_ for s in leaf] == [10.0, 11.0]
    assert [s.advantage for s in leaf] == pytest.approx([-0.5, 0.5])


def test_early_termination_is_explicit():
    env = lambda: FunctionEnv(["a", "b"], lambda c, e: 1.0)  # noqa: E731
    kw = dict(num_generations=2, max_turns=2)
    full = joint_rollout(ScriptedTeam(), env, [(0, {"prompt": "p"})], **kw)
    assert len(full.roots[0].children) == 2  # no hidden default stops the tree
    cut = joint_rollout(
        ScriptedTeam(), env, [(0, {"prompt": "p"})], early_termination_threshold=0.5, **kw
    )
    assert cut.roots[0].children == {}
    assert len(cut.samples) == 4


def test_baselines_by_hand():
    r = torch.tensor([1.0, 2.0, 6.0], dtype=torch.float64)
    assert baseline_advantages(r, "mean").tolist() == pytest.approx([-2, -1, 3])
    # rloo: R_g - mean of the others: 1 - 4, 2 - 3.5, 6 - 1.5
    assert baseline_advantages(r, "rloo").tolist() == pytest.approx([-3, -1.5, 4.5])
    assert baseline_advantages(r, "max").tolist() == pytest.approx([-5, -4, 0])
    assert baseline_advantages(r, "raw").tolist() == pytest.approx([1, 2, 6])


def _samples(returns, group="g"):
    return [Sample("a", "p", 0, group, [1], [2], [0.0], return_=r) for r in returns]


def test_scale_rewards_group_zscore_and_baselines_coincide():
    results = {}
    for baseline in ("mean", "rloo", "max", "raw"):
        ss = _samples([1.0, 2.0, 6.0])
        compute_advantages(ss, baseline, "group")
        results[baseline] = [s.advantage for s in ss]
    std = torch.tensor([-2.0, -1.0, 3.0]).std().item()  # unbiased, as in TRL
    expected = [-2 / (std + 1e-4), -1 / (std + 1e-4), 3 / (std + 1e-4)]
    for adv in results.values():
        assert adv == pytest.approx(expected, rel=1e-4)  # equal up to eps
    assert advantage_warnings("rloo", "group") and not advantage_warnings("rloo", "none")
    # without normalisation they differ
    raw, mean = _samples([1.0, 2.0, 6.0]), _samples([1.0, 2.0, 6.0])
    compute_advantages(raw, "raw", "none")
    compute_advantages(mean, "mean", "none")
    assert [s.advantage for s in raw] != [s.advantage for s in mean]


def test_scale_rewards_batch_uses_batch_std_of_raw_rewards_as_trl():
    # TRL: advantages = rewards - group mean; std_rewards = rewards.std() over the whole batch.
    ss = _samples([0.0, 2.0], "g1") + _samples([0.0, 4.0], "g2")
    stats = compute_advantages(ss, "mean", "batch")
    # raw rewards 0, 2, 0, 4: mean 1.5, squared deviations 2.25 + 0.25 + 2.25 + 6.25 = 11,
    # unbiased std sqrt(11 / 3) (the centred values -1, 1, -2, 2 would give sqrt(10 / 3))
    std = math.sqrt(11 / 3)
    want = [-1 / (std + 1e-4), 1 / (std + 1e-4), -2 / (std + 1e-4), 2 / (std + 1e-4)]
    assert [s.advantage for s in ss] == pytest.approx(want, rel=1e-9)
    assert stats["frac_zero_std_groups"] == 0.0
    # max and raw baselines centre to the same values; rloo's are G/(G-1) = 2 times them
    for baseline, factor in (("max", 1.0), ("raw", 1.0), ("rloo", 2.0)):
        other = _samples([0.0, 2.0], "g1") + _samples([0.0, 4.0], "g2")
        compute_advantages(other, baseline, "batch")
        assert [s.advantage for s in other] == pytest.approx([factor * w for w in want])


def test_zero_variance_group_gets_zero_advantage_and_is_counted():
    ss = _samples([1.0, 1.0], "flat") + _samples([0.0, 1.0], "live")
    stats = compute_advantages(ss, "mean", "group")
    assert [s.advantage for s in ss[:2]] == [0.0, 0.0]
    assert stats["frac_zero_std_groups"] == 0.5
    assert all(math.isfinite(s.advantage) for s in ss)


def test_empty_and_singleton_groups_are_errors():
    with pytest.raises(ValueError, match="empty"):
        compute_advantages([], "mean", "group")
    with pytest.raises(ValueError, match=">= 2"):
        compute_advantages(_samples([1.0], "lonely"), "mean", "group")


def test_reward_that_raises_is_reported_with_context():
    def bad(completions, example):
        raise KeyError("score")

    env = lambda: FunctionEnv(["a", "b"], bad)  # noqa: E731
    with pytest.raises(RewardError, match="example 7, turn 0"):
        joint_rollout(ScriptedTeam(), env, [(7, {"prompt": "p"})], num_generations=2, max_turns=1)


def test_nan_reward_is_an_error():
    env = lambda: FunctionEnv(["a", "b"], lambda c, e: float("nan"))  # noqa: E731
    with pytest.raises(RewardError, match="NaN"):
        joint_rollout(ScriptedTeam(), env, [(0, {"prompt": "p"})], num_generations=2, max_turns=1)


def _with_local(values, local):
    """FunctionEnv whose steps also carry local_rewards looked up like reward_table."""
    import dataclasses

    class LocalEnv(FunctionEnv):
        def step(self, actions):
            step = super().step(actions)
            key = (int(actions["a"][1:]), int(actions["b"][1:]))
            return dataclasses.replace(step, local_rewards=dict(local[key]))

    return lambda: LocalEnv(["a", "b"], reward_table(values))


def test_reward_per_agent_credits_alpha_team_plus_own_local():
    team_r = {(0, 0): 1.0, (1, 1): 3.0}
    local = {(0, 0): {"a": 2.0, "b": 0.0}, (1, 1): {"a": 0.0, "b": 4.0}}
    kw = dict(num_generations=2, max_turns=1)
    base = joint_rollout(ScriptedTeam(), _with_local(team_r, local), [(0, {"prompt": "p"})], **kw)
    # off (the default): every agent is credited with the team reward, locals ignored
    assert {s.text: s.return_ for s in base.samples} == {"a0": 1, "a1": 3, "b0": 1, "b1": 3}
    out = joint_rollout(
        ScriptedTeam(), _with_local(team_r, local), [(0, {"prompt": "p"})],
        alpha=0.5, reward_per_agent=True, **kw,
    )  # fmt: skip
    # a: 0.5 * 1 + 2 = 2.5, 0.5 * 3 + 0 = 1.5;  b: 0.5 * 1 + 0 = 0.5, 0.5 * 3 + 4 = 5.5
    assert {s.text: s.return_ for s in out.samples} == {"a0": 2.5, "a1": 1.5, "b0": 0.5, "b1": 5.5}
    assert {s.text: s.reward for s in out.samples} == {"a0": 2.5, "a1": 1.5, "b0": 0.5, "b1": 5.5}
    assert out.roots[0].returns == [1.0, 3.0]  # the team return: what evaluation reports
    compute_advantages(out.samples, "mean", "none")
    # agent a's sample 0 did better on a's own reward though the team did worse
    adv = {s.text: s.advantage for s in out.samples}
    assert adv == {"a0": 0.5, "a1": -0.5, "b0": -2.5, "b1": 2.5}


def test_reward_per_agent_in_cross_mode_takes_each_agents_marginal():
    team_r = {(0, 0): 0.0, (0, 1): 0.0, (1, 0): 0.0, (1, 1): 0.0}
    # a's own reward: 1 for a1; b's own reward: b's index times 2 plus a's index
    local = {(i, j): {"a": float(i), "b": 2.0 * j + i} for i in (0, 1) for j in (0, 1)}
    out = joint_rollout(
        ScriptedTeam(), _with_local(team_r, local), [(0, {"prompt": "p"})], num_generations=2,
        max_turns=1, joint_mode="cross", alpha=0.0, reward_per_agent=True,
    )  # fmt: skip
    # a0: mean(0, 0) = 0; a1: mean(1, 1) = 1; b0: mean(0, 1) = 0.5; b1: mean(2, 3) = 2.5
    assert {s.text: s.return_ for s in out.samples} == {"a0": 0, "a1": 1, "b0": 0.5, "b1": 2.5}


def test_reward_per_agent_two_turn_returns_follow_each_agent():
    """R^x_j = c^x_j + gamma * mean_k R^x(child j, k), with c^x = alpha * team + local_x."""
    gamma, alpha = 0.5, 1.0

    class TwoTurnEnv(FunctionEnv):
        def step(self, actions):
            import dataclasses

            step = super().step(actions)
            g = int(actions["a"][1:])
            if self.example.get("turn", 0) == 0:
                self.example = {**self.example, "turn": 1, "parent": g}
                return dataclasses.replace(step, local_rewards={"a": 1.0 * g, "b": 0.0})
            return dataclasses.replace(step, local_rewards={"a": 0.0, "b": 10.0 + g})

    def reward(completions, example):
        return 1.0  # team reward 1 at every step

    out = joint_rollout(
        ScriptedTeam(), lambda: TwoTurnEnv(["a", "b"], reward), [(0, {"prompt": "p"})],
        num_generations=2, max_turns=2, discount=gamma, alpha=alpha, reward_per_agent=True,
    )  # fmt: skip
    root = out.roots[0]
    # leaves: a's credit 1 + 0 = 1 at both; b's credit 1 + 10 + k = 11, 12 (mean 11.5)
    assert root.children[0].agent_returns == {"a": [1.0, 1.0], "b": [11.0, 12.0]}
    # root: a: 1 + g + 0.5 * 1 = 1.5, 2.5; b: 1 + 0 + 0.5 * 11.5 = 6.75 for both branches
    assert root.agent_returns == {"a": [1.5, 2.5], "b": [6.75, 6.75]}
    assert root.returns == [1.5, 1.5]  # team: 1 + 0.5 * 1
    roots_a = {s.text: s.return_ for s in out.samples if s.group == (0, 0, "root", "a")}
    assert roots_a == {"a0": 1.5, "a1": 2.5}


def test_reward_per_agent_is_magrpo_only():
    from teamrl.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="algorithm.reward_per_agent: only MAGRPO"):
        load_config("quickstart", ["algorithm.name=grpo", "algorithm.reward_per_agent=true"])


# --- the counterfactual baseline (COMA) in cross mode -----------------------------------------


def test_counterfactual_advantage_by_hand_on_a_two_agent_cross_tree():
    # R(a_i, b_j): 1, 3, 5, 11 (not additive: a's credit depends on b's choice)
    rewards = {(0, 0): 1.0, (0, 1): 3.0, (1, 0): 5.0, (1, 1): 11.0}
    out = joint_rollout(
        ScriptedTeam(), lambda: FunctionEnv(["a", "b"], reward_table(rewards)),
        [(0, {"prompt": "p"})], num_generations=2, max_turns=1, joint_mode="cross",
        counterfactual=True,
    )  # fmt: skip
    # a, joint (0,0): 1 - mean(R(0,0), R(1,0)) = 1 - 3 = -2; (0,1): 3 - mean(3, 11) = -4
    #    a0 = mean(-2, -4) = -3, spread 1; (1,0): 5 - 3 = 2; (1,1): 11 - 7 = 4: a1 = 3, spread 1
    # b, joint (0,0): 1 - mean(R(0,0), R(0,1)) = 1 - 2 = -1; (1,0): 5 - mean(5, 11) = -3
    #    b0 = -2, spread 1; (0,1): 3 - 2 = 1; (1,1): 11 - 8 = 3: b1 = 2, spread 1
    info = {s.text: s.info for s in out.samples}
    want = {"a0": -3.0, "a1": 3.0, "b0": -2.0, "b1": 2.0}
    assert {t: i["counterfactual_advantage"] for t, i in info.items()} == want
    assert all(i["partner_spread"] == 1.0 for i in info.values())
    assert out.metrics["advantage/partner_spread/a"] == 1.0
    compute_advantages(out.samples, "counterfactual", "none")
    assert {s.text: s.advantage for s in out.samples} == want
    # the same as MAGRPO's marginal minus the group mean: a 2, 8 (mean 5); b 3, 7 (mean 5)
    compute_advantages(out.samples, "mean", "none")
    assert {s.text: s.advantage for s in out.samples} == want


@pytest.mark.parametrize("scale", ["none", "group", "batch", "agent"])
def test_counterfactual_equals_the_mean_baseline_over_the_full_product(scale):
    # three agents, G = 3 (27 joint actions), two turns: every node of the tree
    import random

    rng = random.Random(7)
    table = {k: rng.uniform(-1, 1) for k in itertools.product(range(3), repeat=4)}

    def reward(completions, example):
        key = tuple(int(completions[a][1:]) for a in "abc")
        return table[(*key, example.get("turn", 0))] * (1 + key[0] * key[1])

    class TwoTurns(FunctionEnv):
        def step(self, actions):
            step = super().step(actions)
            self.example = {**self.example, "turn": 1}
            return step

    def run():
        return joint_rollout(
            ScriptedTeam("abc"), lambda: TwoTurns(list("abc"), reward), [(0, {"prompt": "p"})],
            num_generations=3, max_turns=2, joint_mode="cross", counterfactual=True,
        )  # fmt: skip

    cf, mean = run(), run()
    assert len(cf.samples) == 9 + 27 * 9  # the root and 27 children, 3 agents x 3 samples
    compute_advantages(cf.samples, "counterfactual", scale)
    compute_advantages(mean.samples, "mean", scale)
    got = [s.advantage for s in cf.samples]
    assert got == pytest.approx([s.advantage for s in mean.samples], abs=1e-12)
    assert any(abs(g) > 0.1 for g in got)


def test_counterfactual_needs_the_cross_tree():
    from teamrl.config import ConfigError, load_config

    two = ["team.agents=[{name: a}, {name: b}]", "algorithm.baseline=counterfactual"]
    load_config(None, [*two, "algorithm.joint_mode=cross"])
    for bad in (["algorithm.joint_mode=aligned"], ["algorithm.name=at_grpo"]):
        with pytest.raises(ConfigError, match="algorithm.baseline: expected a baseline other"):
            load_config(None, [*two, *bad])
    # samples without the tree's values (an aligned tree) are refused, not read as zeros
    out = joint_rollout(
        ScriptedTeam(), lambda: FunctionEnv(["a", "b"], reward_table({(0, 0): 0, (1, 1): 1})),
        [(0, {"prompt": "p"})], num_generations=2, max_turns=1, counterfactual=True,
    )  # fmt: skip
    with pytest.raises(ValueError, match="counterfactual advantages"):
        compute_advantages(out.samples, "counterfactual", "none")
