"""Critics (algorithm.critic iac | maac) on Ray: the heads live on the controller and read the
policy's hidden states from rank 0 of its worker group. On the same rollout a Ray team of 2
workers gives the critics the features, advantages and value targets one process gives, and a
Ray run with critics trains them and checkpoints them."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.util")  # not the tests/ray folder itself

import torch  # noqa: E402
from helpers.runs import tiny_overrides  # noqa: E402
from ray_cluster import CPU, ray_cluster  # noqa: E402, F401

from teamrl.config import load_config  # noqa: E402
from teamrl.credit.critics import critic_credit  # noqa: E402
from teamrl.scale import shutdown_team  # noqa: E402
from teamrl.trainer import Trainer  # noqa: E402

BANDIT = {
    "env.name": "bandit",
    "env.kwargs": "{target: abcdefghijklmnopqrstuvwxyz, agents: [alice, bob]}",
    "algorithm.scale_rewards": "none",
}


def cfg_for(policies: str, critic: str, level: str, ray_address: str | None = None, **extra):
    items = {**BANDIT, "algorithm.critic": critic, "algorithm.critic_level": level, **extra}
    if ray_address:
        items.update(
            {
                "distributed.backend": "ray",
                "distributed.address": ray_address,
                "distributed.num_workers_per_policy": 2,
                **CPU,
            }
        )
    return load_config(None, tiny_overrides(policies, 2, **items))


# AT-GRPO: the bandit played in turns (alice, then bob), the critics on the agent-turn tree
AT_GRPO = {"algorithm.name": "at_grpo", "env.turn_order": "[alice, bob]"}


@pytest.mark.parametrize(
    "policies, critic, level, extra",
    [
        ("lora", "iac", "token", {}),
        ("separate", "maac", "turn", {}),
        ("shared", "maac", "turn", AT_GRPO),
    ],
)
def test_the_critics_read_the_same_on_2_workers_as_in_one_process(
    ray_cluster,  # noqa: F811
    tmp_path,
    policies,
    critic,
    level,
    extra,
):
    local = Trainer(cfg_for(policies, critic, level, **extra), run_dir=tmp_path / "local")
    remote = Trainer(
        cfg_for(policies, critic, level, ray_cluster, **extra), run_dir=tmp_path / "ray"
    )
    try:
        gen = torch.Generator().manual_seed(0)
        for name, c in local.credit.critics.items():  # the same non-zero heads on both sides
            with torch.no_grad():
                c.head.weight.copy_(torch.randn(c.head.weight.shape, generator=gen))
                remote.credit.critics[name].head.load_state_dict(c.head.state_dict())
        result = local.rollout(local.data.next(1))
        want, _ = critic_credit(
            local.team, local.credit.critics, result, local.cfg, local.credit.gamma
        )
        want_adv = [s.advantage for s in result.samples]
        got, _ = critic_credit(
            remote.team, remote.credit.critics, result, remote.cfg, remote.credit.gamma
        )
        assert sorted(got.features) == sorted(want.features)
        for name, f in want.features.items():
            # the same weights, tokens and kernels: equal up to the order of float sums
            scale = float(f.abs().max())
            assert float((got.features[name] - f).abs().max()) <= 1e-5 * scale, name
            t = want.targets[name]
            assert float((got.targets[name] - t).abs().max()) <= 1e-5 * float(t.abs().max())
        adv = [s.advantage for s in result.samples]
        assert adv == pytest.approx(want_adv, rel=1e-4, abs=1e-5)
    finally:
        shutdown_team(remote.team)


def test_a_ray_run_trains_and_checkpoints_its_critics(ray_cluster, tmp_path):  # noqa: F811
    cfg = cfg_for("lora", "iac", "turn", ray_cluster, **{"log.save_steps": 2})
    tr = Trainer(cfg, run_dir=tmp_path / "run")
    try:
        history = tr.train()
    finally:
        shutdown_team(tr.team)
    assert all(tr.credit.critics[a].head.weight.abs().sum() > 0 for a in ("alice", "bob"))
    assert "critic/value_loss/alice" in history[-1]
    saved = torch.load(tr.run_dir / "checkpoints" / "step-2" / "critics.pt", weights_only=True)
    assert torch.equal(
        saved["bob"]["head"]["weight"], tr.credit.critics["bob"].head.weight.detach()
    )
