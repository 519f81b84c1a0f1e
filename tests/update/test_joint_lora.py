"""One forward/backward for every agent's LoRA adapter (teamrl.update.joint): each adapter gets
exactly the gradients of its own pass (float64, by hand against the per-agent update), each
agent keeps its learning rate and iterations, the fallback says why, and the trainer takes the
joint path by default."""

from __future__ import annotations

import copy

import pytest
import torch
from exactness import SGD, assert_same_update, snapshot
from helpers.runs import tiny_overrides

import teamrl.update.joint as joint_mod
import teamrl.update.policy as policy_mod
from teamrl.config import load_config
from teamrl.credit.advantages import compute_advantages
from teamrl.execution.protocol import UpdateJob
from teamrl.trainer import Trainer
from teamrl.update.joint import joint_blocker, update_policies
from teamrl.update.policy import update_policy
from teamrl.update.settings import update_settings

SIGNAL = [1.0, -0.5, 0.25, -1.0, 0.75, -0.25]


def trainer(tmp_path, **extra) -> tuple[Trainer, dict]:
    """A lora team of alice and bob, one rollout with planted advantages: (trainer, samples per
    policy)."""
    overrides = {**SGD, "algorithm.num_iterations": 2, "train.num_mini_batches": 2}
    # opt-in; a micro-batch bound above both agents' minibatches lets their rows share forwards
    overrides.update({"train.one_pass_lora": "true", "train.micro_batch_size": 64, **extra})
    cfg = load_config(None, tiny_overrides("lora", 1, **overrides))
    tr = Trainer(cfg, run_dir=tmp_path)
    torch.manual_seed(0)  # B = 0 at init would give A no gradient: every weight is tested
    with torch.no_grad():
        for name, param in tr.team.policies["alice"].model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05)
    samples = tr.rollout(tr.data.next(cfg.train.prompts_per_step)).samples
    compute_advantages(samples, cfg.algorithm.baseline, cfg.algorithm.scale_rewards)
    for i, s in enumerate(samples):
        s.advantage = SIGNAL[i % len(SIGNAL)]
    work = {n: [s for s in samples if s.policy == n] for n in tr.team.policies}
    assert all(len(v) >= 4 for v in work.values())
    return tr, work


def recorded_grads(monkeypatch, module) -> dict[str, list[dict[str, torch.Tensor]]]:
    """Each policy's gradients at every optimizer step; the weights never move (no step), so
    every pass of both paths starts from the same weights."""
    grads: dict[str, list] = {}

    def apply_step(run, finite):
        named = dict(run.pol.model.named_parameters())
        mine = {n: p.grad.clone() for n, p in named.items() if p in set(run.pol.parameters())}
        grads.setdefault(run.pol.name, []).append(mine)
        run.pol.optimizer.zero_grad(set_to_none=True)
        return True

    monkeypatch.setattr(module, "apply_step", apply_step)
    return grads


def settings_of(tr) -> dict:
    return {n: update_settings(tr.cfg, p.agents) for n, p in tr.team.policies.items()}


def test_each_adapter_gets_exactly_its_own_passes_gradient_in_float64(tmp_path, monkeypatch):
    tr, work = trainer(tmp_path, **{"team.agents.1.num_iterations": 1})
    model = tr.team.policies["alice"].model.double()
    assert model.dtype == torch.float64
    pols, settings = list(tr.team.policies.values()), settings_of(tr)
    names = [p.name for p in pols]
    assert joint_blocker(pols, [settings[n] for n in names], None) == ""

    per_agent = recorded_grads(monkeypatch, policy_mod)
    for p in pols:
        update_policy(p, work[p.name], settings[p.name], step=0, max_completion_length=8)
    one_pass = recorded_grads(monkeypatch, joint_mod)
    outs = update_policies(
        pols,
        [work[n] for n in names],
        [settings[n] for n in names],
        step=0,
        max_completion_length=[8, 8],
    )
    # alice: 2 passes x 2 minibatches; bob: his own num_iterations=1, so 1 pass
    assert [len(one_pass[n]) for n in names] == [len(per_agent[n]) for n in names] == [4, 2]
    for n in names:
        for want, got in zip(per_agent[n], one_pass[n]):
            assert want.keys() == got.keys() and want
            assert all(n in k for k in want)  # only this agent's adapter
            for k in want:
                scale = float(want[k].abs().max())
                assert scale > 0
                assert float((got[k] - want[k]).abs().max()) <= 1e-12 * max(scale, 1.0), k
    assert all(out.stepped and out.skipped == 0 for out in outs)


def test_per_agent_lr_and_iterations_give_the_per_agent_weights(tmp_path):
    extra = {"team.agents.0.learning_rate": 0.3, "team.agents.1.num_iterations": 1}
    tr, work = trainer(tmp_path / "one", **extra)
    ref = copy.deepcopy(tr)
    before = {n: snapshot(p) for n, p in tr.team.policies.items()}

    tr.update_team(work)  # the joint path (train.one_pass_lora=true)
    for n, p in ref.team.policies.items():  # one after the other, on the same samples
        ref.execution.update_team([UpdateJob(p, work[n], 8)], ref.cfg, step=ref.step, ctx=ref.ctx)
    for n, p in tr.team.policies.items():
        got, want = snapshot(p), snapshot(ref.team.policies[n])
        assert_same_update(got, want, before[n], f"one-pass update of {n}")
    assert tr.team.policies["alice"].optimizer.param_groups[0]["lr"] == 0.3


def test_the_trainer_takes_one_pass_and_its_metrics_per_agent(tmp_path, monkeypatch):
    tr, work = trainer(tmp_path)
    calls = []
    real = joint_mod.update_policies
    monkeypatch.setattr(
        "teamrl.execution.local.update_policies", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    metrics = tr.update_team(work)
    assert calls == [1]
    for n in ("alice", "bob"):
        assert metrics[n]["ratio_dev_first_pass"] == 0.0
        assert metrics[n]["grad_norm"] > 0


def test_metrics_per_agent_equal_the_per_agent_path(tmp_path):
    tr, work = trainer(tmp_path / "a")
    ref = copy.deepcopy(tr)
    got = tr.update_team(work)
    ref.cfg.train.one_pass_lora = False
    want = ref.update_team(work)
    for n in want:
        assert got[n].keys() == want[n].keys()
        for k in want[n]:
            assert got[n][k] == pytest.approx(want[n][k], rel=1e-4, abs=1e-6), (n, k)


@pytest.mark.parametrize(
    "extra,why",
    [
        ({"model.gradient_checkpointing": "true"}, "gradient checkpointing"),
        ({"team.agents.0.top_p": 0.9, "algorithm.truncated_scoring": "true"}, ""),
        ({"algorithm.disable_dropout": "false", "model.lora_dropout": 0.1}, "dropout"),
    ],
)
def test_where_one_pass_cannot_apply_it_says_why_once(tmp_path, extra, why):
    tr, work = trainer(tmp_path, **extra)
    pols = list(tr.team.policies.values())
    got = joint_blocker(pols, [settings_of(tr)[p.name] for p in pols], None)
    assert (why in got) if why else got == ""
    if why:
        with pytest.warns(UserWarning, match=f"one after the other: .*{why}") as seen:
            tr.update_team(work)
            tr.update_team(work)
        assert len([w for w in seen if "one_pass_lora" in str(w.message)]) == 1


def test_a_nan_in_one_agents_loss_skips_only_its_step(tmp_path):
    tr, work = trainer(tmp_path, **{"train.nan_policy": "skip"})
    work["alice"][0].advantage = float("nan")  # alice's every step holding it is skipped
    ref = copy.deepcopy(tr)
    before = {n: snapshot(p) for n, p in tr.team.policies.items()}
    got = tr.update_team(work)
    ref.cfg.train.one_pass_lora = False
    want = ref.update_team(work)
    assert tr.nan_skips == ref.nan_skips == 2  # one minibatch per pass holds it, 2 passes
    assert_same_update(
        snapshot(tr.team.policies["bob"]), snapshot(ref.team.policies["bob"]), before["bob"], "bob"
    )
    assert got["bob"]["loss"] == pytest.approx(want["bob"]["loss"], rel=1e-4)
    assert got["alice"]["loss"] == pytest.approx(want["alice"]["loss"], rel=1e-4)


def forward_rows(monkeypatch) -> list[list[str]]:
    """The agents of every joint forward's rows, in order."""
    seen = []
    real = joint_mod._joint_batch

    def record(runs, parts):
        seen.append([s.agent for k in parts for s in parts[k]])
        return real(runs, parts)

    monkeypatch.setattr(joint_mod, "_joint_batch", record)
    return seen


@pytest.mark.parametrize("micro", [64, None, 2])
def test_joint_forwards_stay_within_one_forwards_bounds(tmp_path, monkeypatch, micro):
    """A joint forward holds at most micro_batch_size rows; with no bound set, at most the
    per-agent path's largest forward (an agent's whole minibatch), so the one pass needs no more
    activation memory than one agent after the other. Chunks that fit together share one."""
    tr, work = trainer(tmp_path, **{"train.micro_batch_size": "null" if micro is None else micro})
    pols, settings = list(tr.team.policies.values()), settings_of(tr)
    names = [p.name for p in pols]
    seen = forward_rows(monkeypatch)
    update_policies(pols, [work[n] for n in names], [settings[n] for n in names], step=0,
                    max_completion_length=[8, 8])  # fmt: skip
    sizes = [len(rows) for rows in seen]
    both = [len(set(rows)) == 2 for rows in seen]
    largest_minibatch = max(-(-len(work[n]) // 2) for n in names)  # num_mini_batches = 2
    if micro == 64:  # both agents' minibatches fit: every forward holds both
        assert all(both) and max(sizes) <= 64
    elif micro is None:
        assert max(sizes) <= largest_minibatch and not any(both)
    else:
        assert max(sizes) <= 2
