"""Learning-signal fidelity (issue 10) through the trainer on tiny models: the sampler
mismatch is corrected and logged, the LR schedule follows the trainer step alone and is
logged as trained, resume applies a changed schedule, per-agent overrides, dynamic sampling."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from helpers.runs import tiny_overrides

import teamrl.update.policy as update_mod
from teamrl.config import ConfigError, load_config
from teamrl.trainer import Trainer
from teamrl.update.importance import correction_on
from teamrl.update.losses import collate, token_logprobs

NUCLEUS = [
    "team.agents=[{name: alice, max_completion_length: 8, temperature: 0.7, top_p: 0.9}, "
    "{name: bob, max_completion_length: 8, temperature: 0.7, top_p: 0.9}]"
]


def make(tmp_path, policies="shared", steps=2, extra=(), **kw):
    cfg = load_config(None, tiny_overrides(policies, steps, **kw) + list(extra))
    return Trainer(cfg, run_dir=tmp_path / "run")


def quiet_sched_step(pol):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pol.scheduler.step()


# --- defect 1 / item 8: the sampler's truncation is corrected, and logged -------------------


def test_top_p_sampling_is_importance_weighted_and_logged(tmp_path, monkeypatch):
    seen = []
    real = update_mod.policy_loss

    def spy(*a, **k):
        seen.append(k.get("is_weights"))
        return real(*a, **k)

    monkeypatch.setattr(update_mod, "policy_loss", spy)
    tr = make(tmp_path, extra=NUCLEUS)
    m = tr.train_step()
    assert seen and all(w is not None for w in seen)  # on by default at top_p < 1
    assert m["logp_diff/shared"] > 0  # pi_old (full softmax) != q (nucleus)
    assert 0 < m["is_weight/shared"] <= 1  # pi_old / q = nucleus mass <= 1 per token
    assert m["is_clipped_fraction/shared"] == 0.0
    assert m["kl_sampler_k3/shared"] > 0


def test_truncated_scoring_scores_what_the_sampler_sampled(tmp_path):
    tr = make(tmp_path, extra=NUCLEUS + ["algorithm.truncated_scoring=true"])
    result = tr.rollout(tr.data.next(1))
    pol = tr.team.policies["shared"]
    batch = collate(result.samples, pol.engine.pad_id)
    batch.top_p = torch.full((len(result.samples),), 0.9)
    with torch.no_grad():
        full, _ = token_logprobs(pol.model, batch)
        trunc, _ = token_logprobs(pol.model, batch, truncate=True)
    mask = batch.completion_mask.bool()
    assert torch.allclose(trunc[mask], batch.sampler_logprobs[mask], atol=1e-4)
    assert (full[mask] - batch.sampler_logprobs[mask]).abs().max() > 1e-3
    m = tr.train_step()  # no correction needed: pi_old == q
    assert m["logp_diff/shared"] < 1e-4 and "is_weight/shared" not in m
    assert math.isfinite(m["entropy/shared"])  # the truncated tail's 0 * -inf counts as 0


def test_the_shipped_tldr_sampling_turns_the_correction_on():
    for name in ("tldr_magrpo", "tldr_at_grpo"):
        cfg = load_config(name)
        top_p = [ag.top_p for ag in cfg.team.agents]
        top_k = [ag.top_k for ag in cfg.team.agents]
        assert [ag.temperature for ag in cfg.team.agents] == [0.7] * len(top_p)
        assert top_p == [0.9] * len(top_p)
        assert correction_on(cfg.algorithm, top_p, top_k, cfg.generation.backend)
        cfg.algorithm.truncated_scoring = True  # pi_old == q on 'hf': nothing to correct
        assert not correction_on(cfg.algorithm, top_p, top_k, cfg.generation.backend)


# --- defects 4 and 6: the schedule follows the trainer step; the logged LR is the trained one


def test_a_policy_without_samples_still_advances_its_schedule(tmp_path, monkeypatch):
    tr = make(tmp_path, "lora", steps=4, **{"train.lr_scheduler_type": "cosine"})
    monkeypatch.setattr(
        "teamrl.credit.assign.drop_flat_groups", lambda s: [x for x in s if x.agent == "alice"]
    )
    tr.cfg.algorithm.filter_groups = True
    m = tr.train_step()
    bob = tr.team.policies["bob"]
    assert bob.scheduler.last_epoch == 1 and "loss/bob" not in m
    # cosine over 4 steps: LR(1) = 0.01 * 0.5 (1 + cos(pi / 4))
    assert bob.optimizer.param_groups[0]["lr"] == pytest.approx(
        0.01 * 0.5 * (1 + math.cos(math.pi / 4))
    )
    assert m["lr/bob"] == pytest.approx(0.01)


def test_the_logged_lr_is_the_one_the_step_trained_with(tmp_path):
    tr = make(tmp_path, steps=3, **{"train.warmup_steps": 1})
    m = tr.train_step()
    assert m["lr/shared"] == pytest.approx(0.01 * 1 / 2)  # warmup: (0 + 1) / (1 + 1)
    assert tr.train_step()["lr/shared"] == pytest.approx(0.01)


# --- defect 5: resume with a changed schedule applies it (and says so) ---------------------


def test_resume_applies_a_changed_learning_rate_and_longer_schedule(tmp_path):
    cos = {"train.lr_scheduler_type": "cosine"}
    first = make(tmp_path, steps=4, **cos)
    pol = first.team.policies["shared"]
    for _ in range(2):
        quiet_sched_step(pol)
    first.step = 2
    ckpt = first.save_checkpoint()
    resumed = make(tmp_path, steps=8, **cos, **{"train.learning_rate": 0.02})
    with pytest.warns(
        UserWarning, match=r"train\.learning_rate: 0\.01 -> 0\.02.*train\.max_steps: 4 -> 8"
    ):
        resumed.load_checkpoint(ckpt)
    fresh = make(tmp_path / "fresh", steps=8, **cos, **{"train.learning_rate": 0.02})
    a, b = resumed.team.policies["shared"], fresh.team.policies["shared"]
    for _ in range(2):
        quiet_sched_step(b)
    for step in range(2, 8):  # the same LR at every step as a run started with this config
        want = 0.02 * 0.5 * (1 + math.cos(math.pi * step / 8))
        assert a.optimizer.param_groups[0]["lr"] == pytest.approx(want)
        assert b.optimizer.param_groups[0]["lr"] == pytest.approx(want)
        quiet_sched_step(a)
        quiet_sched_step(b)


# --- item 13: per-agent learning rate and num_iterations -----------------------------------


def test_per_agent_learning_rate_and_iterations(tmp_path):
    agents = (
        "team.agents=[{name: alice, max_completion_length: 8, learning_rate: 0.05, "
        "num_iterations: 2}, {name: bob, max_completion_length: 8}]"
    )
    tr = make(tmp_path, "lora", extra=[agents])
    assert tr.team.policies["alice"].optimizer.param_groups[0]["lr"] == 0.05
    assert tr.team.policies["bob"].optimizer.param_groups[0]["lr"] == 0.01
    steps = {}
    for name, pol in tr.team.policies.items():
        real = pol.optimizer.step

        def counted(*a, _name=name, _real=real, **k):
            steps[_name] = steps.get(_name, 0) + 1
            return _real(*a, **k)

        pol.optimizer.step = counted
    tr.train_step()
    assert steps == {"alice": 2, "bob": 1}  # one minibatch, mu passes each
    with pytest.raises(ConfigError, match=r"agents \['alice', 'bob'\] share one policy"):
        load_config(None, tiny_overrides("shared", 2) + [agents])


# --- item 15: dynamic sampling keeps the batch full ---------------------------------------


def test_filter_groups_resamples_until_the_batch_is_full(tmp_path, monkeypatch):
    tr = make(tmp_path, **{"algorithm.filter_groups": "true", "algorithm.max_resample_rounds": 3})
    calls = []

    def every_other_round_flat(samples):  # round 0 all flat, later rounds keep one group
        calls.append(len(samples))
        if len(calls) == 1:
            return []
        first = samples[0].group
        return [s for s in samples if s.group == first]

    monkeypatch.setattr("teamrl.credit.assign.drop_flat_groups", every_other_round_flat)
    monkeypatch.setattr("teamrl.credit.filtering.drop_flat_groups", every_other_round_flat)
    m = tr.train_step()
    # a digits rollout of one prompt has 2 groups (one per agent): round 0 keeps none, each
    # extra round keeps one, so two extra rounds fill the batch
    assert m["filter/resample_rounds"] == 2.0
    assert len(calls) == 3
