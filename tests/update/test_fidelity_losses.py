"""Learning-signal fidelity (issue 10), maths on small cases computed exactly by enumeration:
truncated importance sampling against the exact policy gradient, the KL forms' pull, GSPO's
sequence ratio, the delta cap, truncated-completion masking, dropout, per-agent scaling."""

from __future__ import annotations

import math

import pytest
import torch

from teamrl.credit.advantages import compute_advantages
from teamrl.generation.hf import sample_tokens
from teamrl.sample import Sample
from teamrl.truncation import truncation_keep
from teamrl.update.importance import importance_weights, mismatch_stats
from teamrl.update.losses import LossSettings, collate, loss_mask, policy_loss
from teamrl.update.policy import disable_dropout

# The shipped TLDR/arXiv sampling: T = 0.7, top_p = 0.9.
T, TOP_P = 0.7, 0.9
LOGITS = torch.tensor([2.0, 1.6, 1.1, 0.4, 0.0, -0.6])
ADV = torch.tensor([1.0, -0.5, 2.0, -1.0, 3.0, 0.8])  # A(y), any fixed function of the token


def sampler_logq(z: torch.Tensor) -> torch.Tensor:
    """log q: the temperature-scaled softmax truncated to the nucleus and renormalised."""
    scaled = z / T
    keep = truncation_keep(scaled[None], torch.tensor([TOP_P]), torch.tensor([0]))[0]
    return torch.log_softmax(scaled.masked_fill(~keep, float("-inf")), -1)


def expected_gradient(weights_for) -> torch.Tensor:
    """E_{y~q}[grad_z of the negated loss for token y], summed exactly over the vocabulary.

    One-token "model": logits z, trainer policy pi = softmax(z / T); at an update's first step
    old = pi (ratio 1). ``weights_for(old_y, q_y)`` is the IS weight, None for no correction.
    """
    q = sampler_logq(LOGITS).exp()
    total = torch.zeros_like(LOGITS)
    for y in range(len(LOGITS)):
        if q[y] == 0:  # never sampled: contributes nothing to E_q
            continue
        z = LOGITS.clone().requires_grad_(True)
        logp = torch.log_softmax(z / T, -1)[y].reshape(1, 1)
        w = weights_for(logp.detach(), torch.log(q[y]).reshape(1, 1))
        out = policy_loss(
            logp, logp.detach(), ADV[y : y + 1], torch.ones(1, 1),
            LossSettings(loss_type="bnpo", epsilon=0.2), is_weights=w,
        )  # fmt: skip
        (grad,) = torch.autograd.grad(-out.loss, z)
        total += q[y] * grad
    return total


def test_truncated_is_matches_the_exact_policy_gradient_better_than_no_correction():
    pi = torch.softmax(LOGITS / T, -1)
    # exact E_pi[A grad_z log pi], grad_z log pi(y) = (onehot(y) - pi) / T
    exact = sum(pi[y] * ADV[y] * (torch.eye(len(pi))[y] - pi) / T for y in range(len(pi)))
    uncorrected = expected_gradient(lambda old, q: None)
    corrected = expected_gradient(
        lambda old, q: importance_weights(old, q, torch.ones(1, 1), "token_truncate", 2.0)[0]
    )
    err_unc = (uncorrected - exact).norm().item()
    err_cor = (corrected - exact).norm().item()
    assert err_cor < err_unc
    # By hand: pi = [.494, .279, .137, .050, .028, .012]; the nucleus is {0, 1, 2} (mass m =
    # .909; token 3 is dropped since the mass before it already reaches 0.9); q = pi / m there, so the
    # weight pi/q = m <= 1 (never capped) and the corrected estimate is exactly the nucleus
    # part of the exact sum, sum_{y in nucleus} pi(y) A(y) (e_y - pi) / T.
    keep = sampler_logq(LOGITS).isfinite()
    assert keep.tolist() == [True, True, True, False, False, False]
    nucleus = sum(pi[y] * ADV[y] * (torch.eye(len(pi))[y] - pi) / T for y in range(3))
    assert torch.allclose(corrected, nucleus, atol=1e-6)
    m = pi[:3].sum()
    assert m.item() == pytest.approx(0.9094, abs=1e-4)
    assert torch.allclose(uncorrected, nucleus / m, atol=1e-6)


def test_the_sampler_records_the_truncated_logprob_the_correction_uses():
    torch.manual_seed(0)
    logq = sampler_logq(LOGITS)
    for _ in range(20):
        tok, lp = sample_tokens(LOGITS[None], torch.tensor([T]), torch.tensor([TOP_P]),
                                torch.tensor([0]))  # fmt: skip
        assert lp.item() == pytest.approx(logq[tok].item(), abs=1e-6)


def test_importance_weights_cap_and_sequence_mode_by_hand():
    old = torch.tensor([[math.log(0.5), math.log(0.9), 0.0]])
    q = torch.tensor([[math.log(0.1), math.log(0.9), 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    w, capped = importance_weights(old, q, mask, "token_truncate", 2.0)
    assert w[0, :2].tolist() == pytest.approx([2.0, 1.0])  # 0.5 / 0.1 = 5 -> capped at 2
    assert capped[0, :2].tolist() == [True, False]
    w, _ = importance_weights(old, q, mask, "sequence_truncate", 10.0)
    assert w[0, 0].item() == pytest.approx(5.0)  # 5 * 1, the product over real tokens
    stats = mismatch_stats(old, q, mask)
    assert stats["logp_diff"] == pytest.approx(math.log(5) / 2)
    assert stats["kl_sampler_k1"] == pytest.approx(-math.log(5) / 2)
    assert stats["kl_sampler_k3"] == pytest.approx((5 - math.log(5) - 1) / 2)


# --- KL forms: the sign of the exact expected gradient -------------------------------------

Z = torch.tensor([1.0, 0.2, -0.5, 0.3])
REF = torch.tensor([0.0, 0.5, 0.5, -1.0])


def expected_kl_gradient(estimator: str, bias_correction: bool = False) -> torch.Tensor:
    """E_{y~pi}[grad_z loss(y)] with A = 0, beta = 1: only the KL term, summed exactly."""
    pi = torch.softmax(Z, -1)
    ref = torch.log_softmax(REF, -1)
    total = torch.zeros_like(Z)
    for y in range(len(Z)):
        z = Z.clone().requires_grad_(True)
        logp = torch.log_softmax(z, -1)[y].reshape(1, 1)
        settings = LossSettings(
            loss_type="bnpo", epsilon=0.2, beta=1.0, kl_estimator=estimator,
            use_bias_correction_kl=bias_correction,
        )  # fmt: skip
        out = policy_loss(
            logp, logp.detach(), torch.zeros(1), torch.ones(1, 1), settings,
            ref_logp=ref[y].reshape(1, 1),
        )  # fmt: skip
        (grad,) = torch.autograd.grad(out.loss, z)
        total += pi[y] * grad
    return total


def kl_grad(forward: bool) -> torch.Tensor:
    z = Z.clone().requires_grad_(True)
    logp, ref = torch.log_softmax(z, -1), torch.log_softmax(REF, -1)
    kl = (logp.exp() * (logp - ref)).sum() if forward else (ref.exp() * (ref - logp)).sum()
    return torch.autograd.grad(kl, z)[0]


@pytest.mark.parametrize(
    "estimator, bias, forward",
    [("k1", False, True), ("k2", False, True), ("k3", False, False), ("k3", True, True)],
)
def test_every_kl_form_pulls_pi_toward_the_reference(estimator, bias, forward):
    g = expected_kl_gradient(estimator, bias)
    # a descent step -g must reduce KL(pi || ref): its gradient and g point the same way
    assert torch.dot(g, kl_grad(True)).item() > 1e-3
    # and exactly: k1 (reward penalty) and k2 follow grad KL(pi||ref); k3 grad KL(ref||pi) (TRL
    # with use_bias_correction_kl off); r * k3 (on) grad KL(pi||ref)
    assert torch.allclose(g, kl_grad(forward), atol=1e-6)


def test_bias_corrected_k3_by_hand():
    # a later pass: log pi = -1, log pi_old = -1.5 (r = e^0.5), log ref = -1.5
    logp = torch.tensor([[-1.0]], requires_grad=True)
    old = ref = torch.tensor([[-1.5]])
    k3 = math.exp(-0.5) + 0.5 - 1  # e^(ref - logp) - (ref - logp) - 1 = 0.10653
    kw = dict(loss_type="bnpo", epsilon=0.2, beta=0.1, kl_estimator="k3")
    plain = policy_loss(
        logp, old, torch.zeros(1), torch.ones(1, 1), LossSettings(**kw), ref_logp=ref
    )
    assert plain.kl == pytest.approx(k3) and plain.loss.item() == pytest.approx(0.1 * k3)
    bias_corrected = LossSettings(use_bias_correction_kl=True, **kw)
    corrected = policy_loss(
        logp, old, torch.zeros(1), torch.ones(1, 1), bias_corrected, ref_logp=ref
    )
    assert corrected.kl == pytest.approx(math.exp(0.5) * k3)  # r * k3 = 0.17564
    assert corrected.loss.item() == pytest.approx(0.1 * math.exp(0.5) * k3)
    # d(r k3)/d log pi = r k3 + r (1 - e^(ref - logp)) = e^0.5 (k3 + 1 - e^-0.5) = e^0.5 * 0.5
    (g,) = torch.autograd.grad(corrected.loss, logp)
    assert g.item() == pytest.approx(0.1 * math.exp(0.5) * 0.5)


# --- GSPO, delta, truncated completions -----------------------------------------------------


def test_sequence_level_ratio_gspo_by_hand():
    logp = torch.tensor([[0.0, 0.2]], requires_grad=True)
    old = torch.zeros(1, 2)
    kw = dict(loss_type="grpo", epsilon=0.2)
    seq = policy_loss(logp, old, torch.ones(1), torch.ones(1, 2),
                      LossSettings(importance_sampling_level="sequence", **kw))  # fmt: skip
    # one ratio exp(mean(0, 0.2)) = exp(0.1) = 1.10517 < 1.2 for both tokens
    assert seq.loss.item() == pytest.approx(-math.exp(0.1))
    (g,) = torch.autograd.grad(seq.loss, logp)
    assert g[0].tolist() == pytest.approx([-math.exp(0.1) / 2] * 2)
    tok = policy_loss(logp, old, torch.ones(1), torch.ones(1, 2), LossSettings(**kw))
    # per token: ratio 1 and exp(0.2) = 1.2214 clipped to 1.2 -> -(1 + 1.2) / 2
    assert tok.loss.item() == pytest.approx(-1.1)


def test_delta_caps_the_loss_of_a_negative_advantage():
    logp, old = torch.ones(1, 1), torch.zeros(1, 1)  # ratio e = 2.718
    kw = dict(loss_type="bnpo", epsilon=0.2)
    plain = policy_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 1), LossSettings(**kw))
    assert plain.loss.item() == pytest.approx(math.e)
    with_delta = LossSettings(delta=2.0, **kw)
    capped = policy_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 1), with_delta)
    assert capped.loss.item() == pytest.approx(2.0)  # -min(2 * -1, 1.2 * -1)
    assert capped.clip_fraction == 1.0


def test_truncated_completions_are_masked_from_the_loss():
    def sample(ids, adv, truncated):
        return Sample("a", "p", 0, 0, [1], ids, [0.0] * len(ids), truncated, advantage=adv)

    batch = collate([sample([5, 6], 1.0, False), sample([7, 8, 9], -1.0, True)], pad_id=0)
    logp = torch.zeros(2, 3)
    bnpo = LossSettings(loss_type="bnpo", epsilon=0.2)
    both = policy_loss(logp, logp, batch.advantages, loss_mask(batch, False), bnpo)
    assert both.loss.item() == pytest.approx((-2 + 3) / 5)
    only = policy_loss(logp, logp, batch.advantages, loss_mask(batch, True), bnpo)
    assert only.loss.item() == pytest.approx(-1.0)  # the truncated row contributes nothing


def test_disable_dropout_makes_train_mode_deterministic():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    x = torch.ones(2, 4)
    assert not torch.equal(net(x), net(x))  # dropout on: two forwards differ
    disable_dropout(net)
    assert torch.equal(net(x), net.eval()(x))


def test_scale_rewards_agent_divides_by_each_agents_std():
    def s(agent, group, r):
        return Sample(agent, agent, 0, group, [1], [2], [0.0], return_=r)

    a = [s("a", 1, 0.0), s("a", 1, 2.0), s("a", 2, 1.0), s("a", 2, 1.0)]
    b = [s("b", 3, 0.0), s("b", 3, 10.0)]
    compute_advantages(a + b, "mean", "agent")
    std_a = math.sqrt(2 / 3)  # unbiased std of [0, 2, 1, 1]
    std_b = math.sqrt(50)  # of [0, 10]
    eps = 1e-4
    assert [x.advantage for x in a] == pytest.approx(
        [-1 / (std_a + eps), 1 / (std_a + eps), 0.0, 0.0]
    )
    assert [x.advantage for x in b] == pytest.approx([-5 / (std_b + eps), 5 / (std_b + eps)])
