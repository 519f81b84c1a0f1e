"""A micro-batch as the update scores it: ``collate`` turns samples into a ``Batch``, the
padded (B, C) fields the loss reads and, for the forward, either the padded prompt and
completion tensors or a packed row (``teamrl.update.packing``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from teamrl.sample import Sample
from teamrl.tensors import left_pad, to_device
from teamrl.update.packing import PackedLayout, pack


@dataclass
class Batch:
    # the padded forward's inputs (None in a packed batch, whose forward reads ``packed``)
    prompt_ids: torch.Tensor | None  # (U, P) distinct prompts, left-padded
    prompt_mask: torch.Tensor | None  # (U, P)
    prompt_index: torch.Tensor | None  # (B,) which distinct prompt each sample continues
    completion_ids: torch.Tensor | None  # (B, C) right-padded
    completion_mask: torch.Tensor  # (B, C) float, 1 on real tokens through EOS, 0 on pads
    advantages: torch.Tensor  # (B,), or (B, C) when a sample has per-token advantages
    temperatures: torch.Tensor  # (B,)
    sampler_logprobs: torch.Tensor  # (B, C)
    truncated: torch.Tensor  # (B,) float, 1 when the completion hit its budget without EOS
    top_p: torch.Tensor  # (B,) the sampler's nucleus mass (used by truncated scoring)
    top_k: torch.Tensor  # (B,) long, the sampler's top-k (0 = off)
    # What the host knows from the samples, so that scoring never asks the device: every
    # temperature is 1 (no division of the logits), and prompt row i is sample i's (no copy of
    # the prompts' KV cache to the samples)
    unit_temperature: bool = False
    prompts_in_order: bool = False
    # which adapter each prompt row and each sample row runs through (indices into the adapters
    # of a one-pass LoRA update, teamrl.update.joint); None: the model's active adapter
    prompt_route: torch.Tensor | None = None
    row_route: torch.Tensor | None = None
    # the largest top_k and whether some top_p < 1, when known on the host (truncation_keep)
    max_top_k: int | None = None
    nucleus: bool | None = None
    # the packed row the forward runs instead of the padded tensors above (train.padding_free,
    # teamrl.update.packing); the loss still reads the (B, C) fields
    packed: PackedLayout | None = None

    def to(self, device: torch.device) -> Batch:
        """The batch on ``device``, its host tensors queued there without a wait (to_device)."""

        def moved(v):
            if isinstance(v, torch.Tensor):
                return to_device(v, device)
            return v.to(device) if isinstance(v, PackedLayout) else v

        return Batch(**{k: moved(v) for k, v in self.__dict__.items()})


def collate(
    samples: list[Sample],
    pad_id: int,
    route: list[int] | None = None,
    packed: bool = False,
    top_p: list[float] | None = None,
    top_k: list[int] | None = None,
) -> Batch:
    """Pad samples into a batch, with each row's sampler truncation ``top_p`` and ``top_k``
    (what truncated scoring re-applies; default none: top_p 1, top_k 0).

    ``route``: each sample's adapter index (a one-pass LoRA update): a prompt is then shared
    only by the samples of one adapter, since its forward runs through that adapter.
    ``packed``: the forward runs the samples as one packed row with no pads
    (``teamrl.update.packing``); the (B, C) fields the loss reads are the same.

    Padded in Python and made one tensor per field: a row-by-row copy would dispatch
    operations per sample (the update's op count does not grow with its samples)."""
    b = len(samples)
    width = max(1, max(len(s.completion_ids) for s in samples))
    pads = [width - len(s.completion_ids) for s in samples]
    mask = [[1.0] * len(s.completion_ids) + [0.0] * k for s, k in zip(samples, pads)]
    sampler = [list(s.sampler_logprobs) + [0.0] * k for s, k in zip(samples, pads)]
    temperatures = [max(s.temperature, 1e-6) for s in samples]
    known = top_p is not None and top_k is not None  # the host knows the sets' bounds
    top_p = [1.0] * b if top_p is None else top_p
    top_k = [0] * b if top_k is None else top_k
    batch = Batch(
        prompt_ids=None,
        prompt_mask=None,
        prompt_index=None,
        completion_ids=None,
        completion_mask=torch.tensor(mask).reshape(b, width),
        advantages=_advantages(samples, width),
        temperatures=torch.tensor(temperatures),
        sampler_logprobs=torch.tensor(sampler).reshape(b, width),
        truncated=torch.tensor([float(s.truncated) for s in samples]),
        top_p=torch.tensor(top_p, dtype=torch.float32),
        top_k=torch.tensor(top_k, dtype=torch.long),
        unit_temperature=all(t == 1 for t in temperatures),
        max_top_k=max(top_k) if known else None,
        nucleus=any(p < 1 for p in top_p) if known else None,
    )
    if packed:  # the forward's inputs: one row (its layout holds the completion tokens)
        batch.packed = pack(samples, route)
        return batch
    keys = [(0 if route is None else route[i], tuple(s.prompt_ids)) for i, s in enumerate(samples)]
    distinct: dict[tuple[int, tuple[int, ...]], int] = {}
    index = [distinct.setdefault(k, len(distinct)) for k in keys]
    batch.prompt_ids, batch.prompt_mask = left_pad([list(p) for _, p in distinct], pad_id)
    batch.prompt_index = torch.tensor(index, dtype=torch.long)
    comp = [list(s.completion_ids) + [pad_id] * k for s, k in zip(samples, pads)]
    batch.completion_ids = torch.tensor(comp, dtype=torch.long).reshape(b, width)
    batch.prompts_in_order = index == list(range(len(distinct)))
    if route is not None:
        batch.prompt_route = torch.tensor([r for r, _ in distinct])
        batch.row_route = torch.tensor(route)
    return batch


def _advantages(samples: list[Sample], width: int) -> torch.Tensor:
    """(B,) one advantage per sample, or (B, C) when any sample carries one per token (a
    token-level critic): the others' then fill their row, pads stay 0."""
    if all(s.token_advantages is None for s in samples):
        return torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    rows = []
    for s in samples:
        n = len(s.completion_ids)
        if s.token_advantages is None:
            rows.append([s.advantage] * n + [0.0] * (width - n))
        elif len(s.token_advantages) != n:
            raise ValueError(
                f"sample of agent {s.agent!r}: {len(s.token_advantages)} token advantages for "
                f"{n} completion tokens"
            )
        else:
            rows.append(list(s.token_advantages) + [0.0] * (width - n))
    return torch.tensor(rows, dtype=torch.float32).reshape(len(samples), width)


def loss_mask(batch: Batch, mask_truncated_completions: bool) -> torch.Tensor:
    """The tokens that enter the loss: the completion mask, without the rows cut at their
    budget when ``mask_truncated_completions`` (DAPO's overlong filtering, TRL's name)."""
    if not mask_truncated_completions:
        return batch.completion_mask
    return batch.completion_mask * (1 - batch.truncated)[:, None]
