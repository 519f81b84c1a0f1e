"""Critics on AT-GRPO's agent-turn tree: the chain GAE by hand (turn and token level), the
identity with AT-GRPO's discounted return at lambda = 1 on a real rollout, then IAC and MAAC
on tiny models in turns, resumed exactly."""

from __future__ import annotations

import math

import pytest
import torch
from helpers.rollout_turns import CounterEnv, run
from helpers.runs import tiny_overrides

from teamrl.config import load_config
from teamrl.credit.critic_credit import chain_critic_advantages
from teamrl.credit.critics import CENTRAL, critic_credit, critic_gamma
from teamrl.rollout.trees import TurnNode
from teamrl.sample import Sample
from teamrl.trainer import Trainer


def node(turn, agent, rewards, chosen, tokens=1):
    samples = [
        Sample(agent, agent, turn, (0, 0, turn, agent), [1], [7] * tokens, [0.0] * tokens, reward=r)
        for r in rewards
    ]
    return TurnNode(0, turn, agent, samples, chosen, {})


def chain(nodes, values, gamma, lam, level="turn", token_values=None):
    return chain_critic_advantages(
        [nodes],
        state_value=lambda n: values[(n.turn, n.agent)],
        state_key=lambda n: (n.turn, n.agent),
        gamma=gamma,
        lam=lam,
        level=level,
        token_values=token_values,
    )


def test_turn_level_chain_gae_by_hand():
    # tool then plan, two turns, K = 2; each agent's chain is its own two nodes
    nodes = [
        node(0, "tool", [1.0, 3.0], chosen=1),
        node(0, "plan", [2.0, 0.0], chosen=0),
        node(1, "tool", [5.0, 4.0], chosen=0),
        node(1, "plan", [1.0, 1.0], chosen=1),
    ]
    values = {(0, "tool"): 1.0, (0, "plan"): 0.5, (1, "tool"): 2.0, (1, "plan"): -1.0}
    targets = chain(nodes, values, gamma=0.5, lam=0.5)
    adv = [[s.advantage for s in n.samples] for n in nodes]
    # last nodes: A = r - V.  tool (1): [3, 2], the chosen 0 continues: A' = 3, V' = 2
    # tool (0): A_k = r_k + 0.5 * 2 - 1 + 0.5 * 0.5 * 3 = r_k + 0.75
    # plan (1): [2, 2], A' = 2, V' = -1;  plan (0): A_k = r_k - 0.5 - 0.5 + 0.25 * 2 = r_k - 0.5
    assert adv == [[1.75, 3.75], [1.5, -0.5], [3.0, 2.0], [2.0, 2.0]]
    assert targets[(0, "tool")] == [2.75, 4.75]  # A + V
    assert targets[(1, "plan")] == [1.0, 1.0]
    assert all(s.token_advantages is None for n in nodes for s in n.samples)
    # lambda = 1: R_k - V with R_k = r_k + gamma * (the chosen path's return): tool (0)
    # R = [1 + 0.5 * 5, 3 + 0.5 * 5] = [3.5, 5.5], minus V = 1
    chain(nodes, values, gamma=0.5, lam=1.0)
    assert [s.advantage for s in nodes[0].samples] == [2.5, 4.5]
    # gamma = 0 (AT-GRPO's default, no discount): the own reward minus the value
    chain(nodes, values, gamma=0.0, lam=0.5)
    assert [[s.advantage for s in n.samples] for n in nodes] == [
        [0.0, 2.0],
        [1.5, -0.5],
        [3.0, 2.0],
        [2.0, 2.0],
    ]


def test_token_level_chain_gae_by_hand():
    first = node(0, "tool", [1.0, 3.0], chosen=1, tokens=2)
    last = node(1, "tool", [5.0, 4.0], chosen=0)
    per_token = {
        id(first.samples[0]): [1.0, 2.0],
        id(first.samples[1]): [1.0, 0.0],
        id(last.samples[0]): [2.0],
        id(last.samples[1]): [2.0],
    }
    values = {(0, "tool"): 1.0, (1, "tool"): 2.0}
    targets = chain(
        [first, last], values, 0.5, 0.5, level="token", token_values=lambda s: per_token[id(s)]
    )
    # last: A = r - V = [3], [2]; the chosen 0 gives A' = 3, V' = 2
    # first, sample 0: A_1 = 1 + 0.5 * 2 - 2 + 0.25 * 3 = 0.75; A_0 = 2 - 1 + 0.5 * 0.75 = 1.375
    #        sample 1: A_1 = 3 + 1 - 0 + 0.75 = 4.75;         A_0 = 0 - 1 + 0.5 * 4.75 = 1.375
    assert first.samples[0].token_advantages == [1.375, 0.75]
    assert first.samples[1].token_advantages == [1.375, 4.75]
    assert first.samples[1].advantage == 1.375  # the first token's
    assert last.samples[1].token_advantages == [2.0]
    assert targets[("token", id(first.samples[0]), 1)] == [2.75]  # A + V per token
    assert targets[("token", id(first.samples[1]), 0)] == [2.375]


def test_bad_token_values_are_refused():
    n = node(0, "tool", [1.0], chosen=0, tokens=2)
    with pytest.raises(ValueError, match="1 values for 2 tokens"):
        chain([n], {(0, "tool"): 0.0}, 1.0, 1.0, level="token", token_values=lambda s: [0.0])
    with pytest.raises(ValueError, match="critic_level"):
        chain([n], {(0, "tool"): 0.0}, 1.0, 1.0, level="word")


@pytest.mark.parametrize("discount", [None, 0.5])
def test_lambda_one_is_at_grpos_return_minus_the_value_on_a_real_rollout(discount):
    """Three turns of the counter game, K = 3, two problems, greedy selection; one episode
    ends early (its start is near the goal), so chains of different lengths."""
    out = run(
        env=lambda: CounterEnv(goal=12),
        examples=[(0, {}), (1, {"start": 9})],
        max_turns=3,
        alpha=0.5,
        discount=discount,
    )
    assert [len(nodes) for nodes in out.turn_nodes] == [6, 2]  # 9 + 2 + 2 >= 12 after tool
    recorded = [s for nodes in out.turn_nodes for n in nodes for s in n.samples]
    assert sorted(map(id, recorded)) == sorted(map(id, out.samples))  # every sample, once
    for nodes in out.turn_nodes:
        for n in nodes:
            assert {s.group for s in n.samples} == {(n.slot, n.slot, n.turn, n.agent)}
            assert max(s.reward for s in n.samples) == n.samples[n.chosen].reward  # greedy
    values = {}  # an arbitrary value per node

    def value(n):
        return values.setdefault((n.slot, n.turn, n.agent), 0.25 * len(values) - 1.0)

    gamma = 0.0 if discount is None else discount
    chain_critic_advantages(out.turn_nodes, state_value=value, state_key=id, gamma=gamma, lam=1.0)
    for nodes in out.turn_nodes:
        for n in nodes:
            for s in n.samples:
                assert s.advantage == pytest.approx(s.return_ - value(n), abs=1e-12)


# --- on a tiny model --------------------------------------------------------------------------

# the bandit played in turns: alice answers, bob sees her answer, then answers
AT_BANDIT = {
    "env.name": "bandit",
    "env.kwargs": "{target: abcdefghijklmnopqrstuvwxyz, agents: [alice, bob]}",
    "env.turn_order": "[alice, bob]",
    "algorithm.name": "at_grpo",
    "algorithm.scale_rewards": "none",
}


def make(tmp_path, policies="shared", steps=2, **extra):
    cfg = load_config(None, tiny_overrides(policies, steps, **{**AT_BANDIT, **extra}))
    return Trainer(cfg, run_dir=tmp_path / "run")


@pytest.mark.parametrize(
    "critic, level, policies",
    [("iac", "turn", "lora"), ("iac", "token", "separate"), ("maac", "turn", "shared")],
)
def test_critics_train_on_the_agent_turn_tree(tmp_path, monkeypatch, critic, level, policies):
    import teamrl.credit.critics as critics_mod

    texts = []
    real = critics_mod.joint_observation
    monkeypatch.setattr(
        critics_mod, "joint_observation", lambda *a: texts.append(real(*a)) or texts[-1]
    )
    tr = make(tmp_path, policies, **{"algorithm.critic": critic, "algorithm.critic_level": level})
    # AT-GRPO without a discount (its recipe's None, the trainer's): the own reward
    assert tr.credit.gamma == critic_gamma(tr.cfg, None) == 0.0
    names = ["alice", "bob"] if critic == "iac" else [CENTRAL]
    assert sorted(tr.credit.critics) == names
    result = tr.rollout(tr.data.next(1))
    assert [(n.turn, n.agent) for n in result.turn_nodes[0]] == [(0, "alice"), (0, "bob")]
    # fresh heads are 0: every advantage is the candidate's own reward (scale none)
    batch, _ = critic_credit(tr.team, tr.credit.critics, result, tr.cfg, tr.credit.gamma)
    for s in result.samples:
        assert s.advantage == pytest.approx(s.reward)
        if level == "token":
            assert s.token_advantages == pytest.approx([s.reward] * len(s.completion_ids))
    if level == "turn":  # one row per candidate: 2 nodes x K = 4, whichever critic reads them
        assert sum(len(t) for t in batch.targets.values()) == 8
    if critic == "maac":  # the central value reads both observations, per node
        assert batch.features[CENTRAL].shape[0] == 8
        # each node's text names the agent whose credit it values: alice's, then bob's
        assert [t.rsplit("\n\n", 1)[-1] for t in texts] == [
            "[value for: alice]",
            "[value for: bob]",
        ]
        f = batch.features[CENTRAL]
        assert not torch.equal(f[0], f[-1])  # so the two nodes' features differ
    metrics = tr.train_step()
    for name in names:
        assert tr.credit.critics[name].head.weight.abs().sum() > 0
        assert math.isfinite(metrics[f"critic/value_loss/{name}"])


def test_resume_with_critics_on_the_agent_turn_tree_equals_uninterrupted(tmp_path):
    extra = {
        "algorithm.critic": "maac",
        "algorithm.critic_value_norm": True,  # its statistics are resumed too
        "log.save_steps": 2,
        "train.prompts_per_step": 2,
    }
    straight = make(tmp_path / "a", "lora", 3, **extra)
    full = straight.train()
    first = make(tmp_path / "b", "lora", 2, **extra)
    first.train()
    cfg = load_config(None, tiny_overrides("lora", 3, **{**AT_BANDIT, **extra}))
    resumed = Trainer(cfg, run_dir=first.run_dir)
    rest = resumed.train(resume=True)
    assert full[2]["critic/value_loss/central"] == rest[0]["critic/value_loss/central"]
    ca, cb = straight.credit.critics[CENTRAL], resumed.credit.critics[CENTRAL]
    assert torch.equal(ca.head.weight, cb.head.weight) and torch.equal(ca.head.bias, cb.head.bias)
    assert ca.norm.state() == cb.norm.state()
    for name in ("alice", "bob"):
        pa = straight.team.policies[name].state_dict()
        pb = resumed.team.policies[name].state_dict()
        assert all(torch.equal(pa[k], pb[k]) for k in pa)
