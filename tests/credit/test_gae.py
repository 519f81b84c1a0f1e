"""The critic maths (teamrl/credit/gae.py) against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from teamrl.credit.gae import (
    CreditNode,
    explained_variance,
    gae,
    token_rewards,
    tree_gae,
    turn_token_gae,
    value_loss,
)


def test_gae_by_hand():
    # delta = (0 + .9*.6 - .5, 0 + .9*.8 - .6, 1 + 0 - .8) = (.04, .12, .2); gamma*lam = .45
    # A_2 = .2, A_1 = .12 + .45*.2 = .21, A_0 = .04 + .45*.21 = .1345
    adv, target = gae([0.0, 0.0, 1.0], [0.5, 0.6, 0.8], gamma=0.9, lam=0.5)
    assert adv.tolist() == pytest.approx([0.1345, 0.21, 0.2], abs=1e-12)
    assert target.tolist() == pytest.approx([0.6345, 0.81, 1.0], abs=1e-12)


def test_gae_limits():
    # lambda = 1, gamma = 1: the return-to-go (6, 5, 3) minus the value
    adv, target = gae([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], gamma=1.0, lam=1.0)
    assert adv.tolist() == [5.0, 4.0, 2.0] and target.tolist() == [6.0, 5.0, 3.0]
    # lambda = 0: the one-step TD error
    adv, _ = gae([1.0, 2.0], [0.5, 3.0], gamma=0.5, lam=0.0)
    assert adv.tolist() == [1.0 + 0.5 * 3.0 - 0.5, 2.0 - 3.0]
    # a cut episode bootstraps from the critic's value of the state it stopped in
    adv, target = gae([1.0], [2.0], gamma=0.5, lam=1.0, last_value=4.0)
    assert adv.tolist() == [1.0] and target.tolist() == [3.0]


def test_token_level_equals_turn_level_at_each_turn_start():
    # gamma = lambda = 1: a token's advantage is the rewards still to come minus its value, so
    # at a turn's first token (its value is the turn's state value) it equals the turn's
    lengths, rewards = [2, 3], [0.5, 1.0]
    chain = token_rewards(lengths, rewards)
    assert chain == [0.0, 0.5, 0.0, 0.0, 1.0]
    turn_values = [0.25, 0.75]
    token_values = [0.25, 0.4, 0.75, 0.1, -0.3]
    tok, _ = gae(chain, token_values)
    turn, _ = gae(rewards, turn_values)
    assert [tok[0].item(), tok[2].item()] == pytest.approx(turn.tolist())


def test_gae_refuses_bad_input():
    with pytest.raises(ValueError, match="one length"):
        gae([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="gamma and lambda"):
        gae([1.0], [1.0], lam=1.5)
    with pytest.raises(ValueError, match="2 turn lengths for 1"):
        token_rewards([1, 2], [1.0])
    with pytest.raises(ValueError, match=">= 1 token"):
        token_rewards([0], [1.0])


def test_value_loss_values_and_gradients_by_hand():
    nan = float("nan")
    values = torch.tensor([1.0, 3.0, nan], requires_grad=True)  # the third is a pad
    old = torch.tensor([1.5, 2.0, nan])
    targets = torch.tensor([2.0, 2.0, nan])
    mask = torch.tensor([1.0, 1.0, 0.0])
    # no clip: 0.5 * ((1-2)^2 + (3-2)^2) / 2 = 0.5; d/dV = (V - G) / 2 = (-0.5, 0.5)
    loss = value_loss(values, old, targets, mask)
    loss.backward()
    assert loss.item() == 0.5
    assert values.grad.tolist() == [-0.5, 0.5, 0.0]
    # clip 0.2: the clipped values (1.3, 2.2) err less here, so the plain errors stand
    values.grad = None
    loss = value_loss(values, old, targets, mask, clip=0.2)
    loss.backward()
    assert loss.item() == 0.5 and values.grad.tolist() == [-0.5, 0.5, 0.0]


def test_value_clip_takes_the_larger_error_and_stops_its_gradient():
    # V 2.5, V_old 2, G 3: plain (2.5-3)^2 = .25; clipped 2.2: (2.2-3)^2 = .64 -> .5 * .64
    values = torch.tensor([2.5], requires_grad=True)
    loss = value_loss(values, torch.tensor([2.0]), torch.tensor([3.0]), torch.ones(1), clip=0.2)
    loss.backward()
    assert loss.item() == pytest.approx(0.32)
    assert values.grad.tolist() == [0.0]  # the clamp is saturated: no push past the clip
    with pytest.raises(ValueError, match="clip"):
        value_loss(values, values, values, torch.ones(1), clip=0.0)


def test_explained_variance_by_hand():
    g = [1.0, 2.0, 3.0]
    assert explained_variance(g, g) == 1.0
    assert explained_variance([2.0, 2.0, 2.0], g) == 0.0  # the mean predicts nothing
    # G - V = (0, 0, -1): variance 2/9 against 2/3 -> 1 - 1/3
    assert explained_variance([1.0, 2.0, 4.0], g) == pytest.approx(2 / 3)
    assert math.isnan(explained_variance([1.0, 2.0], [5.0, 5.0]))


def test_tree_gae_by_hand_and_its_limits():
    # root V .5, two branches: r (0, 1); branch 0 goes on to a node V .8 with rewards (2, 0)
    # child: deltas (2 - .8, 0 - .8) = (1.2, -.8), mean A = .2
    # root, gamma .5, lambda .5: A_0 = 0 + .5*.8 - .5 + .25*.2 = -.05; A_1 = 1 - .5 = .5
    child = CreditNode(0.8, [2.0, 0.0])
    root = CreditNode(0.5, [0.0, 1.0], {0: child})
    tree_gae(root, gamma=0.5, lam=0.5)
    assert child.advantages == pytest.approx([1.2, -0.8])
    assert root.advantages == pytest.approx([-0.05, 0.5])
    assert root.targets == pytest.approx([0.45, 1.0])
    # lambda 1: MAGRPO's return minus the value, R_0 = 0 + .5 * mean(2, 0) = .5
    tree_gae(root, gamma=0.5, lam=1.0)
    assert root.advantages == pytest.approx([0.5 - 0.5, 1.0 - 0.5])
    # one branch per node: the chain's GAE
    chain = CreditNode(0.5, [0.0], {0: CreditNode(0.6, [0.0], {0: CreditNode(0.8, [1.0])})})
    tree_gae(chain, gamma=0.9, lam=0.5)
    assert [chain.advantages[0], chain.children[0].advantages[0]] == pytest.approx([0.1345, 0.21])
    with pytest.raises(ValueError, match="gamma and lambda"):
        tree_gae(root, gamma=1.1)


def test_turn_token_gae_by_hand():
    # r 1, V (.2, .5), V' .4, A' .1, gamma .5, lambda .5:
    # A_1 = 1 + .5*.4 - .5 + .25*.1 = .725;  A_0 = .5 - .2 + .5*.725 = .6625
    adv, target = turn_token_gae(1.0, [0.2, 0.5], 0.4, 0.1, gamma=0.5, lam=0.5)
    assert adv == pytest.approx([0.6625, 0.725])
    assert target == pytest.approx([0.8625, 1.225])
    # lambda = gamma = 1: A_0 = r + V' + A' - V_0, the turn-level advantage
    adv, _ = turn_token_gae(1.0, [0.2, 0.5], 0.4, 0.1)
    assert adv == pytest.approx([1.3, 1.0])
    # one token: the tree's branch
    node = CreditNode(0.3, [2.0], {0: CreditNode(0.7, [1.0, 0.0])})
    tree_gae(node, gamma=0.9, lam=0.6)
    child_mean = sum(node.children[0].advantages) / 2
    adv, _ = turn_token_gae(2.0, [0.3], 0.7, child_mean, gamma=0.9, lam=0.6)
    assert adv == pytest.approx(node.advantages)
    with pytest.raises(ValueError, match=">= 1 token"):
        turn_token_gae(1.0, [])


def test_per_agent_advantage_statistics_by_hand():
    from teamrl.credit.assign import advantage_stats
    from teamrl.sample import Sample

    def s(agent, adv):
        return Sample(agent, agent, 0, (0, agent), [1], [2], [0.0], advantage=adv)

    stats = advantage_stats([s("a", 1.0), s("a", -3.0), s("b", 0.5)])
    # a: mean (1 - 3) / 2 = -1; std sqrt(((1 + 1)^2 + (-3 + 1)^2) / 2) = 2; |.| mean 2
    assert stats == {
        "advantage/mean/a": -1.0,
        "advantage/std/a": 2.0,
        "advantage/abs_mean/a": 2.0,
        "advantage/mean/b": 0.5,
        "advantage/std/b": 0.0,
        "advantage/abs_mean/b": 0.5,
    }
