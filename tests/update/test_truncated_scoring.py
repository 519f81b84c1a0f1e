"""Truncated scoring and the loss inputs it makes (issue 20, items 4a, 4b, 4d), by hand.

A model whose logits are one learnable vector z at every position makes every log-prob and
gradient computable by hand. With z = log [0.5, 0.3, 0.15, 0.05] (T = 1) and top_p = 0.7 the
nucleus is {0, 1} (the mass before token 2 is 0.8 >= 0.7), of mass m = 0.8, so the sampler's
q = [0.625, 0.375, 0, 0]. The pad id 3 lies outside it: truncated scoring gives a pad -inf.
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from helpers.runs import tiny_overrides

import teamrl.update.policy as update_mod
from teamrl.cli import main
from teamrl.config import ConfigError, load_config
from teamrl.sample import Sample
from teamrl.team.policies import Engine, Policy
from teamrl.trainer import Trainer
from teamrl.update.losses import Denominators, LossSettings, collate, policy_loss, score_tokens
from teamrl.update.policy import update_policy
from teamrl.update.settings import update_settings

PROBS = [0.5, 0.3, 0.15, 0.05]
PAD, TOP_P = 3, 0.7
Q = [0.625, 0.375, 0.0, 0.0]  # the nucleus {0, 1} renormalised by m = 0.8


class _Cache:
    def reorder_cache(self, idx):  # noqa: ARG002 (no state: every position has the same logits)
        return None


class ConstLM(torch.nn.Module):
    """Logits z (learnable) at every position, whatever the input."""

    def __init__(self):
        super().__init__()
        self.z = torch.nn.Parameter(torch.log(torch.tensor(PROBS)))

    def forward(self, input_ids, **kw):  # noqa: ARG002
        b, t = input_ids.shape
        return SimpleNamespace(logits=self.z.expand(b, t, -1), past_key_values=_Cache())


def sample(agent, completion, adv):
    q = [math.log(Q[y]) for y in completion]  # what the nucleus sampler recorded
    return Sample(agent, "p", 0, 0, [1, 2], list(completion), q, advantage=adv)


# A (A = +1) writes [0, 1]; B (A = -1) writes [1] and gets one pad: unequal lengths.
SAMPLES = (("alice", [0, 1], 1.0), ("bob", [1], -1.0))


def batch_of(samples):
    batch = collate(samples, PAD)
    batch.top_p = torch.full((len(samples),), TOP_P)
    return batch


def test_a_pad_outside_the_nucleus_never_enters_the_loss():
    model = ConstLM()
    batch = batch_of([sample(*s) for s in SAMPLES])
    scores = score_tokens(model, batch, truncate=True, with_full=True)
    # real tokens: log q; the pad (token 3, q = 0) scores exactly 0, not -inf
    assert scores.logp.flatten().tolist() == pytest.approx(
        [math.log(0.625), math.log(0.375), math.log(0.375), 0.0]
    )
    assert scores.full_logp.flatten().tolist() == pytest.approx(
        [math.log(0.5), math.log(0.3), math.log(0.3), 0.0]
    )
    out = policy_loss(
        scores.logp, scores.logp.detach(), batch.advantages, batch.completion_mask,
        LossSettings(loss_type="dapo", epsilon=0.2), denominators=Denominators(step_tokens=3.0),
    )  # fmt: skip
    # ratio 1 on the 3 real tokens: -(1 + 1 - 1) / 3
    assert out.loss.item() == pytest.approx(-1 / 3)
    out.loss.backward()
    # grad = -(1/3) sum_i A_i grad log q(y_i), grad_z log q(y) = e_y - q on the nucleus:
    # (e_0 - q) + (e_1 - q) - (e_1 - q) = [0.375, -0.375, 0, 0]
    assert model.z.grad.tolist() == pytest.approx([-0.125, 0.125, 0.0, 0.0])


def test_a_pad_of_minus_inf_given_to_the_loss_stays_out():
    # old and new log-probs of -inf on a pad (what a caller may hand in): still finite
    logp = torch.tensor([[-1.0, float("-inf")]], requires_grad=True)
    old = torch.tensor([[-1.0, float("-inf")]])
    mask = torch.tensor([[1.0, 0.0]])
    for level in ("token", "sequence"):
        settings = LossSettings(
            loss_type="bnpo", epsilon=0.2, importance_sampling_level=level, beta=0.1,
            kl_estimator="k3",
        )  # fmt: skip
        out = policy_loss(logp, old, torch.tensor([2.0]), mask, settings, ref_logp=old)
        assert out.loss.item() == pytest.approx(-2.0)  # -A * 1 + 0.1 * k3(0) on one token
        assert out.kl == 0.0
        (g,) = torch.autograd.grad(out.loss, logp)
        assert g.tolist() == [[-2.0, 0.0]]  # -A on the real token, exactly 0 on the pad


def policy_and_config(tmp_path, **extra):
    agents = (
        f"[{{name: alice, max_completion_length: 4, top_p: {TOP_P}, temperature: 1.0}}, "
        f"{{name: bob, max_completion_length: 4, top_p: {TOP_P}, temperature: 1.0}}]"
    )
    overrides = {
        "team.agents": agents,
        "algorithm.truncated_scoring": "true",
        "algorithm.loss_type": "dapo",
        "train.max_grad_norm": "null",
        **extra,
    }
    cfg = load_config(None, tiny_overrides("shared", 1, **overrides))
    model = ConstLM()
    pol = Policy(
        name="shared",
        engine=Engine(model=model, tokenizer=None, eos_ids=[], pad_id=PAD),
        ref_model=copy.deepcopy(model),  # theta == theta_ref
        optimizer=torch.optim.SGD(model.parameters(), lr=1.0),  # z <- z - grad, exactly
        agents=["alice", "bob"],
    )
    return pol, cfg


def test_truncated_scoring_updates_on_unequal_lengths(tmp_path):
    # Before: the pad scored -inf in the old and new log-probs, the ratio was NaN, and the
    # step raised FloatingPointError (train.nan_policy=error).
    pol, cfg = policy_and_config(tmp_path)
    z0 = pol.model.z.detach().clone()
    out = update_policy(pol, [sample(*s) for s in SAMPLES], update_settings(cfg, pol.agents),
                        step=0, max_completion_length=4)  # fmt: skip
    m = out.metrics
    assert out.skipped == 0 and out.stepped
    assert m["loss"] == pytest.approx(-1 / 3)
    # the sampler's entropy: -(0.625 ln 0.625 + 0.375 ln 0.375)
    assert m["entropy"] == pytest.approx(-(0.625 * math.log(0.625) + 0.375 * math.log(0.375)))
    assert m["logp_diff"] == pytest.approx(0.0, abs=1e-6)  # pi_old == q: nothing to correct
    assert m["outside_nucleus_fraction"] == 0.0
    assert (pol.model.z.detach() - z0).tolist() == pytest.approx([0.125, -0.125, 0.0, 0.0])


@pytest.mark.parametrize("bias_correction", ["false", "true"])
def test_the_kl_is_zero_at_the_reference_under_truncated_scoring(tmp_path, bias_correction):
    # theta == theta_ref. Before: the KL compared the truncated policy (q) with the reference's
    # full softmax, ratio pi_ref / q = m = 0.8 on every token, so k3 = 0.8 - ln 0.8 - 1 = 0.0231.
    extra = {"algorithm.beta": "0.1", "algorithm.use_bias_correction_kl": bias_correction}
    pol, cfg = policy_and_config(tmp_path, **extra)
    z0 = pol.model.z.detach().clone()
    m = update_policy(pol, [sample(*s) for s in SAMPLES], update_settings(cfg, pol.agents),
                      step=0, max_completion_length=4).metrics  # fmt: skip
    assert m["kl"] == 0.0
    assert m["loss"] == pytest.approx(-1 / 3)  # the policy-gradient term alone
    # the KL's gradient is 0 at the reference: the same step as with beta = 0
    assert (pol.model.z.detach() - z0).tolist() == pytest.approx([0.125, -0.125, 0.0, 0.0])


def test_a_token_outside_the_trainers_nucleus_has_weight_zero(tmp_path):
    # The sampler drew token 2 (q recorded as if in its set), but the trainer's set at theta_old
    # is {0, 1}: pi_old(2) = 0, so the IS weight pi_old / q is 0. It leaves the loss (a -inf
    # would make NaN) and is counted: 1 of the 4 real tokens.
    pol, cfg = policy_and_config(tmp_path)
    odd = Sample("alice", "p", 0, 0, [1, 2], [2], [math.log(0.1)], advantage=5.0)
    out = update_policy(pol, [sample(*s) for s in SAMPLES] + [odd],
                        update_settings(cfg, pol.agents), step=0,
                        max_completion_length=4)  # fmt: skip
    m = out.metrics
    assert out.skipped == 0
    assert m["outside_nucleus_fraction"] == pytest.approx(1 / 4)
    # dapo's denominator still counts the 4 tokens: -(1 + 1 - 1 + 0) / 4
    assert m["loss"] == pytest.approx(-1 / 4)


NUCLEUS_RAGGED = (
    "team.agents=[{name: alice, max_completion_length: 2, temperature: 0.7, top_p: 0.9}, "
    "{name: bob, max_completion_length: 8, temperature: 0.7, top_p: 0.9}]"
)


def test_truncated_scoring_with_a_kl_trains_through_the_trainer(tmp_path, monkeypatch):
    # The real path: tiny Llama, LoRA-free shared policy, completions of 2 and 8 tokens, a KL and
    # a second pass over the samples. Before: the KL compared -inf (a token that left the
    # truncated set after a step) with the reference's finite log-prob: inf, and the step was
    # refused (FloatingPointError); the first pass logged a KL > 0 at theta == theta_ref.
    kls = []
    real = update_mod.policy_loss

    def spy(*a, **k):
        out = real(*a, **k)
        kls.append(out.kl)
        return out

    monkeypatch.setattr(update_mod, "policy_loss", spy)
    cfg = load_config(
        None,
        tiny_overrides("shared", 2)
        + [
            NUCLEUS_RAGGED,
            "algorithm.truncated_scoring=true",
            "algorithm.beta=0.1",
            "algorithm.num_iterations=2",
        ],
    )
    tr = Trainer(cfg, run_dir=tmp_path / "run")
    for _ in range(2):
        m = tr.train_step()
        assert math.isfinite(m["loss/shared"]) and m["nan_skips"] == 0
    assert kls[0] == 0.0  # step 0, first pass: theta == theta_ref


# --- 4d: ignore_eos with mask_truncated_completions is refused, in one line -----------------


def test_ignore_eos_with_mask_truncated_completions_is_refused(tmp_path, capsys):
    pair = ["team.ignore_eos=true", "algorithm.mask_truncated_completions=true"]
    with pytest.raises(ConfigError, match=r"^algorithm\.mask_truncated_completions: .*ignore_eos"):
        load_config(None, tiny_overrides() + pair)
    for one in pair:  # each alone is fine
        load_config(None, tiny_overrides() + [one])
    capsys.readouterr()
    argv = ["train", "quickstart", *tiny_overrides(), *pair, f"log.output_dir={tmp_path}"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("teamrl: error: algorithm.mask_truncated_completions: true with ")


def test_bias_corrected_kl_needs_k3():
    with pytest.raises(ConfigError, match=r"^algorithm\.use_bias_correction_kl: .*'k2'"):
        load_config(
            None,
            tiny_overrides()
            + ["algorithm.use_bias_correction_kl=true", "algorithm.kl_estimator=k2"],
        )
