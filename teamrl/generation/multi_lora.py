"""Grouped multi-LoRA forward for generation: every row of a batch uses its own adapter.

For a LoRA linear layer with adapters k = 1..K (A_k: r x d_in, B_k: d_out x r, scale s_k), row i
with adapter a(i) needs  y_i = W x_i + s_a(i) B_a(i) A_a(i) x_i.  Stacking the adapters,

    A = [A_1; ...; A_K]  (K r x d_in),   B = [B_1, ..., B_K]  (d_out x K r),
    M_i = s_a(i) on the r columns of block a(i), 0 elsewhere,
    y = W x + ((x A^T) * M) B^T,

which is two matmuls per layer whatever K is, instead of PEFT's gather/scatter per adapter.
Rows whose adapter is None use the base weights only (all-zero mask).
"""

from __future__ import annotations

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


@contextmanager
def grouped_lora(model: torch.nn.Module, row_adapters: list[str | None]):
    """Within the block, LoRA layers apply ``row_adapters[i]`` to batch row i."""
    names = sorted({a for a in row_adapters if a is not None})
    patched = []
    try:
        for layer in _lora_linears(model):
            ranks = [layer.lora_A[n].weight.shape[0] for n in names]
            a_cat = torch.cat([layer.lora_A[n].weight for n in names], dim=0)
            b_cat = torch.cat([layer.lora_B[n].weight for n in names], dim=1)
            mask = torch.zeros(
                len(row_adapters), sum(ranks), dtype=a_cat.dtype, device=a_cat.device
            )
            offsets = [sum(ranks[:k]) for k in range(len(names))]
            for i, a in enumerate(row_adapters):
                if a is not None:
                    k = names.index(a)
                    mask[i, offsets[k] : offsets[k] + ranks[k]] = layer.scaling[a]
            base = layer.base_layer

            def forward(x, *args, _a=a_cat, _b=b_cat, _m=mask, _base=base, **kwargs):
                low = (x.to(_a.dtype) @ _a.T) * _m[:, None, :]
                return _base(x, *args, **kwargs) + (low @ _b.T).to(x.dtype)

            layer.forward = forward
            patched.append(layer)
        yield
    finally:
        for layer in patched:
            del layer.forward  # back to the class's forward
