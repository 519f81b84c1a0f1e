"""The ``hf`` backend: batched sampling with a KV cache over the trainer's live model.

One call covers every agent, sample and prompt of an engine (a model object).

Why our own loop rather than ``model.generate``: every row may carry its own temperature,
top-p, top-k and token budget (agents differ), its own LoRA adapter (PEFT mixed-adapter
batches), and we need the sampler's log-prob of each chosen token. The loop is the standard
one: prefill the left-padded prompts, then decode one token per step for all rows.

Layout: prompts are left-padded, completions right-padded; ``completion_mask`` covers the real
tokens up to and including EOS and never a pad. A row that reaches its budget without EOS is
truncated (``truncated=True``) and its mask covers all its tokens.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from teamrl.generation.types import Generation, Request
from teamrl.tensors import left_pad

if TYPE_CHECKING:  # backend.py imports this module lazily (make_backend)
    from teamrl.generation.backend import EngineSpec


@contextmanager
def _adapters(model: torch.nn.Module, adapters: list[str | None]):
    """Per-row LoRA adapters: our grouped forward when possible, else PEFT's adapter_names."""
    if all(a is None for a in adapters):
        yield {}
        return
    from teamrl.generation import multi_lora

    if multi_lora.supported(model):
        with multi_lora.grouped_lora(model, adapters):
            yield {}
    else:
        yield {"adapter_names": [a or "__base__" for a in adapters]}


def sample_tokens(
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row sampling. Returns (tokens, log-prob of each token under the sampling distribution).

    Rows with temperature 0 take the argmax (log-prob 0 under the greedy policy). An all-greedy
    batch draws nothing from the RNG, so a greedy eval leaves the training sample stream as is.
    """
    logits = logits.float()
    greedy = temperature <= 0
    if bool(greedy.all()):
        return logits.argmax(-1), torch.zeros(logits.shape[0], device=logits.device)
    scaled = logits / temperature.clamp_min(1e-6).unsqueeze(-1)
    if bool((top_k > 0).any()) or bool((top_p < 1).any()):
        scaled = scaled.masked_fill(~truncation_keep(scaled, top_p, top_k), float("-inf"))
    logp = F.log_softmax(scaled, dim=-1)
    sampled = torch.multinomial(logp.exp(), 1).squeeze(-1)
    tokens = torch.where(greedy, logits.argmax(-1), sampled)
    token_logp = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return tokens, torch.where(greedy, torch.zeros_like(token_logp), token_logp)


def truncation_keep(scaled: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Which tokens of each row of (temperature-scaled) logits the sampler may draw: the top_k
    largest (top_k > 0), then the smallest prefix of the sorted rest whose mass reaches top_p
    (a token is dropped when the mass strictly before it already reaches top_p; >= 1 kept)."""
    keep = torch.ones_like(scaled, dtype=torch.bool)
    if bool((top_k > 0).any()):
        kth = torch.topk(scaled, int(top_k.max()), dim=-1).values
        thresh = kth.gather(-1, (top_k.clamp_min(1) - 1).unsqueeze(-1))
        keep &= ~((scaled < thresh) & (top_k > 0).unsqueeze(-1))
    if bool((top_p < 1).any()):
        masked = scaled.masked_fill(~keep, float("-inf"))
        sorted_logits, order = torch.sort(masked, descending=True, dim=-1)
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs
        drop_sorted = before >= top_p.unsqueeze(-1)
        keep &= ~torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return keep


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    requests: list[Request],
    eos_ids: list[int],
    pad_id: int,
    ignore_eos: bool = False,
) -> list[list[Generation]]:
    """Sample for every request in one batched call; returns ``n`` generations per request."""
    rows = [(r, k) for r in requests for k in range(r.n)]
    if not rows:
        return []
    device = next(model.parameters()).device
    # Prefill each distinct (prompt, adapter) once, then copy its KV cache to every sample row
    # that continues it (prefix sharing across samples and across identical requests).
    distinct: dict[tuple, int] = {}
    row_prefix = [
        distinct.setdefault((tuple(r.prompt_ids), r.adapter), len(distinct)) for r, _ in rows
    ]
    ids, attn = left_pad([list(p) for p, _ in distinct], pad_id)
    ids, attn = ids.to(device), attn.to(device)
    expand = torch.tensor(row_prefix, device=device)
    temp = torch.tensor([r.temperature for r, _ in rows], device=device)
    top_p = torch.tensor([r.top_p for r, _ in rows], device=device)
    top_k = torch.tensor([r.top_k for r, _ in rows], device=device)
    budget = torch.tensor([r.max_new_tokens for r, _ in rows], device=device)
    eos = torch.tensor(eos_ids, device=device)
    was_training = model.training
    model.eval()
    try:
        with _adapters(model, [a for _, a in distinct]) as kw:
            position = (attn.cumsum(-1) - 1).clamp_min(0)
            out = model(
                input_ids=ids,
                attention_mask=attn,
                position_ids=position,
                use_cache=True,
                logits_to_keep=1,
                **kw,
            )
        cache = out.past_key_values
        if not torch.equal(expand, torch.arange(len(distinct), device=device)):
            cache.reorder_cache(expand)
        logits, attn, last_pos = out.logits[expand, -1], attn[expand], position[expand, -1]
        del out

        n_rows, max_new = len(rows), int(budget.max())
        tokens = torch.full((n_rows, max_new), pad_id, dtype=torch.long, device=device)
        logps = torch.zeros((n_rows, max_new), device=device)
        done = torch.zeros(n_rows, dtype=torch.bool, device=device)
        lengths = torch.zeros(n_rows, dtype=torch.long, device=device)
        ones = torch.ones((n_rows, 1), dtype=attn.dtype, device=device)
        with _adapters(model, [r.adapter for r, _ in rows]) as kw:
            for t in range(max_new):
                tok, lp = sample_tokens(logits, temp, top_p, top_k)
                active = ~done
                tokens[:, t] = torch.where(active, tok, torch.full_like(tok, pad_id))
                logps[:, t] = torch.where(active, lp, torch.zeros_like(lp))
                lengths += active.long()
                hit_eos = torch.isin(tok, eos) & (not ignore_eos)
                done = done | (active & (hit_eos | (lengths >= budget)))
                if bool(done.all()):
                    break
                attn = torch.cat([attn, ones], dim=1)
                last_pos = last_pos + 1
                out = model(
                    input_ids=tokens[:, t : t + 1],
                    attention_mask=attn,
                    position_ids=last_pos.unsqueeze(-1),
                    past_key_values=cache,
                    use_cache=True,
                    **kw,
                )
                cache, logits = out.past_key_values, out.logits[:, -1]
    finally:
        model.train(was_training)

    tokens, logps, lengths = tokens.cpu(), logps.cpu(), lengths.cpu()
    results: list[list[Generation]] = [[] for _ in requests]
    owner = {id(r): i for i, r in enumerate(requests)}
    for row, (req, _) in enumerate(rows):
        n = int(lengths[row])
        comp = tokens[row, :n].tolist()
        ended = bool(n) and comp[-1] in eos_ids and not ignore_eos
        results[owner[id(req)]].append(
            Generation(
                prompt_ids=list(req.prompt_ids),
                completion_ids=comp,
                logprobs=logps[row, :n].tolist(),
                truncated=not ended,
            )
        )
    return results


class HFBackend:
    """Samples from ``spec.model`` itself, so it always sees the weights the trainer just
    stepped: ``weights_changed`` has nothing to do."""

    name = "hf"

    def __init__(self, spec: EngineSpec, fast_decode: str = "off"):
        self.spec = spec
        on_cuda = str(spec.device).startswith("cuda")
        self.fast = fast_decode == "on" or (fast_decode == "auto" and on_cuda)

    def generate(self, requests: list[Request], ignore_eos: bool = False) -> list[list[Generation]]:
        s = self.spec
        if self.fast:  # static KV cache + compiled decode; declines (eager loop) where unsupported
            from teamrl.generation import fast_decode

            return fast_decode.generate(s.model, requests, s.eos_ids, s.pad_id, ignore_eos)
        return generate(s.model, requests, s.eos_ids, s.pad_id, ignore_eos)

    def weights_changed(self, adapter: str | None) -> None:
        pass  # the live model is the sampler's model
