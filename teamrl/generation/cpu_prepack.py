"""Prepacked (oneDNN-blocked) linear weights for sampling on CPU.

Why. A decode step multiplies a handful of rows (the batch: a few samples per agent) by every
weight matrix of the model, so on CPU it is bound by how fast the weights stream from memory,
not by arithmetic. PyTorch's default CPU matmul reads the row-major ``(out, in)`` weight poorly
at such small row counts: several times slower than one pass over the same bytes. oneDNN's
blocked layout for the same weight (``mkldnn._reorder_linear_weight``, what ``torch.compile``
uses on CPU with frozen weights) streams it close to that pass, so the whole decode step gets
faster (docs/performance.md, "On CPU", has the measurements).

What. ``prepacked(model)`` is a context manager: inside it, every plain ``nn.Linear`` with a
float32 CPU weight of at least ``MIN_PACKED_ELEMENTS`` entries (LoRA base layers and the output
head included; the LoRA A/B factors and small projections stay as they are) computes
``x W^T + b`` through the packed copy of ``W``. It is a re-layout, not an approximation: the products agree with ``F.linear`` to float32
rounding (the order of the additions differs; ~1e-4 absolute on logits of size ~10), and the
trainer recomputes every log-prob with its own forward anyway.

Freshness. Trainable weights are repacked at every call: a fused optimizer updates them in place
without bumping their version counter (``torch.optim.AdamW(fused=True)`` leaves
``Tensor._version`` unchanged), so no cheap test can tell a stepped weight from an old one, and a
stale copy would silently sample from an old policy. That costs one copy of the weights per
rollout (~0.15 s for 135M parameters, against seconds of decoding). Frozen weights
(``requires_grad=False``: the base model under LoRA) are packed once and reused while the same
tensor keeps the same storage and version, so ``load_state_dict``, ``copy_`` or a new
``Parameter`` repack them; ``release(model)`` drops the copies after any other edit (e.g. through
``.data``). The copies of frozen weights live as long as the model, so under LoRA the base's
float32 weights take twice their memory: ``generation.cpu_prepack=off`` avoids that.

The two oneDNN operators are private PyTorch API. ``available()`` checks once that they exist and
agree with ``F.linear`` on a small product; where they do not, ``prepacked`` is a no-op.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from functools import cache

import torch
import torch.nn.functional as F

# Row count the packed layout is tuned for (any row count works; decode batches are small).
PACK_ROWS = 8
# Only weights of at least this many elements are packed. Below it the oneDNN call's fixed cost
# exceeds what the layout saves (small key/value projections and tiny test models lose;
# docs/performance.md, "On CPU").
MIN_PACKED_ELEMENTS = 1 << 18

# module -> (weak reference to the weight, its storage pointer, its version, packed weight)
_PACKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@cache
def available() -> bool:
    """Whether this PyTorch build has the oneDNN linear operators and they compute F.linear."""
    ops = getattr(torch.ops, "mkldnn", None)
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        gen = torch.Generator().manual_seed(0)
        w, x, b = (torch.randn(*s, generator=gen) for s in ((24, 16), (3, 5, 16), (24,)))
        packed = ops._reorder_linear_weight(w, PACK_ROWS)
        y = ops._linear_pointwise(x, packed, b, "none", [], "")
        return torch.allclose(y, F.linear(x, w, b), atol=1e-4, rtol=1e-4)
    except (AttributeError, RuntimeError):
        return False


def eligible(model: torch.nn.Module) -> bool:
    """A float32 model on CPU: the case the packed layout serves (and was measured on)."""
    p = next(model.parameters(), None)
    return p is not None and p.device.type == "cpu" and p.dtype == torch.float32


def _packed_weight(module: torch.nn.Linear) -> torch.Tensor:
    w = module.weight
    if w.requires_grad:  # may have been stepped in place since the last call: repack
        _PACKED.pop(module, None)
        with torch.no_grad():
            return torch.ops.mkldnn._reorder_linear_weight(w.detach(), PACK_ROWS)
    # A new Parameter, a swapped .data or an in-place update each change one of these.
    key = (w.untyped_storage().data_ptr(), w._version)
    hit = _PACKED.get(module)
    if hit is not None and hit[0]() is w and hit[1:3] == key:
        return hit[3]
    with torch.no_grad():
        packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), PACK_ROWS)
    _PACKED[module] = (weakref.ref(w), *key, packed)
    return packed


def _linears(model: torch.nn.Module):
    for name, module in model.named_modules():
        # Exactly nn.Linear: a subclass (a quantized linear...) keeps its own forward. Not the
        # LoRA factors (PEFT's ``...lora_A.<adapter>``): rank-r products gain nothing from a
        # re-layout, and being trainable they would be repacked at every call.
        w = getattr(module, "weight", None)
        if (
            type(module) is torch.nn.Linear
            and w.device.type == "cpu"
            and w.dtype == torch.float32
            and not any(part.startswith("lora_") for part in name.split("."))
            and w.numel() >= MIN_PACKED_ELEMENTS
        ):
            yield module


@contextmanager
def prepacked(model: torch.nn.Module, enabled: bool = True):
    """Within the block (no autograd), the model's plain fp32 CPU linears use packed weights."""
    if not (enabled and available() and eligible(model)):
        yield
        return
    patched = []
    try:
        for module in _linears(model):
            packed, bias = _packed_weight(module), module.bias

            def forward(x, _w=packed, _b=bias, _m=module):
                # The packed op has no backward, and inductor cannot lower it (a compiled
                # decode step on CPU multiplies by the weight itself).
                if torch.is_grad_enabled() or torch.compiler.is_compiling():
                    return F.linear(x, _m.weight, _b)
                return torch.ops.mkldnn._linear_pointwise(x, _w, _b, "none", [], "")

            module.forward = forward
            patched.append(module)
        yield
    finally:
        for module in patched:
            del module.forward  # back to nn.Linear.forward


def release(model: torch.nn.Module) -> None:
    """Drop the packed copies of ``model``'s weights (frees their memory)."""
    for module in model.modules():
        _PACKED.pop(module, None)
