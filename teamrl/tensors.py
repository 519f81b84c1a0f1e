"""Small tensor helpers shared by the sampler and the loss (below both, so neither imports
the other)."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    # padded in Python, then one tensor each: a row-by-row copy would dispatch an operation per
    # sequence (the update's op count must not grow with its samples)
    width = max(len(s) for s in seqs)
    ids = torch.tensor([[pad_id] * (width - len(s)) + list(s) for s in seqs], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], dtype=torch.long)
    return ids.reshape(len(seqs), width), mask.reshape(len(seqs), width)


def to_device(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``t`` (made on the host) on ``device``, without making the host wait for the device.

    A plain ``.to('cuda')`` from ordinary (pageable) host memory synchronises the stream: the
    host waits until every kernel queued before it has run. Called per micro-batch, that
    serialises the update (the host cannot queue the next forward while the GPU works on the
    last backward). From pinned memory the copy is queued like a kernel (``non_blocking``), and
    PyTorch's pinned-memory cache keeps the buffer until the copy has run. Elsewhere (CPU, or a
    tensor already on a device) a plain ``.to``."""
    device = torch.device(device)
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


LORA_COMPUTE_DTYPES = ("model", "adapter")  # model.lora_compute_dtype's values


def check_lora_compute_dtype(setting: str) -> str:
    """``setting`` if it is a value of ``model.lora_compute_dtype``, else a one-line error."""
    if setting not in LORA_COMPUTE_DTYPES:
        raise ValueError(f"model.lora_compute_dtype: expected model|adapter, got {setting!r}")
    return setting


def lora_branch_dtype(setting: str, model_dtype: torch.dtype, adapter_dtype: torch.dtype):
    """The dtype of the LoRA branch's products under ``model.lora_compute_dtype``: 'model' (the
    model's dtype, bf16 autocast) or 'adapter' (the adapters' own, PEFT's). One rule for the
    update's LoRA forwards and the grouped sampler, so the sampler computes what is scored."""
    return model_dtype if check_lora_compute_dtype(setting) == "model" else adapter_dtype


# --- the KV cache's name across transformers versions ------------------------------------------
# transformers 5.x renamed the forward keyword and output field ``past_key_values`` to ``cache``
# and warns on every call that uses the old name; 4.x knows only the old one. One place decides,
# per model class, so a decode loop neither warns each token nor breaks on an older install.


@functools.cache
def _cache_name(cls: type) -> str:
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def cache_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``model(...)``, under the name its transformers version expects."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {_cache_name(type(base)): cache}


def output_cache(out: Any) -> Any:
    """The KV cache a forward with ``use_cache=True`` returned (either field name)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def is_adapter_param(name: str, adapter: str) -> bool:
    """Whether parameter ``name`` belongs to LoRA adapter ``adapter``.

    PEFT names adapter weights ``<module>.lora_A.<adapter>.weight`` (also ``lora_B``,
    ``lora_embedding_A``/``_B``, ``lora_magnitude_vector``), so the adapter is the path part
    right after a ``lora_*`` part. A plain substring test would also match base weights of an
    agent named like a module (``mlp``, ``q_proj``, ``0``) and unfreeze them.
    """
    parts = name.split(".")
    return any(part.startswith("lora_") and nxt == adapter for part, nxt in zip(parts, parts[1:]))
