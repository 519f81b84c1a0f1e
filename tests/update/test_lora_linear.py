"""The fused LoRA linear (teamrl.update.lora_linear): y = x W^T + b + s (x A^T) B^T as one
autograd node. Its values and gradients by hand, by gradcheck, against PEFT on a whole model,
where it must not fuse, and one update with it equal to one update without it."""

from __future__ import annotations

import contextlib

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


def test_the_branch_in_the_models_dtype_by_hand():
    # model.lora_compute_dtype='model' (bf16 autocast): the example above with bf16 x and W and
    # float32 adapters, whose products run in bf16 (small integers: exact in bf16). The output
    # and x's gradient are bf16; A's and B's gradients come back in float32, their own dtype.
    bf = dict(dtype=torch.bfloat16, requires_grad=True)
    x = torch.tensor([[1.0, 2.0]], **bf)
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.bfloat16)
    a = torch.tensor([[1.0, 1.0]], requires_grad=True)
    b = torch.tensor([[1.0], [0.0], [2.0]], requires_grad=True)
    y = ll.lora_linear(x, w, None, a, b, 2.0, compute_dtype=torch.bfloat16)
    assert y.dtype == torch.bfloat16 and y.tolist() == [[7.0, 2.0, 15.0]]
    y.sum().backward()
    assert x.grad.dtype == torch.bfloat16 and x.grad.tolist() == [[8.0, 8.0]]
    assert a.grad.dtype == b.grad.dtype == torch.float32
    assert a.grad.tolist() == [[6.0, 12.0]] and b.grad.tolist() == [[6.0], [6.0], [6.0]]


class _WideFloat32(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts operations that write a float32 tensor of at least ``numel`` elements."""

    def __init__(self, numel: int):
        super().__init__()
        self.numel, self.count = numel, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.numel() >= self.numel:
                self.count += 1
        return out


def _bf16_layer_pass(context, layer, routed=None):
    """A forward and backward of one LoRA linear of a bf16 model (float32 adapters, as PEFT
    keeps them) inside ``context``: (output, the adapters' gradients, float32 tensors of the
    output's size or more written on the way)."""
    torch.manual_seed(3)
    x = torch.randn(2, 16, 64, dtype=torch.bfloat16)  # 32 rows: 2,048 outputs per layer
    with context as route, _WideFloat32(32 * 64) as wide:
        with route(routed) if routed is not None else contextlib.nullcontext():
            y = layer(x)
        y.sum().backward()
    grads = [p.grad for n, p in layer.named_parameters() if "lora_" in n and p.grad is not None]
    return x, y, grads, wide.count


@pytest.mark.parametrize("path", ["fused", "routed"])
def test_the_models_dtype_writes_no_float32_tensor_of_a_layers_size(path):
    """Under 'model' the fused update (lora_linear) and the one-pass update (routed_lora) make
    no float32 pass over a layer's activations (only r x d casts of the adapters), and the
    result is the float64 function's within bf16 rounding; under 'adapter' (PEFT's recipe)
    the same pass does write float32 activations, so the count can fail."""
    from teamrl.update.joint import routed_lora

    counts = {}
    for setting in ("model", "adapter"):
        model = _peft_model(dtype=torch.bfloat16)
        layer = model.base_model.model.model.layers[0].self_attn.q_proj
        if path == "fused":
            model.set_adapter("alice")
            context, routed = ll.fused_lora(model, setting), None
        else:
            context, routed = routed_lora(model, ["alice", "bob"], setting), torch.tensor([0, 1])
        x, y, grads, counts[setting] = _bf16_layer_pass(context, layer, routed)
        assert y.dtype == torch.bfloat16
        assert grads and all(g.dtype == torch.float32 for g in grads)
        if setting == "model":  # against the same layer in float64, row 1 through bob
            with torch.no_grad():
                x64 = x.double()
                want = x64 @ layer.base_layer.weight.double().T
                names = ["alice", "bob"] if routed is not None else ["alice"]
                for row, name in enumerate(names):
                    a, b = layer.lora_A[name].weight.double(), layer.lora_B[name].weight.double()
                    rows = slice(row, row + 1) if routed is not None else slice(None)
                    want[rows] += layer.scaling[name] * (x64[rows] @ a.T) @ b.T
            scale = float(want.abs().max())
            assert float((y.detach().double() - want).abs().max()) <= 2e-2 * scale
    assert counts["model"] == 0
    assert counts["adapter"] > 0


def test_the_sampler_computes_the_branch_in_the_same_dtype():
    """Grouped sampling (multi_lora) follows the update's choice: under 'model' its stacks are
    the model's bf16 and a decode forward writes no float32 activations; under 'adapter' it
    computes in the adapters' float32, as PEFT does."""
    from teamrl.generation import multi_lora

    counts = {}
    for setting in ("model", "adapter"):
        model = _peft_model(dtype=torch.bfloat16)
        multi_lora.set_compute_dtype(model, setting)
        layer = model.base_model.model.model.layers[0].self_attn.q_proj
        x = torch.randn(2, 16, 64, dtype=torch.bfloat16)
        with torch.no_grad(), multi_lora.grouped_lora(model, ["alice", "bob"]):
            with _WideFloat32(32 * 64) as wide:
                y = layer(x)
        counts[setting] = wide.count
        assert y.dtype == torch.bfloat16
        x64, want = x.double(), x.double() @ layer.base_layer.weight.double().T
        for row, name in enumerate(["alice", "bob"]):
            a, b = layer.lora_A[name].weight.double(), layer.lora_B[name].weight.double()
            want[row] += layer.scaling[name] * (x64[row] @ a.T) @ b.T
        assert float((y.double() - want).abs().max()) <= 2e-2 * float(want.abs().max())
        multi_lora.release(model)
    assert counts == {"model": 0, "adapter": counts["adapter"]} and counts["adapter"] > 0
    with pytest.raises(ValueError, match="lora_compute_dtype"):
        multi_lora.set_compute_dtype(model, "fp8")


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
