"""Masks, log-probs and the clipped loss on hand-made tensors and a scripted sampler."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from teamrl.generation.hf import generate, sample_tokens
from teamrl.generation.types import Request
from teamrl.sample import Sample
from teamrl.update.losses import (
    Denominators,
    LossSettings,
    collate,
    kl_penalty,
    policy_loss,
    token_logprobs,
)

EOS, PAD = 2, 0


class ScriptedLM(torch.nn.Module):
    """Row r emits tokens 10, 11, ... and then EOS after r + 1 tokens (fixed logits)."""

    def __init__(self, vocab: int = 32):
        super().__init__()
        self.vocab = vocab
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask, position_ids, past_key_values=None, **kw):  # noqa: ARG002
        b, t = input_ids.shape
        step = 0 if past_key_values is None else past_key_values + 1
        logits = torch.full((b, t, self.vocab), -1e4)
        for r in range(b):
            tok = EOS if step >= r + 1 else 10 + step
            logits[r, -1, tok] = 0.0
        return SimpleNamespace(logits=logits, past_key_values=step)


def test_generation_masks_stop_at_eos_and_never_hold_pads():
    reqs = [Request(prompt_ids=[5, 6, 7 + r], n=1, max_new_tokens=6) for r in range(4)]
    outs = [g[0] for g in generate(ScriptedLM(), reqs, eos_ids=[EOS], pad_id=PAD)]
    # row r: r + 1 content tokens then EOS (included); row 3 hits the budget? 4 + EOS = 5 <= 6
    assert [o.completion_ids for o in outs] == [
        [10, EOS],
        [10, 11, EOS],
        [10, 11, 12, EOS],
        [10, 11, 12, 13, EOS],
    ]
    assert all(not o.truncated for o in outs)
    assert all(PAD not in o.completion_ids for o in outs)
    assert all(len(o.logprobs) == len(o.completion_ids) for o in outs)
    # budget cut: no EOS, marked truncated, mask covers every generated token
    cut = generate(
        ScriptedLM(), [Request([5 + r], n=1, max_new_tokens=1) for r in range(2)], [EOS], PAD
    )
    assert cut[1][0].completion_ids == [10] and cut[1][0].truncated


def test_ignore_eos_forces_equal_lengths():
    reqs = [Request([5 + r], n=1, max_new_tokens=5) for r in range(3)]
    outs = generate(ScriptedLM(), reqs, [EOS], PAD, ignore_eos=True)
    assert [len(o[0].completion_ids) for o in outs] == [5, 5, 5]


def test_per_row_sampling_rules():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]] * 3)
    temp = torch.tensor([0.0, 1.0, 1.0])
    top_p = torch.tensor([1.0, 1.0, 0.5])
    top_k = torch.tensor([0, 1, 0])
    torch.manual_seed(0)
    for _ in range(20):
        tok, lp = sample_tokens(logits, temp, top_p, top_k)
        assert tok[0] == 3 and lp[0] == 0.0  # greedy
        assert tok[1] == 3 and lp[1] == pytest.approx(0.0, abs=1e-6)  # top-1
        # top_p 0.5: p(3) = 0.64 alone exceeds 0.5, so only token 3 survives
        assert tok[2] == 3


def _sample(completion, adv=1.0, prompt=(1, 2)):
    return Sample(
        "a", "p", 0, "g", list(prompt), list(completion), [0.0] * len(completion), advantage=adv
    )


def test_collate_mask_covers_real_tokens_through_eos_only():
    samples = [_sample([7, 8, EOS]), _sample([9], prompt=(1, 2, 3, 4)), _sample([5, EOS])]
    batch = collate(samples, pad_id=PAD)
    assert batch.completion_mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert batch.completion_ids.tolist() == [[7, 8, EOS], [9, PAD, PAD], [5, EOS, PAD]]
    # distinct prompts are stored once (left-padded); samples point at theirs
    assert batch.prompt_ids.tolist() == [[PAD, PAD, 1, 2], [1, 2, 3, 4]]
    assert batch.prompt_mask.tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]
    assert batch.prompt_index.tolist() == [0, 1, 0]


def test_loss_never_scores_pads_and_always_scores_eos():
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    grpo = LossSettings(loss_type="grpo", epsilon=0.2)
    out = policy_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), mask, grpo)
    out.loss.backward()
    grad = logp.grad
    assert grad[0, 2] != 0  # the EOS position of row 0 is scored
    assert grad[1, 1] == 0 and grad[1, 2] == 0  # pads of row 1 are not


def _tiny_llama():
    torch.manual_seed(0)
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=40,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=32,
        )
    ).eval()


def test_token_logprobs_ignore_pad_token_values():
    model = _tiny_llama()
    samples = [_sample([7, 8, EOS]), _sample([9], prompt=(1, 2, 3, 4))]
    a = collate(samples, pad_id=PAD)
    b = collate(samples, pad_id=33)  # different pad token values
    la, _ = token_logprobs(model, a)
    lb, _ = token_logprobs(model, b)
    m = a.completion_mask.bool()
    assert torch.allclose(la[m], lb[m], atol=1e-5)


def _alone(model, s):
    """One sample run alone: the log-softmax at each completion position, and each completion
    token's log-prob (the reference the batched, prefix-shared scoring must equal)."""
    ids = torch.tensor([s.prompt_ids + s.completion_ids])
    logq = torch.log_softmax(model(input_ids=ids).logits[0, len(s.prompt_ids) - 1 : -1], -1)
    return logq, logq.gather(-1, ids[0, len(s.prompt_ids) :, None])[:, 0]


def test_shared_prefix_logprobs_and_grads_equal_full_sequences():
    """Prefix sharing is exact: same log-probs and gradients as running each sample alone."""
    model = _tiny_llama().train()
    samples = [
        _sample([7, 8, EOS], prompt=(1, 2, 3)),
        _sample([9, 5], prompt=(1, 2, 3)),
        _sample([6], prompt=(4, 5)),
    ]
    shared, _ = token_logprobs(model, collate(samples, PAD))
    (shared * collate(samples, PAD).completion_mask).sum().backward()
    g_shared = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    total = 0.0
    for i, s in enumerate(samples):
        _, lp = _alone(model, s)
        n = len(s.completion_ids)
        assert torch.allclose(shared[i, :n], lp, atol=1e-5)
        total = total + lp.sum()
    total.backward()
    for name, p in model.named_parameters():
        assert torch.allclose(g_shared[name], p.grad, atol=1e-5), name


@pytest.mark.parametrize("checkpointing", [False, True])
def test_one_token_completions_and_the_entropy_equal_full_sequences(checkpointing):
    """Completions of one token (scored from the prompt's last position alone, no completion
    forward) and the logged entropy, against each sample run alone through log_softmax."""
    model = _tiny_llama().train()
    if checkpointing:
        getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    samples = [_sample([7], prompt=(1, 2, 3)), _sample([9], prompt=(1, 2, 3)), _sample([6])]
    batch = collate(samples, PAD)
    assert batch.completion_ids.shape[1] == 1
    logp, entropy = token_logprobs(model, batch, with_entropy=True)
    logp.sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    total = 0.0
    for i, s in enumerate(samples):
        logq, lp = _alone(model, s)
        assert torch.allclose(logp[i, :1], lp, atol=1e-5)
        h = -(logq.exp() * logq).sum(-1)
        assert torch.allclose(entropy[i, :1], h.detach(), atol=1e-5)
        total = total + lp.sum()
    total.backward()
    for name, p in model.named_parameters():
        assert torch.allclose(grads[name], p.grad, atol=1e-5), name


def test_gradient_checkpointing_gives_the_same_logprobs_and_grads():
    """HF drops the KV cache under checkpointing in training; the full-sequence path is exact."""
    samples = [
        _sample([7, 8, EOS], prompt=(1, 2, 3)),
        _sample([9, 5], prompt=(1, 2, 3)),
        _sample([6], prompt=(4, 5)),
    ]
    batch = collate(samples, PAD)
    results = []
    for checkpointing in (False, True):
        model = _tiny_llama().train()
        if checkpointing:  # transformers 5 renamed it; 4.x has only the old name
            getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
        logp, _ = token_logprobs(model, batch)
        out = policy_loss(
            logp,
            logp.detach(),
            torch.tensor([1.0, -0.5, 2.0]),
            batch.completion_mask,
            LossSettings(loss_type="grpo", epsilon=0.2),
        )
        out.loss.backward()
        results.append(
            (logp.detach(), out.loss.item(), {n: p.grad for n, p in model.named_parameters()})
        )
    (lp0, loss0, g0), (lp1, loss1, g1) = results
    m = batch.completion_mask.bool()
    assert torch.allclose(lp0[m], lp1[m], atol=1e-5)
    assert loss1 == pytest.approx(loss0, abs=1e-6)
    for name in g0:
        assert torch.allclose(g0[name], g1[name], atol=1e-5), name


def test_ratio_is_one_on_first_pass_and_clipping_applies_later():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    mask = torch.ones(1, 2)
    adv = torch.tensor([2.0])
    bnpo = LossSettings(loss_type="bnpo", epsilon=0.2)
    first = policy_loss(logp, logp.detach(), adv, mask, bnpo)
    assert first.ratio_mean == 1.0 and first.clip_fraction == 0.0
    # a later pass: the policy moved up by log(1.5) on token 0; ratio 1.5 > 1.2 is clipped
    old = torch.tensor([[-1.0 - torch.log(torch.tensor(1.5)).item(), -2.0]])
    later = policy_loss(logp, old, adv, mask, bnpo)
    assert later.clip_fraction == pytest.approx(0.5)
    # per token: -min(1.5 * 2, 1.2 * 2) = -2.4 and -min(1 * 2, 1 * 2) = -2 -> mean -2.2
    assert later.loss.item() == pytest.approx(-2.2, rel=1e-5)
    later.loss.backward()
    assert logp.grad[0, 0] == 0  # clipped token has no gradient


def test_loss_types_by_hand():
    # two sequences, lengths 1 and 3, per-token loss -A * ratio with ratio 1
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, -1.0])

    def settings(loss_type):
        return LossSettings(loss_type=loss_type, epsilon=0.2)

    # per-token losses: row0 [-1], row1 [1, 1, 1]
    grpo = policy_loss(logp, logp, adv, mask, settings("grpo")).loss
    assert grpo.item() == pytest.approx((-1 + 1) / 2)
    bnpo = policy_loss(logp, logp, adv, mask, settings("bnpo")).loss
    assert bnpo.item() == pytest.approx((-1 + 3) / 4)
    by_budget = Denominators(max_completion_length=8)
    dr = policy_loss(logp, logp, adv, mask, settings("dr_grpo"), denominators=by_budget).loss
    assert dr.item() == pytest.approx((-1 + 3) / (2 * 8))
    by_step = Denominators(step_tokens=8.0)
    dapo = policy_loss(logp, logp, adv, mask, settings("dapo"), denominators=by_step).loss
    assert dapo.item() == pytest.approx((-1 + 3) / 8)
    with pytest.raises(ValueError, match="loss_type"):
        policy_loss(logp, logp, adv, mask, settings("nope"))


def test_kl_estimators():
    logp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.5, -2.0])
    assert kl_penalty(logp, ref, "k1").tolist() == pytest.approx([0.5, 0.0])
    # k3 = exp(ref - logp) - (ref - logp) - 1
    assert kl_penalty(logp, ref, "k3").tolist() == pytest.approx(
        [torch.exp(torch.tensor(-0.5)).item() + 0.5 - 1, 0.0]
    )
    out = policy_loss(
        logp[None],
        logp[None],
        torch.tensor([0.0]),
        torch.ones(1, 2),
        LossSettings(loss_type="bnpo", epsilon=0.2, beta=0.1, kl_estimator="k1"),
        ref_logp=ref[None],
    )
    assert out.kl == pytest.approx(0.25)
    assert out.loss.item() == pytest.approx(0.1 * 0.25)
    # beta == 0: no KL is computed, and none is reported (not a silent 0.0)
    off = policy_loss(
        logp[None],
        logp[None],
        torch.tensor([0.0]),
        torch.ones(1, 2),
        LossSettings(loss_type="bnpo", epsilon=0.2),
    )
    assert off.kl is None


def test_greedy_generation_consumes_no_rng():
    reqs = [Request([5 + r], n=1, temperature=0.0, max_new_tokens=4) for r in range(3)]
    torch.manual_seed(0)
    before = torch.get_rng_state()
    generate(ScriptedLM(), reqs, [EOS], PAD)
    assert torch.equal(torch.get_rng_state(), before)
    # a sampled row still draws
    generate(ScriptedLM(), [Request([5], n=1, temperature=1.0, max_new_tokens=2)], [EOS], PAD)
    assert not torch.equal(torch.get_rng_state(), before)
