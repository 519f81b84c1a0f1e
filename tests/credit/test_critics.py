"""Actor-critic teams (algorithm.critic iac | maac): the critic's credit on MAGRPO's joint tree by
hand, then the critics on tiny models in every policy mode, resumed exactly, and learning."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from helpers.rollout_joint import ScriptedTeam, reward_table, two_turn_env
from helpers.runs import tiny_overrides

from teamrl.algorithms.magrpo import joint_rollout
from teamrl.config import ConfigError, load_config
from teamrl.credit.critic_credit import critic_advantages, scale_critic_advantages
from teamrl.credit.critics import CENTRAL, critic_credit, joint_observation
from teamrl.envs.functional import FunctionEnv
from teamrl.rollout.trees import agent_credit
from teamrl.trainer import Trainer


def two_turn_tree(gamma: float):
    """test_magrpo_tree's two-turn case: turn-0 rewards (1, 2) by a's sample, the child of
    branch j pays 10 j + k for its joint action k."""
    return joint_rollout(
        ScriptedTeam(), two_turn_env, [(0, {"prompt": "p"})], num_generations=2, max_turns=2,
        discount=gamma,
    )  # fmt: skip


def one_turn(rewards: dict, joint_mode: str = "aligned"):
    return joint_rollout(
        ScriptedTeam(), lambda: FunctionEnv(["a", "b"], reward_table(rewards)),
        [(0, {"prompt": "p"})], num_generations=2, max_turns=1, joint_mode=joint_mode,
    )  # fmt: skip


def credit(out, values, level="turn", token_values=None, gamma=0.5, lam=0.5):
    return critic_advantages(
        out.roots,
        ["a", "b"],
        state_value=lambda agent, node: values[(agent, node.node_id)],
        state_key=lambda agent, node: (agent, node.node_id),
        credit=agent_credit(False, 1.0),
        gamma=gamma,
        lam=lam,
        level=level,
        token_values=token_values,
    )


def by_node(out, agent):
    return {
        (s.group[2], s.text): s.advantage for s in out.samples if s.agent == agent
    }  # (node, text) -> advantage


def test_turn_level_gae_on_a_two_turn_tree_by_hand():
    out = two_turn_tree(gamma=0.5)
    values = {(ag, n): v for ag in "ab" for n, v in (("root", 1.0), ("0", 0.2), ("1", 4.0))}
    targets = credit(out, values)
    # child "0": rewards (0, 1), V .2 -> A (-.2, .8), mean .3; child "1": (10, 11), V 4 -> (6, 7)
    # root, gamma .5, lambda .5: A_0 = 1 + .5*.2 - 1 + .25*.3 = .175
    #                            A_1 = 2 + .5*4 - 1 + .25*6.5 = 4.625
    adv = by_node(out, "a")
    assert adv[("root", "a0")] == pytest.approx(0.175)
    assert adv[("root", "a1")] == pytest.approx(4.625)
    assert adv[("0", "a1")] == pytest.approx(0.8) and adv[("1", "a0")] == pytest.approx(6.0)
    assert targets[("a", "root")] == pytest.approx([1.175, 5.625])  # one per joint action
    assert targets[("b", "1")] == pytest.approx([10.0, 11.0])
    # lambda 1: MAGRPO's return minus the value, R_root = (1 + .5*.5, 2 + .5*10.5)
    credit(out, values, lam=1.0)
    assert by_node(out, "b")[("root", "b1")] == pytest.approx(2.0 + 0.5 * 10.5 - 1.0)


def test_cross_mode_takes_the_mean_over_the_joint_actions_of_a_completion():
    out = one_turn({(0, 0): 1.0, (0, 1): 3.0, (1, 0): 5.0, (1, 1): 7.0}, "cross")
    targets = credit(out, {("a", "root"): 2.0, ("b", "root"): 4.0})
    adv = {s.text: s.advantage for s in out.samples}
    # a0 acts in (0,0), (0,1): mean(1 - 2, 3 - 2) = 0; b0 in (0,0), (1,0): mean(1 - 4, 5 - 4) = -1
    assert adv == {"a0": 0.0, "a1": 4.0, "b0": -1.0, "b1": 1.0}
    assert targets[("a", "root")] == [1.0, 3.0, 5.0, 7.0]


def test_token_level_gae_by_hand_and_the_scaling():
    out = one_turn({(0, 0): 1.0, (1, 1): 3.0})
    tokens = {"a0": [1.0, 0.5], "a1": [1.0, 2.0], "b0": [0.0, 0.0], "b1": [0.0, 0.0]}
    targets = credit(
        out, {}, level="token", token_values=lambda s: tokens[s.text], gamma=1.0, lam=0.5
    )
    adv = {s.text: s.token_advantages for s in out.samples}
    # a0: A_1 = 1 - .5 = .5, A_0 = .5 - 1 + .5*.5 = -.25; a1: A_1 = 3 - 2 = 1, A_0 = 2 - 1 + .5
    assert adv["a0"] == pytest.approx([-0.25, 0.5]) and adv["a1"] == pytest.approx([1.5, 1.0])
    assert adv["b1"] == pytest.approx([1.5, 3.0])
    assert {s.text: s.advantage for s in out.samples}["a1"] == pytest.approx(1.5)  # A_0
    a0 = next(s for s in out.samples if s.text == "a0")
    assert [targets[("token", id(a0), t)] for t in (0, 1)] == [[0.75], [1.0]]
    # 'batch' divides by the std of the batch's returns (1, 3, 1, 3): 2/sqrt(3), no centring
    scale_critic_advantages(out.samples, "batch")
    d = 2 / math.sqrt(3) + 1e-4
    assert {s.text: s.token_advantages for s in out.samples}["a0"] == pytest.approx(
        [-0.25 / d, 0.5 / d]
    )
    with pytest.raises(ValueError, match="none|batch|agent"):
        scale_critic_advantages(out.samples, "group")


def test_joint_observation_tags_every_agent():
    assert joint_observation({"b": "y", "a": "x"}, ["a", "b"]) == "[a]\nx\n\n[b]\ny"
    assert joint_observation({"b": "y"}, ["a", "b"]) == "[b]\ny"  # only who has one
    # an agent-turn node: the value is for the acting agent's credit, named last
    both = {"a": "x", "b": "y"}
    assert joint_observation(both, ["a", "b"], "a") == "[a]\nx\n\n[b]\ny\n\n[value for: a]"
    assert joint_observation(both, ["a", "b"], "b").endswith("[value for: b]")


# --- on a tiny model --------------------------------------------------------------------------


# the bandit pays for an answer that starts with one of these: about half of a tiny random
# model's answers, so returns vary and the critics have something to fit
TEAM_BANDIT = {
    "env.name": "bandit",
    "env.kwargs": "{target: abcdefghijklmnopqrstuvwxyz, agents: [alice, bob]}",
}


def config(policies="shared", steps=2, **extra):
    extra = {"algorithm.scale_rewards": "none", **TEAM_BANDIT, **extra}
    return load_config(None, tiny_overrides(policies, steps, **extra))


def make(tmp_path, policies="shared", steps=2, **extra):
    return Trainer(config(policies, steps, **extra), run_dir=tmp_path / "run")


@pytest.mark.parametrize(
    "critic, level, policies",
    [
        ("iac", "turn", "shared"),
        ("iac", "token", "lora"),
        ("iac", "turn", "separate"),
        ("maac", "turn", "lora"),
        ("maac", "turn", "separate"),
    ],
)
def test_critics_train_in_every_policy_mode(tmp_path, critic, level, policies):
    tr = make(tmp_path, policies, **{"algorithm.critic": critic, "algorithm.critic_level": level})
    names = ["alice", "bob"] if critic == "iac" else [CENTRAL]
    assert sorted(tr.credit.critics) == names
    assert tr.credit.gamma == 1.0  # MAGRPO's default discount, from its recipe (the trainer's)
    # fresh heads are 0, so the first advantages are the returns themselves (scale none)
    result = tr.rollout(tr.data.next(1))
    batch, _ = critic_credit(tr.team, tr.credit.critics, result, tr.cfg, tr.credit.gamma)
    for s in result.samples:
        assert s.advantage == pytest.approx(s.return_)
        if level == "token":
            assert s.token_advantages == pytest.approx([s.return_] * len(s.completion_ids))
    n_states = 1 if critic == "maac" else 2  # one root; MAAC reads it once for both agents
    rows = sum(len(t) for t in batch.targets.values())
    if level == "turn":
        assert rows == n_states * 4  # one target per joint action (G = 4)
    assert all(t.abs().sum() > 0 for t in batch.targets.values())  # something to fit
    metrics = tr.train_step()
    for name in names:
        head = tr.credit.critics[name].head
        assert head.weight.abs().sum() > 0  # it learned something
        assert math.isfinite(metrics[f"critic/value_loss/{name}"])
    assert {"advantage/spread/alice", "advantage/spread/bob"} <= set(metrics)


def test_resume_with_critics_equals_uninterrupted(tmp_path):
    extra = {
        "algorithm.critic": "iac",
        "algorithm.critic_level": "token",
        "algorithm.cliprange_value": 0.2,
        "log.save_steps": 2,
        "train.prompts_per_step": 2,
    }
    straight = make(tmp_path / "a", "lora", 4, **extra)
    full = straight.train()
    first = make(tmp_path / "b", "lora", 2, **extra)
    first.train()
    assert (first.run_dir / "checkpoints" / "step-2" / "critics.pt").exists()
    cfg = config("lora", 4, **extra)
    resumed = Trainer(cfg, run_dir=first.run_dir)
    rest = resumed.train(resume=True)
    for a, b in zip(full[2:], rest):
        assert a["critic/value_loss/alice"] == b["critic/value_loss/alice"]
        assert a["loss/bob"] == b["loss/bob"]
    for name in ("alice", "bob"):
        ha, hb = straight.credit.critics[name].head, resumed.credit.critics[name].head
        assert torch.equal(ha.weight, hb.weight) and torch.equal(ha.bias, hb.bias)
        pa = straight.team.policies[name].state_dict()
        pb = resumed.team.policies[name].state_dict()
        assert all(torch.equal(pa[k], pb[k]) for k in pa)
    # a checkpoint without critics cannot resume a run that trains them
    plain = make(tmp_path / "c", "lora", 2, **{"log.save_steps": 2})
    plain.train()
    cfg = config("lora", 4, **extra)
    with pytest.raises(ConfigError, match="critics.pt"):
        Trainer(cfg, run_dir=plain.run_dir).train(resume=True)


@pytest.mark.parametrize("critic", ["iac", "maac"])
def test_the_bandit_rung_learns_with_a_critic(tmp_path, critic):
    """The learning ladder's lowest rung (tests/test_ladder.py) with the critic's baseline."""
    team = "[{name: alice, max_completion_length: 1}, {name: bob, max_completion_length: 1}]"
    tr = make(
        tmp_path,
        "shared",
        30,
        **{
            "env.kwargs": "{target: aeiou, agents: [alice, bob]}",
            "team.agents": team,
            "algorithm.num_generations": 8,
            "algorithm.critic": critic,
            "algorithm.scale_rewards": "batch",
            "algorithm.critic_learning_rate": 0.05,
            "train.prompts_per_step": 2,
            "train.learning_rate": 0.02,
            "seed": 0,
        },
    )
    rewards = [m["reward/mean"] for m in tr.train()]
    assert sum(rewards[:5]) / 5 < 0.5, rewards
    assert sum(rewards[-5:]) / 5 > 0.9, rewards


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"algorithm.critic": "iac", "algorithm.name": "grpo"}, "algorithm.critic"),
        ({"algorithm.critic": "iac", "algorithm.scale_rewards": "group"}, "scale_rewards"),
        ({"algorithm.critic": "maac", "algorithm.critic_level": "token"}, "critic_level"),
        ({"algorithm.critic_level": "token"}, "critic_level"),
        ({"algorithm.critic": "iac", "algorithm.filter_groups": True}, "filter_groups"),
        ({"algorithm.critic": "maac", "algorithm.reward_per_agent": True}, "reward_per_agent"),
        ({"algorithm.critic": "iac", "algorithm.lam": 1.5}, "algorithm.lam"),
        ({"algorithm.critic_value_norm": True}, "critic_value_norm"),
        ({"algorithm.critic": "iac", "algorithm.critic_value_norm_decay": 1.0}, "decay"),
    ],
)
def test_bad_critic_configs_are_one_line_errors(extra, field):
    if "algorithm.scale_rewards" not in extra:  # the default 'group' is refused first
        extra = {"algorithm.scale_rewards": "none", **extra}
    with pytest.raises(ConfigError, match=field) as err:
        load_config(None, tiny_overrides("shared", 1, **extra))
    assert "\n" not in str(err.value)


def test_export_writes_the_value_heads_from_a_run_and_from_its_checkpoint(tmp_path):
    from safetensors.torch import load_file

    from teamrl.run.export import write_team_folder

    tr = make(tmp_path, "lora", 1, **{"algorithm.critic": "iac", "log.save_steps": 1})
    tr.train()
    live = tr.export(tmp_path / "live")
    ckpt = tr.run_dir / "checkpoints" / "step-1"
    cold = write_team_folder(tmp_path / "cold", tr.cfg, tr.team.systems, checkpoint=ckpt)
    for out in (live, cold):
        meta = yaml.safe_load((out / "team.yaml").read_text())["critics"]
        assert meta["alice"] == {
            "weights": "critics/alice.safetensors",
            "trunk": "alice/",
            "reads": "prompt",
            "level": "turn",
        }
        for name in ("alice", "bob"):
            head = load_file(out / meta[name]["weights"])
            assert torch.equal(head["weight"], tr.credit.critics[name].head.weight.detach())
            assert torch.equal(head["bias"], tr.credit.critics[name].head.bias.detach())


# --- value normalisation ----------------------------------------------------------------------


def test_value_norm_statistics_by_hand():
    from teamrl.credit.critics import ValueNorm

    n = ValueNorm(decay=0.5)
    assert (n.mean, n.std) == (0.0, 1.0)  # the identity before any step
    n.update(torch.tensor([10.0, 12.0]))
    # debiased: the first step's own mean 11 and variance 122 - 121 = 1
    assert n.mean == pytest.approx(11.0) and n.std == pytest.approx(1.0)
    n.update(torch.tensor([20.0]))
    # m = 0.5 * 5.5 + 0.5 * 20 = 12.75, q = 0.5 * 61 + 0.5 * 400 = 230.5, w = 0.75
    assert n.mean == pytest.approx(17.0)
    assert n.std == pytest.approx(math.sqrt(230.5 / 0.75 - 17.0**2))
    flat = ValueNorm(decay=0.0)
    flat.update(torch.tensor([3.0, 3.0]))
    assert flat.std == pytest.approx(0.1)  # the variance floor, never a division by ~0


def _one_head(norm):
    from teamrl.credit.critics import Critic

    head = torch.nn.Linear(2, 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return Critic(
        "a", "p", head, torch.optim.AdamW(head.parameters(), lr=0.1, weight_decay=0.0), norm
    )


def test_a_normalised_head_values_states_at_the_running_mean_after_one_step():
    """One AdamW step (lr 0.1, a first step moves each weight by lr * sign(gradient)) of a zero
    head on features e1, e2 with targets 10 and 12. Normalised (mean 11, std 1, targets -1 and
    +1): w = (-0.1, +0.1), b unmoved (its gradients cancel), so V = 11 -/+ 0.1. Raw: every
    gradient is negative, so w = (0.1, 0.1), b = 0.1 and V = 0.2 for both, far below."""
    from types import SimpleNamespace

    from teamrl.credit.critics import CriticBatch, ValueNorm, fit_critics

    cfg = SimpleNamespace(
        seed=0,
        algorithm=SimpleNamespace(num_iterations=1, cliprange_value=None),
        train=SimpleNamespace(num_mini_batches=1),
    )
    feats = torch.eye(2)
    for norm, want in ((ValueNorm(decay=0.0), [10.9, 11.1]), (None, [0.2, 0.2])):
        c = _one_head(norm)
        batch = CriticBatch(
            features={"a": feats},
            targets={"a": torch.tensor([10.0, 12.0])},
            old_values={"a": torch.zeros(2)},
            old_outputs={"a": torch.zeros(2)},
        )
        metrics = fit_critics({"a": c}, batch, cfg, step=0)
        with torch.no_grad():
            assert c.values(c.outputs(feats)).tolist() == pytest.approx(want, abs=1e-6)
        if norm is not None:
            assert metrics["critic/norm_mean/a"] == pytest.approx(11.0)


def test_export_folds_the_normalisation_into_the_head_and_resume_must_match_it():
    from teamrl.credit.critics import ValueNorm, critic_state, exported_head, load_critic_state

    c = _one_head(ValueNorm(decay=0.0))
    with torch.no_grad():
        c.head.weight.copy_(torch.tensor([[2.0, 0.0]]))
        c.head.bias.fill_(1.0)
    c.norm.update(torch.tensor([3.0, 7.0]))  # mean 5, std 2
    state = critic_state({"a": c})
    head = exported_head(state["a"])
    assert head["weight"].tolist() == [[4.0, 0.0]] and head["bias"].tolist() == [7.0]
    h = torch.tensor([0.5, -1.0])  # the folded head gives the normalised critic's value
    with torch.no_grad():
        want = float(c.values(c.outputs(h)))
    assert float(head["weight"] @ h + head["bias"]) == pytest.approx(want)
    plain = _one_head(None)
    with pytest.raises(ValueError, match="critic_value_norm"):
        load_critic_state({"a": plain}, state, "critics.pt")
    fresh = _one_head(ValueNorm(decay=0.0))
    load_critic_state({"a": fresh}, state, "critics.pt")
    assert (fresh.norm.mean, fresh.norm.std) == (5.0, 2.0)
