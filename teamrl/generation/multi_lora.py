"""Grouped multi-LoRA forward for generation: every row of a batch uses its own adapter.

For a LoRA linear layer with adapters k = 1..K (A_k: r x d_in, B_k: d_out x r, scale s_k), row i
with adapter a(i) needs  y_i = W x_i + s_a(i) B_a(i) A_a(i) x_i.  Stacking the adapters,

    A = [A_1; ...; A_K]  (K r x d_in),   B = [B_1, ..., B_K]  (d_out x K r),
    M_i = s_a(i) on the r columns of block a(i), 0 elsewhere,
    y = W x + ((x A^T) * M) B^T,

which is two matmuls per layer whatever K is, instead of PEFT's gather/scatter per adapter.
Rows whose adapter is None use the base weights only (all-zero mask).

The stacks hold *every* adapter of the model, whichever ones a call uses (an unused adapter's
block is masked to 0 on every row: K r extra columns of a rank-r product, next to the d_in x
d_out base matmul), and the mask has room for ``capacity`` rows, of which a call with B rows
reads the first B. So one ``_Grouped`` per model serves every adapter mix and every row count:
its stacks, mask and patched forwards are built once and refreshed in place at every call, and
a compiled decode step (``teamrl.generation.fast_decode``) sees the same functions and tensor
addresses whatever the call's adapters, recompiling only for a new shape, while always reading
the adapters' current weights.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager

import torch

from teamrl.tensors import check_lora_compute_dtype, lora_branch_dtype


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


# Rows the mask has room for at first (a decode batch of up to 256 rows); a larger call rebuilds
# the stacks once, for the next power of two.
MIN_CAPACITY = 256


class _Grouped:
    """The grouped forwards of one model: all its adapter names (and ranks), room for
    ``capacity`` rows. Built once and kept with the model, so every call installs the *same*
    forward functions reading the *same* tensors, whose contents are refreshed in place at each
    call: a compiled decode step (``fast_decode``, CUDA graphs) then replays instead of
    recompiling, and still reads the adapters' current weights."""

    def __init__(self, model: torch.nn.Module, names: list[str], capacity: int, dtype):
        self.capacity = capacity
        self.names = names
        self.layers = list(_lora_linears(model))
        self.tensors = []  # per layer: (stacked A, stacked B, row mask), in the branch's dtype
        self.forwards = []
        for layer in self.layers:
            a0 = layer.lora_A[names[0]].weight
            ranks = [layer.lora_A[n].weight.shape[0] for n in names]
            a_cat = torch.empty(sum(ranks), a0.shape[1], dtype=dtype, device=a0.device)
            b_cat = torch.empty(
                layer.lora_B[names[0]].weight.shape[0], sum(ranks), dtype=dtype, device=a0.device
            )
            mask = torch.zeros(capacity, sum(ranks), dtype=dtype, device=a0.device)
            self.tensors.append((a_cat, b_cat, mask))

            def forward(x, *args, _a=a_cat, _b=b_cat, _m=mask, _base=layer.base_layer, **kwargs):
                # x: (B, T, d_in); the first B rows of the mask, one per batch row
                low = (x.to(_a.dtype) @ _a.T) * _m[: x.shape[0], None, :]
                return _base(x, *args, **kwargs) + (low @ _b.T).to(x.dtype)

            self.forwards.append(forward)

    @torch.no_grad()
    def load(self, row_adapters: list[str | None]) -> None:
        """Copy every adapter's current weights into the stacks and set the rows' masks.

        The weights are read at every call: an optimizer step changes them in place (a fused
        AdamW without bumping their version counter), so no cheaper test could tell that they
        moved, and a stale stack would sample from an old policy."""
        for layer, (a_cat, b_cat, mask) in zip(self.layers, self.tensors):
            a_cat.copy_(torch.cat([layer.lora_A[n].weight for n in self.names], dim=0))
            b_cat.copy_(torch.cat([layer.lora_B[n].weight for n in self.names], dim=1))
            mask.zero_()  # rows past the call's, and unused adapters' blocks: 0
            offset = 0
            for n in self.names:
                r = layer.lora_A[n].weight.shape[0]
                rows = [i for i, a in enumerate(row_adapters) if a == n]
                if rows:
                    mask[rows, offset : offset + r] = layer.scaling[n]
                offset += r


# model -> (adapter names, ranks, dtype, device), _Grouped: one per model (it holds every
# adapter's A and B once more: ~20 MB per adapter for SmolLM2-135M at rank 16)
_GROUPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# model -> model.lora_compute_dtype ('model' or 'adapter'), set by the backend that samples it
_COMPUTE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def set_compute_dtype(model: torch.nn.Module, setting: str) -> None:
    """The dtype of this model's grouped LoRA branch (``model.lora_compute_dtype``): 'model'
    keeps the stacks in the base weights' dtype (bf16 on a bf16 model: no float32 product or
    cast per layer and decode step), 'adapter' in the adapters' (PEFT's). The same choice as
    the update's (``teamrl.tensors.lora_branch_dtype``), so the sampler computes the
    function that the update scores."""
    _COMPUTE[model] = check_lora_compute_dtype(setting)


def stacks(model: torch.nn.Module) -> _Grouped | None:
    """The model's kept grouped stacks (None before its first grouped call): the tensors a
    captured decode step reads, which a call with more rows than their capacity replaces."""
    kept = _GROUPED.get(model)
    return None if kept is None else kept[1]


def release(model: torch.nn.Module) -> None:
    """Drop the model's kept stacks (their memory: each adapter's A and B once more)."""
    _GROUPED.pop(model, None)


@contextmanager
def grouped_lora(model: torch.nn.Module, row_adapters: list[str | None]):
    """Within the block, LoRA layers apply ``row_adapters[i]`` to batch row i."""
    layers = list(_lora_linears(model))
    if all(a is None for a in row_adapters) or not layers:
        yield
        return
    names = sorted(layers[0].lora_A.keys())  # every adapter, used in this call or not
    unknown = sorted({a for a in row_adapters if a is not None} - set(names))
    if unknown:
        raise ValueError(f"grouped_lora: unknown adapter(s) {unknown}; the model has {names}")
    first = layers[0].lora_A[names[0]].weight
    dtype = lora_branch_dtype(
        _COMPUTE.get(model, "adapter"), layers[0].base_layer.weight.dtype, first.dtype
    )
    ranks = tuple(tuple(layer.lora_A[n].weight.shape[0] for n in names) for layer in layers)
    key = (tuple(names), ranks, dtype, first.device)
    kept = _GROUPED.get(model)
    if kept is None or kept[0] != key or kept[1].capacity < len(row_adapters):
        capacity = max(MIN_CAPACITY, 1 << (len(row_adapters) - 1).bit_length())
        kept = _GROUPED[model] = (key, _Grouped(model, names, capacity, dtype))
    grouped = kept[1]
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
