"""Grouped multi-LoRA forward for generation: every row of a batch uses its own adapter.

For a LoRA linear layer with adapters k = 1..K (A_k: r x d_in, B_k: d_out x r, scale s_k), row i
with adapter a(i) needs  y_i = W x_i + s_a(i) B_a(i) A_a(i) x_i.  Stacking the adapters,

    A = [A_1; ...; A_K]  (K r x d_in),   B = [B_1, ..., B_K]  (d_out x K r),
    M_i = s_a(i) on the r columns of block a(i), 0 elsewhere,
    y = W x + ((x A^T) * M) B^T,

which is two matmuls per layer whatever K is, instead of PEFT's gather/scatter per adapter.
Rows whose adapter is None use the base weights only (all-zero mask).

The stacks, the masks and the patched forwards are kept per model and shape (``_Grouped``) and
refreshed in place at every call, so a compiled decode step sees the same functions and tensor
addresses on every call (``teamrl.generation.fast_decode`` compiles LoRA rows too) while always
reading the adapters' current weights.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager

import torch


def _lora_linears(model: torch.nn.Module):
    from peft.tuners.lora.layer import Linear as LoraLinear

    for module in model.modules():
        if isinstance(module, LoraLinear):
            yield module


def supported(model: torch.nn.Module) -> bool:
    """Plain LoRA linears only (no DoRA, no dropout at generation, no bias on B).

    Any other LoRA layer (an ``Embedding`` when ``lora_target_modules`` names ``embed_tokens``,
    a conv...) is refused: ``grouped_lora`` patches linears only, so such a layer would keep
    PEFT's forward and apply the *active* adapter to every row. The caller then falls back to
    PEFT's ``adapter_names`` path, which routes every layer kind per row.
    """
    from peft.tuners.lora.layer import Linear as LoraLinear
    from peft.tuners.lora.layer import LoraLayer

    if any(isinstance(m, LoraLayer) and not isinstance(m, LoraLinear) for m in model.modules()):
        return False
    layers = list(_lora_linears(model))
    return bool(layers) and all(
        not any(layer.use_dora.values()) and not getattr(layer, "lora_bias", {}).get(n, False)
        for layer in layers
        for n in layer.lora_A
    )


class _Grouped:
    """The grouped forwards of one model for one shape: its adapter names (and ranks) and its
    row count. Built once and kept with the model, so every call with that shape installs the
    *same* forward functions reading the *same* tensors, whose contents are refreshed in place
    at each call: a compiled decode step (``fast_decode``, CUDA graphs) then replays instead of
    recompiling, and still reads the adapters' current weights."""

    def __init__(self, model: torch.nn.Module, names: list[str], rows: int):
        self.names = names
        self.layers = list(_lora_linears(model))
        self.tensors = []  # per layer: (stacked A, stacked B, row mask)
        self.forwards = []
        for layer in self.layers:
            a0 = layer.lora_A[names[0]].weight
            ranks = [layer.lora_A[n].weight.shape[0] for n in names]
            a_cat = torch.empty(sum(ranks), a0.shape[1], dtype=a0.dtype, device=a0.device)
            b_cat = torch.empty(
                layer.lora_B[names[0]].weight.shape[0], sum(ranks), dtype=a0.dtype, device=a0.device
            )
            mask = torch.zeros(rows, sum(ranks), dtype=a0.dtype, device=a0.device)
            self.tensors.append((a_cat, b_cat, mask))

            def forward(x, *args, _a=a_cat, _b=b_cat, _m=mask, _base=layer.base_layer, **kwargs):
                low = (x.to(_a.dtype) @ _a.T) * _m[:, None, :]
                return _base(x, *args, **kwargs) + (low @ _b.T).to(x.dtype)

            self.forwards.append(forward)

    @torch.no_grad()
    def load(self, row_adapters: list[str | None]) -> None:
        """Copy every adapter's current weights into the stacks and set the rows' masks.

        The weights are read at every call: an optimizer step changes them in place (a fused
        AdamW without bumping their version counter), so no cheaper test could tell that they
        moved, and a stale stack would sample from an old policy."""
        for layer, (a_cat, b_cat, mask) in zip(self.layers, self.tensors):
            torch.cat([layer.lora_A[n].weight for n in self.names], dim=0, out=a_cat)
            torch.cat([layer.lora_B[n].weight for n in self.names], dim=1, out=b_cat)
            mask.zero_()
            offset = 0
            for n in self.names:
                r = layer.lora_A[n].weight.shape[0]
                rows = [i for i, a in enumerate(row_adapters) if a == n]
                if rows:
                    mask[rows, offset : offset + r] = layer.scaling[n]
                offset += r


# model -> {(adapter names, ranks, rows, dtype, device): _Grouped}, the most recent last
_GROUPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Shapes kept per model. A rollout's decode calls repeat one row count (samples per step), so a
# few suffice; the oldest is dropped beyond it, bounding the copies (each holds every adapter's
# A and B once: ~20 MB per adapter for SmolLM2-135M at rank 16).
MAX_KEPT = 4


def release(model: torch.nn.Module) -> None:
    """Drop the model's kept stacks (their memory: each adapter's A and B once more)."""
    _GROUPED.pop(model, None)


@contextmanager
def grouped_lora(model: torch.nn.Module, row_adapters: list[str | None]):
    """Within the block, LoRA layers apply ``row_adapters[i]`` to batch row i."""
    names = sorted({a for a in row_adapters if a is not None})
    layers = list(_lora_linears(model))
    if not names or not layers:
        yield
        return
    first = layers[0].lora_A[names[0]].weight
    ranks = tuple(tuple(layer.lora_A[n].weight.shape[0] for n in names) for layer in layers)
    key = (tuple(names), ranks, len(row_adapters), first.dtype, first.device)
    kept = _GROUPED.setdefault(model, {})
    grouped = kept.pop(key, None) or _Grouped(model, names, len(row_adapters))
    kept[key] = grouped  # the most recent last
    while len(kept) > MAX_KEPT:
        kept.pop(next(iter(kept)))
    grouped.load(row_adapters)
    patched = []
    try:
        for layer, forward in zip(grouped.layers, grouped.forwards):
            layer.forward = forward
            patched.append(layer)
        yield
    finally:
        for layer in patched:
            del layer.forward  # back to the class's forward
