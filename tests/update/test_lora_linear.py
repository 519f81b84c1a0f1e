"""The fused LoRA linear (teamrl.update.lora_linear): y = x W^T + b + s (x A^T) B^T as one
autograd node. Its values and gradients by hand, by gradcheck, against PEFT on a whole model,
where it must not fuse, and one update with it equal to one update without it."""

from __future__ import annotations

import pytest
import torch
from exactness import SGD, assert_same_update, snapshot
from helpers.runs import tiny_overrides

from teamrl.config import load_config
from teamrl.credit.advantages import compute_advantages
from teamrl.team.models import load_model
from teamrl.trainer import Trainer
from teamrl.update import lora_linear as ll


def test_values_and_gradients_by_hand():
    # x = (1, 2); W rows (1, 0), (0, 1), (1, 1); A = (1, 1) (rank 1); B = (1, 0, 2)^T; s = 2.
    # low = s A x = 2 * 3 = 6;  y = W x + low B = (1, 2, 3) + (6, 0, 12) = (7, 2, 15), + b.
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], requires_grad=True)
    bias = torch.tensor([0.5, -1.0, 0.0], requires_grad=True)
    a = torch.tensor([[1.0, 1.0]], requires_grad=True)
    b = torch.tensor([[1.0], [0.0], [2.0]], requires_grad=True)
    y = ll.lora_linear(x, w, bias, a, b, 2.0)
    assert y.tolist() == [[7.5, 1.0, 15.0]]
    # g = (1, 1, 1): g_low = s g.B = 2 * 3 = 6; dx = g W + g_low A = (2, 2) + (6, 6) = (8, 8);
    # dA = g_low x = (6, 12); dB = g low = (6, 6, 6)^T; dW = g^T x; db = g.
    y.sum().backward()
    assert x.grad.tolist() == [[8.0, 8.0]]
    assert a.grad.tolist() == [[6.0, 12.0]]
    assert b.grad.tolist() == [[6.0], [6.0], [6.0]]
    assert w.grad.tolist() == [[1.0, 2.0]] * 3
    assert bias.grad.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("with_bias", [False, True])
def test_gradcheck_on_a_batch_of_sequences(with_bias):
    torch.manual_seed(0)
    d = dict(dtype=torch.float64, requires_grad=True)
    x = torch.randn(2, 3, 5, **d)  # (batch, tokens, d_in): the layer sees the last dimension
    w, a, b = torch.randn(4, 5, **d), torch.randn(2, 5, **d), torch.randn(4, 2, **d)
    bias = torch.randn(4, **d) if with_bias else None
    assert torch.autograd.gradcheck(lambda *t: ll.lora_linear(*t, 0.75), (x, w, bias, a, b))
    want = x @ w.T + 0.75 * (x @ a.T) @ b.T + (bias if with_bias else 0)
    torch.testing.assert_close(ll.lora_linear(x, w, bias, a, b, 0.75), want)


def test_adapters_wider_than_the_weights_are_computed_as_peft_does():
    # PEFT on a bf16 model keeps fp32 adapters: the LoRA branch sees x cast up, the branches
    # are summed in the adapters' dtype and rounded back; x's gradient sums the two branches'
    # gradients in x's dtype. Here float32 weights with float64 adapters, against that recipe.
    torch.manual_seed(1)
    x = torch.randn(2, 3, 5, requires_grad=True)
    w = torch.randn(4, 5)
    a = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    y = ll.lora_linear(x, w, None, a, b, 0.5)
    assert y.dtype == torch.float32
    g = torch.randn(2, 3, 4)
    y.backward(g)
    got = (x.grad.clone(), a.grad.clone(), b.grad.clone())
    x.grad = a.grad = b.grad = None
    want_y = ((x @ w.T) + (x.double() @ a.T) @ b.T * 0.5).float()
    want_y.backward(g)
    torch.testing.assert_close(y, want_y)
    for got_t, want_t in zip(got, (x.grad, a.grad, b.grad)):
        assert got_t.dtype == want_t.dtype
        torch.testing.assert_close(got_t, want_t)


def test_only_the_gradients_asked_for_are_computed():
    x, w = torch.randn(3, 4), torch.randn(2, 4)  # frozen input and base: LoRA's usual case
    a, b = torch.randn(2, 4, requires_grad=True), torch.randn(2, 2, requires_grad=True)
    ll.lora_linear(x, w, None, a, b, 1.0).sum().backward()
    assert a.grad is not None and b.grad is not None and w.grad is None


def _peft_model(dtype=torch.float64, **extra):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=targets, **extra)
    model = get_peft_model(load_model("tiny-llama").to(dtype), cfg, adapter_name="alice")
    model.add_adapter("bob", cfg)
    with torch.no_grad():  # B starts at zero (adapter = base); make the adapters differ
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model


def _loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits
    loss = torch.log_softmax(logits, -1)[..., 7].mean()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def test_a_whole_model_gives_peft_values_and_gradients(monkeypatch):
    model = _peft_model()
    ids = torch.tensor([[5, 9, 14, 3, 8], [7, 21, 2, 2, 6]])
    calls = []
    real = ll.lora_linear
    monkeypatch.setattr(ll, "lora_linear", lambda *a: calls.append(1) or real(*a))
    for adapter in ("alice", "bob"):
        model.set_adapter(adapter)
        for n, p in model.named_parameters():  # set_adapter freezes the others: train all
            p.requires_grad_("lora_" in n)
        want_logits, want = _loss_and_grads(model, ids)
        with ll.fused_lora(model) as patched:
            got_logits, got = _loss_and_grads(model, ids)
        assert patched == 2 * 7  # tiny-llama: 2 layers x 7 adapted linears
        torch.testing.assert_close(got_logits, want_logits, rtol=1e-12, atol=1e-12)
        assert got.keys() == want.keys() and all(adapter in n for n in got)
        for n in want:
            torch.testing.assert_close(got[n], want[n], rtol=1e-10, atol=1e-12)
    assert len(calls) == 2 * 14  # every layer fused, for both adapters
    assert not any("forward" in m.__dict__ for m in model.modules())  # patches removed


def test_a_bf16_model_with_fp32_adapters_fuses_and_matches_peft():
    model = _peft_model(dtype=torch.bfloat16)  # PEFT casts the adapters up to float32
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    assert layer.lora_A["alice"].weight.dtype == torch.float32
    x = torch.randn(1, 4, 64, dtype=torch.bfloat16)
    assert ll.fusable_adapter(layer, x, (), {}) == "alice"
    ids = torch.tensor([[5, 9, 14, 3, 8], [7, 21, 2, 2, 6]])
    want_logits, want = _loss_and_grads(model, ids)
    with ll.fused_lora(model):
        got_logits, got = _loss_and_grads(model, ids)
    # the same recipe in a different order of float32 sums, rounded to bfloat16: a bf16 ulp
    torch.testing.assert_close(got_logits, want_logits, rtol=2e-2, atol=2e-2)
    for n in want:
        scale = float(want[n].abs().max())
        assert float((got[n] - want[n]).abs().max()) <= 2e-2 * scale, n


def test_what_is_not_plain_lora_keeps_peft_forward():
    model = _peft_model()
    ids = torch.tensor([[5, 9, 14, 3]])
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    x = torch.randn(1, 4, 64, dtype=torch.float64)
    assert ll.fusable_adapter(layer, x, (), {}) == "alice"
    assert ll.fusable_adapter(layer, x.float(), (), {}) is None  # x not in W's dtype
    assert ll.fusable_adapter(layer, x, (), {"adapter_names": ["bob"]}) is None  # mixed batch
    with ll.fused_lora(model):
        with model.disable_adapter():  # the reference model: the base weights alone
            assert ll.fusable_adapter(layer, x, (), {}) is None
            off = model(input_ids=ids).logits
    with model.disable_adapter():
        torch.testing.assert_close(off, model(input_ids=ids).logits, rtol=0, atol=0)
    dropped = _peft_model(lora_dropout=0.5)
    q = dropped.base_model.model.model.layers[0].self_attn.q_proj
    dropped.train()
    assert ll.fusable_adapter(q, x, (), {}) is None  # dropout on, in training
    dropped.eval()
    assert ll.fusable_adapter(q, x, (), {}) == "alice"  # dropout off in eval mode


def test_patches_are_removed_on_error_and_foreign_patches_kept():
    model = _peft_model()
    layer = model.base_model.model.model.layers[1].mlp.up_proj
    foreign = layer.forward = lambda x: x  # someone else's patch (the grouped generation one)
    with pytest.raises(RuntimeError, match="boom"):
        with ll.fused_lora(model) as patched:
            assert patched == 13
            raise RuntimeError("boom")
    assert layer.__dict__["forward"] is foreign
    del layer.forward
    assert not any("forward" in m.__dict__ for m in model.modules())


def planted_update(tmp_path, fused: bool, checkpointing: bool):
    """One update of alice's LoRA policy with planted advantages, under SGD: (before, after)."""
    extra = {
        **SGD,
        "train.fused_lora": str(fused).lower(),
        "model.gradient_checkpointing": str(checkpointing).lower(),
        "algorithm.num_iterations": 2,
    }
    cfg = load_config(None, tiny_overrides("lora", 1, **extra))
    tr = Trainer(cfg, run_dir=tmp_path)
    samples = tr.rollout(tr.data.next(cfg.train.prompts_per_step)).samples
    compute_advantages(samples, cfg.algorithm.baseline, cfg.algorithm.scale_rewards)
    signal = [1.0, -0.5, 0.25, -1.0, 0.75]
    for i, s in enumerate(samples):
        s.advantage = signal[i % len(signal)]
    pol = tr.team.policies["alice"]
    before = snapshot(pol)
    tr.update(pol, [s for s in samples if s.policy == "alice"])
    return before, snapshot(pol)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_an_update_with_fused_lora_equals_one_with_peft(tmp_path, monkeypatch, checkpointing):
    before, want = planted_update(tmp_path / "peft", False, checkpointing)
    calls = []
    real = ll.lora_linear
    monkeypatch.setattr(ll, "lora_linear", lambda *a: calls.append(1) or real(*a))
    before_fused, got = planted_update(tmp_path / "fused", True, checkpointing)
    assert calls  # the fused path ran
    assert all(torch.equal(before[k], before_fused[k]) for k in before)  # same start
    assert_same_update(got, want, before, "fused LoRA against PEFT's forward")
    assert max(float((want[k] - before[k]).abs().max()) for k in want) > 1e-4


def test_each_layer_gets_one_forward_for_good_and_the_model_can_still_be_freed():
    import gc
    import weakref

    model = _peft_model()
    layer = model.base_model.model.model.layers[0].mlp.down_proj
    with ll.fused_lora(model):
        first = layer.__dict__["forward"]
    with ll.fused_lora(model):  # the same function object: a compiled region is not retraced
        assert layer.__dict__["forward"] is first
    alive = weakref.ref(layer)
    del model, layer, first
    gc.collect()
    assert alive() is None  # the kept forward holds its layer weakly
