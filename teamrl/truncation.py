"""The sampler's truncated distribution: which tokens top-k and top-p leave drawable.

Shared by every sampler (``teamrl.generation``) and by the loss that scores completions under
the sampler's own distribution (``truncated_scoring`` in ``teamrl.update.losses``), so the
loss depends on this maths and on no generation backend.
"""

from __future__ import annotations

import torch


def truncation_keep(
    scaled: torch.Tensor,
    top_p: torch.Tensor,
    top_k: torch.Tensor,
    max_k: int | None = None,
    nucleus: bool | None = None,
) -> torch.Tensor:
    """Which tokens of each row of (temperature-scaled) logits the sampler may draw: the top_k
    largest (top_k > 0), then the smallest prefix of the sorted rest whose mass reaches top_p
    (a token is dropped when the mass strictly before it already reaches top_p; >= 1 kept).

    ``max_k`` (the largest top_k) and ``nucleus`` (some top_p < 1), when the caller knows them
    on the host (the update does, from its settings), spare two reads of the device."""
    keep = torch.ones_like(scaled, dtype=torch.bool)
    if max_k is None:
        max_k = int(top_k.max()) if bool((top_k > 0).any()) else 0
    if max_k > 0:
        kth = torch.topk(scaled, max_k, dim=-1).values
        thresh = kth.gather(-1, (top_k.clamp_min(1) - 1).unsqueeze(-1))
        keep &= ~((scaled < thresh) & (top_k > 0).unsqueeze(-1))
    if nucleus is None:
        nucleus = bool((top_p < 1).any())
    if nucleus:
        masked = scaled.masked_fill(~keep, float("-inf"))
        sorted_logits, order = torch.sort(masked, descending=True, dim=-1)
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs
        drop_sorted = before >= top_p.unsqueeze(-1)
        keep &= ~torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return keep
