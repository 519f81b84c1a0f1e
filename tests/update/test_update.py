"""The update's old log-probs: taken before the first optimizer step, whatever the minibatching;
and its settings, resolved once per policy."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from helpers.runs import tiny_overrides

import teamrl.update.policy as update_mod
from teamrl.config import load_config
from teamrl.trainer import Trainer
from teamrl.update.settings import update_settings


def make(tmp_path, **extra):
    cfg = load_config(None, tiny_overrides("shared", 2, **extra))
    return Trainer(cfg, run_dir=tmp_path / "run")


def spy(monkeypatch):
    """Record, for every loss call, the batch it scored, its old log-probs and its stats."""
    calls, last = [], {}
    real_collate, real_loss = update_mod.collate, update_mod.policy_loss

    def collate(samples, pad_id, **kw):
        last["batch"] = real_collate(samples, pad_id, **kw)
        return last["batch"]

    def policy_loss(logp, old_logp, *a, **k):
        out = real_loss(logp, old_logp, *a, **k)
        calls.append({"batch": last["batch"], "old": old_logp.detach().clone(), "out": out})
        return out

    monkeypatch.setattr(update_mod, "collate", collate)
    monkeypatch.setattr(update_mod, "policy_loss", policy_loss)
    return calls


def test_later_minibatches_are_clipped_against_the_pre_update_policy(tmp_path, monkeypatch):
    tr = make(
        tmp_path,
        **{
            "train.num_mini_batches": 2,
            "train.prompts_per_step": 2,
            "train.learning_rate": 0.5,
            "seed": 3,
        },
    )
    before = copy.deepcopy(tr.team.policies["shared"].model)
    calls = spy(monkeypatch)
    m = tr.train_step()
    assert len(calls) == 2  # one pass, two minibatches, one chunk each
    first, second = calls
    # the first step's old log-probs are its own: ratio exactly 1
    assert first["out"].ratio_max_dev == 0.0
    assert m["ratio_dev_first_pass/shared"] == 0.0
    # the second step runs after the first has moved the policy: its ratio is not 1 and clips
    assert second["out"].ratio_max_dev > 0.0
    assert second["out"].clip_fraction > 0.0
    # ... because its old log-probs are those of the policy before any step
    device = next(before.parameters()).device
    with torch.no_grad():
        want = update_mod.score_tokens(before.train(), second["batch"].to(device)).logp
    mask = second["batch"].completion_mask.bool()
    assert torch.allclose(second["old"][mask], want[mask].cpu(), atol=1e-5)


def test_micro_batches_and_passes_with_ragged_widths(tmp_path, monkeypatch):
    # alice writes 2 tokens, bob 8: a chunk's width depends on who is in it, and a sample meets
    # chunks of other widths in pass 2; its old log-probs are re-padded to fit
    tr = make(
        tmp_path,
        **{
            "team.agents": "[{name: alice, max_completion_length: 2}, "
            "{name: bob, max_completion_length: 8}]",
            "train.num_mini_batches": 2,
            "train.micro_batch_size": 2,
            "algorithm.num_iterations": 2,
            "train.prompts_per_step": 2,
            "train.learning_rate": 0.5,
        },
    )
    calls = spy(monkeypatch)
    m = tr.train_step()
    # 16 samples: 2 passes x 2 minibatches of 8 x 4 chunks of 2
    assert len(calls) == 2 * 2 * 4
    assert len({c["batch"].completion_mask.shape[1] for c in calls}) > 1  # ragged indeed
    assert [c["out"].ratio_max_dev for c in calls[:4]] == [0.0] * 4
    assert max(c["out"].ratio_max_dev for c in calls[4:]) > 0.0
    assert m["clip_fraction/shared"] > 0.0


@pytest.mark.parametrize("mini_batches, extra_forwards", [(1, 0), (2, 1)])
def test_one_step_needs_no_extra_forward(tmp_path, monkeypatch, mini_batches, extra_forwards):
    tr = make(tmp_path, **{"train.num_mini_batches": mini_batches})
    forwards = []
    real = update_mod.score_tokens

    def count(model, batch, **kw):
        forwards.append(torch.is_grad_enabled())
        return real(model, batch, **kw)

    monkeypatch.setattr(update_mod, "score_tokens", count)
    tr.train_step()
    # one grad forward per minibatch, plus one no-grad forward per later minibatch of pass 1
    assert forwards.count(True) == mini_batches
    assert forwards.count(False) == extra_forwards


def test_settings_resolve_each_policys_overrides_and_its_is_switch():
    agents = (
        "[{name: alice, max_completion_length: 8, num_iterations: 3, top_p: 0.9}, "
        "{name: bob, max_completion_length: 8}]"
    )
    cfg = load_config(None, tiny_overrides("lora", 1, **{"team.agents": agents}))
    alice, bob = update_settings(cfg, ["alice"]), update_settings(cfg, ["bob"])
    assert (alice.num_iterations, bob.num_iterations) == (3, cfg.algorithm.num_iterations)
    assert (alice.top_p, bob.top_p) == ({"alice": 0.9}, {"bob": 1.0})
    # alice's sampler truncates its softmax, bob's does not (on the 'hf' backend)
    assert alice.importance_sampling_correction and not bob.importance_sampling_correction
    assert alice.loss.loss_type == cfg.algorithm.loss_type
    with pytest.raises(dataclasses.FrozenInstanceError):
        alice.seed = 1
