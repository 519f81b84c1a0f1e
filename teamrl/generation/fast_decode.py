"""The builtin sampler's fast path: a preallocated (static) KV cache and a capturable decode step.

Same contract and same sampling as ``teamrl.generation.hf.generate`` (the reference loop);
only the cache layout differs:

- The reference loop keeps a growing cache: each decode step concatenates one column to every
  layer's keys and values, so step t copies O(t) memory and every shape changes every step.
- Here every layer's keys and values live in one tensor of shape (rows, kv heads, L, head dim)
  allocated once (transformers' ``StaticCache``), with L = prompt width + budget rounded up to a
  multiple of ``CACHE_BUCKET``. Step t writes column ``width + t`` in place. The 2-D attention
  mask is fixed for the whole call (prompt padding, then ones): the causal rule (key index <=
  query index, from the cache's own counter) hides the columns not yet written, so
  softmax gives them weight exactly 0. Every decode step therefore has the same shapes and the
  same tensor addresses, which is what CUDA graphs (``torch.compile(mode="reduce-overhead")``)
  need to replay one captured step instead of launching hundreds of small kernels.

Prefill is unchanged (dynamic cache over the distinct prompts, as in the reference); its keys and
values are then copied once into the static cache, row ``i`` from the prompt that row continues.

Equality with the reference. Prefill is bit-identical. A decode step attends over L keys instead
of ``width + t + 1``; the extra keys get weight 0, but the softmax and the weighted sum reduce
over a longer axis, so logits may differ in the last bits. Greedy decoding (temperature 0) gives
the same tokens unless two logits tie within float rounding, and the log-probs (0 under greedy;
the sampler's log-probs when sampling) agree within float tolerance. Sampling consumes the RNG
exactly as the reference does: ``sample_tokens`` draws one uniform per row from the same
(rows, vocab) shape per step, and the loop stops at the same step. With the same seed the tokens
are the same unless a last-bit difference in a probability moves a draw across a bucket edge
(never seen on the tiny models in float32; in bf16 on GPU expect rare divergences).

Compilation. ``compile=None`` (auto) compiles the decode step with ``mode="reduce-overhead"``
(CUDA graphs) on CUDA and runs it eagerly elsewhere; compiling on CPU is allowed
(``compile=True``) but mostly pays off on GPU. Rows that use LoRA adapters run through the
grouped multi-LoRA forward of ``teamrl.generation.multi_lora``, which keeps its patched
forwards and stacked adapter weights per model and shape and refreshes the weights in place at
each call, so the compiled step replays with LoRA rows too (docs/performance.md, "On GPU",
has what this path measures on a GPU).
Each distinct (rows, cache length) compiles and captures once (cache lengths are bucketed to
``CACHE_BUCKET``); dynamo stops after ``torch._dynamo.config.recompile_limit`` shapes (8 by
default, counted across models) and then runs the step eagerly, so a caller with many shapes
raises that limit (benchmarks/gpu_generation.py sets 64).

``supported(model, requests)`` says whether this path can serve a call; ``generate`` falls back
to the reference loop when it cannot (a sliding-window or hybrid cache layout; per-row adapters
on a LoRA model the grouped forward does not handle, i.e. PEFT's ``adapter_names`` route).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from teamrl.generation import hf as reference
from teamrl.generation import multi_lora
from teamrl.generation.hf import Batch, Decoded
from teamrl.generation.types import Request
from teamrl.tensors import cache_kwargs, output_cache

CACHE_BUCKET = 64  # cache lengths are rounded up to this, so a few sizes serve many calls


def decline_reason(model: torch.nn.Module, requests: list[Request]) -> str | None:
    """Why the fast path cannot serve this call, or None when it can."""
    from transformers.cache_utils import StaticCache, StaticLayer

    config = model.config.get_text_config(decoder=True)
    layers = StaticCache(config=config, max_cache_len=1).layers
    if not all(type(layer) is StaticLayer for layer in layers):
        kinds = sorted({type(layer).__name__ for layer in layers})
        return f"cache layout {kinds}: only full-attention layers are supported"
    if any(r.adapter is not None for r in requests):
        if not multi_lora.supported(model):
            return "per-row adapters need the grouped multi-LoRA forward (plain LoRA linears)"
    return None


def supported(model: torch.nn.Module, requests: list[Request]) -> bool:
    """True when ``generate`` runs the static-cache path for this call (else the reference)."""
    return decline_reason(model, requests) is None


@dataclass
class _State:
    """Per model: the reusable static cache and the (compiled) decode step."""

    cache: object | None = None
    cache_key: tuple | None = None
    compiled: object | None = None


_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def release(model: torch.nn.Module) -> None:
    """Drop the model's reusable static cache and compiled step (frees their memory).

    The cache is kept between calls so that CUDA graphs replay at the same addresses; a trainer
    short of GPU memory for the update can release it after each rollout at the cost of a new
    allocation (and, when compiled, a new capture) at the next call.
    """
    _STATES.pop(model, None)
    multi_lora.release(model)


def _decode_step(model, input_ids, attention_mask, position_ids, cache):
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=True,
        **cache_kwargs(model, cache),
    )
    return out.logits[:, -1]


def _static_cache(model, state: _State, rows: int, length: int, sample_kv: torch.Tensor):
    """A zeroed StaticCache of ``rows`` x ``length``, reused when the shape repeats."""
    from transformers.cache_utils import StaticCache

    key = (rows, length, sample_kv.dtype, sample_kv.device)
    if state.cache_key != key:
        state.cache = StaticCache(
            config=model.config.get_text_config(decoder=True), max_cache_len=length
        )
        state.cache_key = key
    else:
        state.cache.reset()
    return state.cache


@torch.no_grad()
def generate(
    model, requests: list[Request], eos_ids, pad_id, ignore_eos=False, decode=None, compile=None
):
    """``teamrl.generation.hf.generate`` with a static KV cache; see the module docstring.

    ``decode``: the tokenizer's, for stop strings (checked between decode steps, as in the
    reference loop). ``compile``: None = compile the decode step with CUDA graphs on CUDA only;
    True/False force. Falls back to the reference loop when ``supported(model, requests)`` is
    False.
    """
    if not any(r.n for r in requests):
        return []
    if not supported(model, requests):
        return reference.generate(model, requests, eos_ids, pad_id, ignore_eos, decode)
    device = next(model.parameters()).device
    batch = Batch(requests, pad_id, device)  # the same prefill as the reference loop
    if compile is None:
        compile = device.type == "cuda"
    state = _STATES.setdefault(model, _State())
    was_training = model.training
    model.eval()
    try:
        out, position = batch.prefill(model)
        dec = Decoded(batch, eos_ids, pad_id, ignore_eos, device, decode)
        n_rows, width, expand = len(batch.rows), batch.ids.shape[1], batch.expand
        length = -(-(width + dec.max_new) // CACHE_BUCKET) * CACHE_BUCKET
        prefill = output_cache(out)
        cache = _static_cache(model, state, n_rows, length, prefill.layers[0].keys)
        for src, dst in zip(prefill.layers, cache.layers):
            # update() allocates on first use, writes columns 0..width-1, advances the counter.
            dst.update(src.keys.index_select(0, expand), src.values.index_select(0, expand))
        logits, last_pos = out.logits[expand, -1], position[expand, -1]
        del out, prefill
        # Fixed for the whole call: the prompt's padding, then ones (causality hides the rest).
        mask = torch.ones((n_rows, length), dtype=batch.attn.dtype, device=device)
        mask[:, :width] = batch.attn[expand]

        step = _decode_step
        if compile:
            if state.compiled is None:
                state.compiled = torch.compile(_decode_step, mode="reduce-overhead")
            step = state.compiled

        with reference._adapters(model, batch.row_adapters):
            for t in range(dec.max_new):
                if dec.sample(t, logits):
                    break
                last_pos = last_pos + 1
                if compile:
                    torch.compiler.cudagraph_mark_step_begin()
                logits = step(model, dec.tokens[:, t : t + 1], mask, last_pos.unsqueeze(-1), cache)
                if compile:
                    logits = logits.clone()  # the next replay overwrites the graph's output
    finally:
        model.train(was_training)
    return dec.generations()
