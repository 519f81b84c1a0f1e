"""How an app's calls become groups and returns (``algorithm.app_groups``), by hand: two
episodes of one problem whose calls differ in number, one with local rewards."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from teamrl.algorithms.app import (
    check_one_call_each,
    drop_small_groups,
    episode_samples,
    summary,
)
from teamrl.apps.episodes import EpisodeRecord, Served
from teamrl.credit.advantages import compute_advantages
from teamrl.evaluation import summarise
from teamrl.generation import Generation
from teamrl.rollout.common import RewardError

TEAM = SimpleNamespace(
    policy_of={"alice": "alice", "bob": "bob"},
    agents={"alice": SimpleNamespace(temperature=0.7), "bob": SimpleNamespace(temperature=0.7)},
)


def served(agent: str, index: int, order: int) -> Served:
    return Served(agent, index, order, [1, 2], Generation([1, 2], [3], [-0.5], False), "t")


def episodes() -> list[EpisodeRecord]:
    # problem 5 (slot 0): episode 0 calls alice, bob, alice and earns 1.0 with alice's local
    # 0.5; episode 1 calls alice once and earns 0.0, with no local rewards
    first = EpisodeRecord(5, 0, 0, [served("alice", 0, 0), served("bob", 0, 1), served("alice", 1, 2)])  # fmt: skip
    first.team_reward, first.local_rewards = 1.0, {"alice": 0.5}
    second = EpisodeRecord(5, 0, 1, [served("alice", 0, 0)])
    return [first, second]


def samples(groups: str, alpha: float = 2.0):
    return [s for rec in episodes() for s in episode_samples(TEAM, rec, groups, alpha, False)]


def test_call_groups_are_per_agent_and_call_index_with_mixed_returns():
    got = samples("call")
    assert [(s.group, s.return_, s.episode) for s in got] == [
        ((5, 0, "alice", 0), 2 * 1.0 + 0.5, (5, 0, 0)),  # alpha * team + local
        ((5, 0, "bob", 0), 2 * 1.0 + 0.0, (5, 0, 0)),  # locals given: bob's is 0
        ((5, 0, "alice", 1), 2 * 1.0 + 0.5, (5, 0, 0)),
        ((5, 0, "alice", 0), 0.0, (5, 0, 1)),  # no locals: the team reward itself
    ]
    assert [s.turn for s in got] == [0, 0, 1, 0] and got[0].temperature == 0.7
    kept, dropped = drop_small_groups(got)
    # bob's first call and alice's second exist in one episode only: no baseline, dropped
    assert [s.group for s in kept] == [(5, 0, "alice", 0)] * 2 and dropped == 2
    compute_advantages(kept, "mean", "none")
    assert [s.advantage for s in kept] == [1.25, -1.25]  # 2.5 and 0.0 about their mean


def test_episode_groups_give_every_call_its_episodes_team_reward():
    got = samples("episode")
    assert {s.group for s in got} == {(5, 0)}
    assert [s.return_ for s in got] == [1.0, 1.0, 1.0, 0.0]
    kept, dropped = drop_small_groups(got)
    assert dropped == 0
    compute_advantages(kept, "mean", "none")
    # the baseline is over the two episodes (1.0 and 0.0), not over the four calls
    assert [s.advantage for s in kept] == [0.5, 0.5, 0.5, -0.5]


def test_joint_groups_need_one_call_per_agent():
    with pytest.raises(RewardError, match=r"episode 0: .* calls made: \{'alice': 2, 'bob': 1\}"):
        check_one_call_each(episodes(), ["alice", "bob"])
    one_each = [
        EpisodeRecord(5, 0, e, [served("alice", 0, 0), served("bob", 0, 1)]) for e in range(2)
    ]
    check_one_call_each(one_each, ["alice", "bob"])
    got = [s for rec in one_each for s in episode_samples(TEAM, rec, "joint", 1.0, False)]
    assert [s.group for s in got] == [(5, 0, "root", "alice"), (5, 0, "root", "bob")] * 2


def test_an_episodes_summary_carries_its_tool_call_share_and_local_rewards():
    # evaluation reads these components: alice was offered tools in 3 calls and called one in
    # 2 of them (2/3); bob was offered none (no entry); alice's local reward is a component
    rec = EpisodeRecord(7, 0, 2, [served("alice", k, k) for k in range(3)] + [served("bob", 0, 3)])
    rec.calls[0].tools_offered, rec.calls[0].tool_calls = True, 2  # a parallel call: one reply
    rec.calls[1].tools_offered = True  # offered, answered in text
    rec.calls[2].tools_offered, rec.calls[2].tool_calls = True, 1
    rec.team_reward, rec.local_rewards = 1.5, {"alice": 0.25}
    got = summary(rec)
    assert got["components"] == {"local/alice": 0.25, "tool_calls/alice": 2 / 3}
    assert (got["problem"], got["episode"], got["team_return"], got["turns"]) == (7, 2, 1.5, 4)
    # and the eval report's components are their means over the evaluated episodes
    plain = summary(EpisodeRecord(8, 1, 0, [served("alice", 0, 0)]))
    plain_offered = EpisodeRecord(8, 1, 0, [served("alice", 0, 0)])
    plain_offered.calls[0].tools_offered = True
    report = summarise([got, summary(plain_offered)], [], [])
    assert report["components/tool_calls/alice"] == pytest.approx((2 / 3 + 0.0) / 2)
    assert report["components/local/alice"] == 0.25  # only the episode that had one
    assert plain["components"] == {}
