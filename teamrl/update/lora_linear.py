"""LoRA linears as one autograd node each, for the update's forward and backward.

PEFT computes an adapted linear as five autograd nodes,

    y = W x  +  (B (A x)) * s,

so every layer makes two extra passes over its output in the forward (the scale's ``mul`` and
the ``add``), two more in the backward (the ``mul``'s backward, and the sum of the two branches'
input gradients), and keeps five nodes' bookkeeping (on a GPU: four more kernel launches per
layer). ``fused_lora`` computes the same function as one node:

    forward     low = s (x A^T)                 N x r: the scaled down-projection
                y   = x W^T + low B^T           the second product accumulates into y (addmm)
    backward    g_low = s (g B)                 N x r
                dL/dx = g W + g_low A           accumulated into one buffer
                dL/dA = g_low^T x               r x d_in
                dL/dB = g^T low                 d_out x r

which are the products PEFT makes, and no pass over an (N x d) tensor besides the products' own
writes. The maths is the chain rule of the line above it; ``tests/update/test_lora_linear.py`` checks
it by hand, with ``gradcheck`` in float64, and against PEFT on a whole model. On this 2-core CPU
it made SmolLM2-135M's LoRA update about 6 % faster (``benchmarks/README.md``: the skinny
products themselves, not the passes, are LoRA's cost there).

Adapters wider than the weights (PEFT keeps fp32 adapters on a bf16 model) are computed in one
of two ways (``model.lora_compute_dtype``):

- ``compute_dtype`` = x's dtype (``'model'``, bf16 autocast): A and B are cast to x's dtype (r x d
  copies, nothing of the layer's output size), the whole line runs in bf16 as above, and dL/dA,
  dL/dB are cast back to the adapters' fp32, so the optimizer steps fp32 weights with fp32
  moments. This is what ``torch.autocast`` does with a matmul's fp32 weight.
- ``compute_dtype`` = the adapters' dtype (``'adapter'``, PEFT's): x cast to fp32 for the LoRA
  branch, the two branches summed in fp32 and rounded back to x's; the backward sums the
  branches' input gradients in x's dtype. Two casts of every layer's (N x d_out) output in the
  forward and one of its incoming gradient in the backward.

Mixed precision (``train.bf16``, TrainingArguments' name) on a float32 model with a frozen base:
``weight`` is a bfloat16 copy of the base weight (made once, ``base_copy``), x and the incoming
gradient are rounded to bf16 at the node's edge, every product above runs in bf16 (float32
accumulation inside the matmul kernels), and y and dL/dx are rounded back to float32, so the
residual stream, norms, attention, logits and the optimizer stay float32, as under
``torch.autocast``, whose per-op casts do not reach a custom node's backward. On a CPU with
bf16 instructions the products are several times faster than in float32.

Only the case PEFT computes as that line is fused: one active adapter, not merged, no DoRA or
other variant, no bias on B, dropout off, a plain ``nn.Linear`` base, x in W's dtype and A in
B's. Any other call (a disabled adapter for the reference model, a mixed-batch
``adapter_names`` call) runs PEFT's own forward unchanged.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager

import torch

from teamrl.tensors import lora_branch_dtype


class _LoraLinear(torch.autograd.Function):
    """y = x W^T + b + s (x A^T) B^T over the last dimension of x, the LoRA branch's products
    in ``compute_dtype`` (module docstring: x's dtype, or the adapters' as PEFT does)."""

    @staticmethod
    def forward(ctx, x, weight, bias, lora_a, lora_b, scaling: float, compute_dtype):
        x2 = x.reshape(-1, x.shape[-1])
        # the base product's input in the weight's dtype: x itself, except under train.bf16
        # (a bf16 copy of a float32 model's frozen weight), where x is rounded once here
        xw = x2.to(weight.dtype)
        y = xw @ weight.T if bias is None else torch.addmm(bias.to(weight.dtype), xw, weight.T)
        # each of these is its input itself when the dtypes agree
        a, b = lora_a.to(compute_dtype), lora_b.to(compute_dtype)
        xa = xw if xw.dtype == compute_dtype else x2.to(compute_dtype)
        low = (xa @ a.T).mul_(scaling)
        if y.dtype == low.dtype:
            y.addmm_(low, b.T)
        else:  # PEFT: base + lora summed in the adapters' dtype, then rounded to x's
            y = y.to(low.dtype).addmm_(low, b.T)
        need_w = ctx.needs_input_grad[1]  # a trained base weight: dL/dW needs x itself
        ctx.save_for_backward(x2 if need_w else None, xa, weight, a, b, low)
        ctx.scaling, ctx.x_shape, ctx.has_bias = scaling, x.shape, bias is not None
        ctx.adapter_dtype, ctx.x_dtype = lora_a.dtype, x.dtype
        return y.to(x.dtype).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad):
        x2, xa, weight, a, b, low = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        gw = g.to(weight.dtype)  # g itself, except under train.bf16
        ga = gw if gw.dtype == a.dtype else g.to(a.dtype)
        need_x, need_w, need_bias, need_a, need_b, _, _ = ctx.needs_input_grad
        g_low = (ga @ b).mul_(ctx.scaling) if (need_x or need_a) else None
        grad_x = None
        if need_x:
            grad_x = gw @ weight
            if grad_x.dtype == g_low.dtype:
                grad_x.addmm_(g_low, a)
            else:  # each branch's gradient in its own dtype, summed in x's (autograd's sum)
                grad_x += (g_low @ a).to(grad_x.dtype)
            grad_x = grad_x.to(ctx.x_dtype).view(ctx.x_shape)
        grad_w = g.T @ x2 if need_w else None
        grad_bias = g.sum(0) if (need_bias and ctx.has_bias) else None
        # back to the adapters' own dtype (fp32 under autocast): what their optimizer steps
        grad_a = (g_low.T @ xa).to(ctx.adapter_dtype) if need_a else None
        grad_b = (ga.T @ low).to(ctx.adapter_dtype) if need_b else None
        return grad_x, grad_w, grad_bias, grad_a, grad_b, None, None


def lora_linear(
    x, weight, bias, lora_a, lora_b, scaling: float, compute_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``x W^T + b + s (x A^T) B^T`` as one autograd node (module docstring); the LoRA
    branch's products in ``compute_dtype`` (default: the adapters' dtype, PEFT's way)."""
    dtype = lora_a.dtype if compute_dtype is None else compute_dtype
    return _LoraLinear.apply(x, weight, bias, lora_a, lora_b, scaling, dtype)


def fusable_adapter(layer, x: torch.Tensor, args: tuple, kwargs: dict) -> str | None:
    """The adapter whose PEFT forward on this call is exactly ``lora_linear``, else None."""
    if args or kwargs or layer.disable_adapters or layer.merged:
        return None
    active = [a for a in layer.active_adapters if a in layer.lora_A]
    if len(active) != 1:
        return None
    name = active[0]
    base, drop = layer.base_layer, layer.lora_dropout[name]
    a, b = layer.lora_A[name], layer.lora_B[name]
    if name in getattr(layer, "lora_variant", {}) or layer.use_dora.get(name, False):
        return None
    if isinstance(drop, torch.nn.Dropout) and drop.p > 0 and drop.training:
        return None
    if type(base) is not torch.nn.Linear or b.bias is not None or a.bias is not None:
        return None
    if x.dtype != base.weight.dtype or a.weight.dtype != b.weight.dtype:
        return None
    return name


# layer -> {(lora_compute_dtype, base dtype): its fused forward}, made once: every update
# installs the same function object, so a compiled region around the layer (torch.compile's
# guards check it) is not traced again.
_FORWARDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# base linear -> (the weight it was copied from: address, version, dtype; its copy)
_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def base_copy(base: torch.nn.Linear, dtype: torch.dtype) -> torch.Tensor:
    """``base.weight`` in ``dtype``, copied once and kept while the weight is the same tensor
    at the same version (a frozen base never changes; an in-place load or a new tensor makes a
    new copy). Under train.bf16 this is one bf16 copy of each adapted linear: half the base's
    float32 bytes more memory, and no cast of the weights in any forward or backward."""
    w = base.weight
    key = (w.data_ptr(), w._version, dtype)
    kept = _COPIES.get(base)
    if kept is None or kept[0] != key:
        kept = (key, w.detach().to(dtype))
        _COPIES[base] = kept
    return kept[1]


def _fused_forward(layer, setting: str, base_dtype: torch.dtype | None = None):
    key = (setting, base_dtype)
    if key in _FORWARDS.get(layer, {}):
        return _FORWARDS[layer][key]
    ref = weakref.ref(layer)  # a strong one would keep the layer (the dict's key) alive forever

    def forward(x, *args, **kwargs):
        layer = ref()
        name = fusable_adapter(layer, x, args, kwargs)
        if name is None:
            return type(layer).forward(layer, x, *args, **kwargs)  # PEFT's own
        base, a = layer.base_layer, layer.lora_A[name].weight
        weight, dtype = base.weight, lora_branch_dtype(setting, x.dtype, a.dtype)
        if base_dtype is not None and not weight.requires_grad:  # train.bf16, frozen base
            weight, dtype = base_copy(base, base_dtype), base_dtype
        return lora_linear(
            x, weight, base.bias, a, layer.lora_B[name].weight, layer.scaling[name], dtype
        )

    _FORWARDS.setdefault(layer, {})[key] = forward
    return forward


@contextmanager
def fused_lora(
    model: torch.nn.Module,
    lora_compute_dtype: str = "adapter",
    base_dtype: torch.dtype | None = None,
):
    """Within the block, PEFT's LoRA linears of ``model`` run as ``lora_linear`` where that is
    PEFT's function (``fusable_adapter``), the branch in ``lora_compute_dtype``'s dtype
    (``teamrl.tensors.lora_branch_dtype``); yields how many layers were patched. With
    ``base_dtype`` (train.bf16: torch.bfloat16), a frozen base's products run in that dtype
    on a copy of its weight (module docstring). A layer that already has an instance
    ``forward`` (patched by someone else) is left alone, and every patch is removed on exit,
    errors included."""
    try:
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:  # no PEFT: nothing to fuse
        yield 0
        return
    patched = []
    try:
        for module in model.modules():
            if isinstance(module, LoraLinear) and "forward" not in module.__dict__:
                module.forward = _fused_forward(module, lora_compute_dtype, base_dtype)
                patched.append(module)
        yield len(patched)
    finally:
        for module in patched:
            del module.forward
