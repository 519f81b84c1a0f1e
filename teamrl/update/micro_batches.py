"""Cutting an optimizer step's minibatch into forward chunks (gradient accumulation).

Two bounds, both optional (``train.micro_batch_size``, ``train.max_tokens_per_micro_batch``):

    samples per chunk   <= micro_batch_size
    forward tokens      <= max_tokens_per_micro_batch

The update's activation memory grows with the tokens one forward runs, not with the number of
sequences: a turn whose prompt carries a tool's output can be ten times longer than the first,
and a count of sequences that fits turn 1 does not fit it. The token budget bounds what a
chunk holds whatever the lengths.

A chunk's forward tokens are the positions its scoring computes
(``teamrl.update.losses.score_tokens``):

    packed               sum_u P_u + sum_i C_i    (train.padding_free: one row, each distinct
                                                   prompt once and every completion, no pad;
                                                   teamrl.update.packing)
    prefix sharing       U * P_max + B * C_max    (padded: U distinct prompts, run once each,
                                                   and B completions that read their
                                                   prompt's cache)
    no sharing           B * (P_max + C_max)      (padded under gradient checkpointing, which
                                                   keeps no cache: every sample runs its
                                                   prompt again)

Under the token budget, a minibatch's samples are first put in prompt order (the samples of
one prompt next to each other, prompts in their first-seen order, shortest completion first),
so that a chunk shares as many prompts and pads as little as it can, then packed greedily: a chunk closes when the next sample would take it
past either bound. A sample longer than the budget on its own runs alone (a sequence cannot
be split).

The gradient does not depend on the cut: every loss_type but bnpo weights each chunk by its
share of the minibatch (``policy_loss``), so the chunks' gradients add up to the whole
minibatch's. bnpo is a mean over each chunk's tokens by definition (TRL's), so its update
depends on the chunks, as it does under ``micro_batch_size``.
"""

from __future__ import annotations

from teamrl.sample import Sample
from teamrl.update.packing import packed_tokens


def forward_tokens(chunk: list[Sample], shares_prefix: bool = True, packed: bool = False) -> int:
    """Token positions the scoring forward of ``chunk`` runs (see the module doc)."""
    if not chunk:
        return 0
    if packed:
        return packed_tokens(chunk)
    p_max = max(len(s.prompt_ids) for s in chunk)
    c_max = max(1, max(len(s.completion_ids) for s in chunk))  # collate's width is >= 1
    if not shares_prefix:
        return len(chunk) * (p_max + c_max)
    distinct = len({tuple(s.prompt_ids) for s in chunk})
    return distinct * p_max + len(chunk) * c_max


def by_prompt(samples: list[Sample]) -> list[Sample]:
    """The samples with those of one prompt next to each other, prompts in first-seen order,
    and within a prompt shortest completion first (ties in their own order): a chunk then pads
    its completions to similar lengths, and a long one does not split its prompt's short ones."""
    first: dict[tuple[int, ...], int] = {}
    for s in samples:
        first.setdefault(tuple(s.prompt_ids), len(first))
    return sorted(samples, key=lambda s: (first[tuple(s.prompt_ids)], len(s.completion_ids)))


def micro_batches(
    minibatch: list[Sample],
    max_samples: int | None = None,
    max_tokens: int | None = None,
    shares_prefix: bool = True,
    packed: bool = False,
) -> list[list[Sample]]:
    """The minibatch's forward chunks: at most ``max_samples`` samples and ``max_tokens``
    forward tokens each (None: no bound), ``packed`` counting a packed row's tokens. Without a
    token budget: slices of ``max_samples`` in prompt order (``by_prompt``), the whole
    minibatch as it is when it fits in one."""
    size = max_samples or len(minibatch) or 1
    if max_tokens is None:
        if size >= len(minibatch):
            return [list(minibatch)] if minibatch else []
        ordered = by_prompt(minibatch)  # a prompt split over chunks would run once in each
        return [ordered[i : i + size] for i in range(0, len(ordered), size)]
    chunks: list[list[Sample]] = []
    chunk: list[Sample] = []
    prompts: set[tuple[int, ...]] = set()
    p_max = c_max = 0  # the open chunk's running widths: forward_tokens without a rescan
    total = 0  # the open chunk's packed tokens
    for s in by_prompt(minibatch):
        key = tuple(s.prompt_ids)
        p, c = max(p_max, len(key)), max(c_max, len(s.completion_ids), 1)
        rows = len(chunk) + 1
        if packed:
            tokens = total + (len(key) if key not in prompts else 0) + len(s.completion_ids)
        elif shares_prefix:
            tokens = (len(prompts) + (key not in prompts)) * p + rows * c
        else:
            tokens = rows * (p + c)
        if chunk and (len(chunk) >= size or tokens > max_tokens):
            chunks.append(chunk)
            chunk, prompts = [], set()
            p, c = len(key), max(1, len(s.completion_ids))
            tokens = len(key) + len(s.completion_ids)
        chunk.append(s)
        prompts.add(key)
        p_max, c_max, total = p, c, tokens
    if chunk:
        chunks.append(chunk)
    return chunks


def oversized(
    chunks: list[list[Sample]],
    max_tokens: int | None,
    shares_prefix: bool = True,
    packed: bool = False,
):
    """The longest single-sample chunk over the budget, as (agent, tokens), or None."""
    if max_tokens is None:
        return None
    lone = [(forward_tokens(c, shares_prefix, packed), c[0].agent) for c in chunks if len(c) == 1]
    tokens, agent = max(lone, default=(0, ""))
    return (agent, tokens) if tokens > max_tokens else None
