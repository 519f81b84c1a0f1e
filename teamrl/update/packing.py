"""Packed rows: a micro-batch's sequences in one row, with no pad position anywhere.

The padded update runs each distinct prompt left-padded to the longest prompt and each
completion right-padded to the longest completion. Every pad position passes through every
linear layer, forward and backward, and attends over the padded cache: a micro-batch whose
lengths vary (multi-turn prompts, early EOS) spends a large share of its FLOPs on pads. Here the
micro-batch is one row of T real tokens,

    row       = p_1 c_11 c_12 ... c_1G  p_2 c_21 ...      (each distinct prompt once, then the
                                                           completions that continue it)
    positions = 0 .. P_u - 1 for p_u;  P_u .. P_u + C_i - 1 for each c_i of prompt u
    T         = sum_u P_u + sum_i C_i

so the linear layers run exactly the tokens the loss needs: each prompt once (prefix sharing,
as the padded path's KV cache gives) and each completion once. Position ids restart per
prompt, and every completion's positions continue its prompt's, so rotary embeddings see each
sequence exactly as it was sampled.

Attention is what changes: token t of completion c_i attends to its prompt p_u and to c_i's
own tokens up to t, never to another completion of the same prompt. That is one attention
*segment* per sequence piece:

    prompt segment u      queries p_u,  keys p_u,          causal
    completion segment i  queries c_i,  keys p_u ++ c_i,   causal aligned to the bottom right
                                                           (query t sees keys 0 .. P_u + t)

The queries of the segments are the row itself, in order (each packed token belongs to exactly
one segment); the keys of a completion segment are gathered (one indexed copy per layer: its
prompt's keys are copied, never recomputed, as the padded path copies a prompt's KV cache to
its samples). ``packed_attention`` computes the segments:

- on CUDA, with ``torch.nn.attention.varlen.varlen_attn`` (flash-attention's variable-length
  kernel): queries and keys concatenated per segment, ``cu_seq_q`` / ``cu_seq_k`` their
  offsets, causal with bottom-right alignment: no pad anywhere;
- elsewhere (the CPU), ``scaled_dot_product_attention`` over the segments stacked as batches
  with a boolean mask, the prompts in one and the completions in another (S segments x the
  longest one's queries x its keys): the only pads are inside those attention calls' score
  matrices, never in a linear layer, and the segments are gathered by a constant number of
  indexed copies per layer (the update's count of dispatched operators does not grow with its
  samples).

The function is registered with transformers' attention registry (``AttentionInterface``) and
selected for the update's forward only (``packed_forward``); the model's own implementation
serves everything else. Gradients equal the padded path's: the same tokens, positions and
visible keys (``tests/update/test_packing.py`` compares them in float64).

A one-pass LoRA update (``teamrl.update.joint``) routes each token through its agent's adapter
(``token_route``): a prompt is shared only by the samples of one adapter, as in ``collate``.
"""

from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

import torch

from teamrl.sample import Sample
from teamrl.tensors import to_device

NAME = "teamrl_packed"  # the attention implementation's name in transformers' registry


@dataclass
class SegmentStack:
    """Segments stacked as one attention batch: their query and key positions in the row,
    padded with 0, and the boolean mask of visible (query, key) pairs."""

    q: torch.Tensor  # (S, Lq)
    k: torch.Tensor  # (1, S, Lk): broadcast against the heads' index
    mask: torch.Tensor  # (1, S, Lq, Lk) bool: broadcast over the heads

    def to(self, device: torch.device) -> SegmentStack:
        return SegmentStack(*(to_device(t, device) for t in (self.q, self.k, self.mask)))


def _stack(segments: list[tuple[list[int], list[int]]]) -> SegmentStack:
    """``segments`` (query positions, key positions) as one padded attention batch. Query t of
    a segment sees key j when j <= t + (keys - queries) (causal, aligned to the bottom right);
    a pad query (its output discarded) sees key 0 only, so that its softmax stays finite in the
    backward."""
    lq = max(len(q) for q, _ in segments)
    lk = max(len(k) for _, k in segments)
    mask = [
        [
            [j <= t + (len(k) - len(q)) for j in range(len(k))] + [False] * (lk - len(k))
            if t < len(q)
            else [True] + [False] * (lk - 1)
            for t in range(lq)
        ]
        for q, k in segments
    ]
    n = len(segments)
    return SegmentStack(
        q=torch.tensor([q + [0] * (lq - len(q)) for q, _ in segments]).reshape(n, lq),
        k=torch.tensor([k + [0] * (lk - len(k)) for _, k in segments]).reshape(1, n, lk),
        mask=torch.tensor(mask, dtype=torch.bool).reshape(1, n, lq, lk),
    )


@dataclass
class PackedLayout:
    """Where every token of a packed micro-batch sits (host-built; ``to`` moves it).

    ``keep[n]`` is the row position whose logits predict the n-th completion token (completions
    in sample order, tokens in order); ``rows[n]``, ``cols[n]`` where that token sits in the
    padded (B, C) layout the loss reads."""

    input_ids: torch.Tensor  # (1, T) the packed row
    position_ids: torch.Tensor  # (1, T) restarting at each prompt, continued by its completions
    token_route: torch.Tensor | None  # (1, T) adapter index of each token (one-pass LoRA), or None
    keep: torch.Tensor  # (N,) positions whose logits are scored
    target_ids: torch.Tensor  # (N,) the completion token each of them predicts
    rows: torch.Tensor  # (N,) its sample
    cols: torch.Tensor  # (N,) its column in the sample's completion
    # attention segments: key positions of every segment, concatenated (a completion segment's
    # are its prompt's then its own), and each segment's query/key lengths
    key_positions: list[int]
    q_lens: list[int]
    k_lens: list[int]
    # the segments stacked as batches (the CPU path), prompts in one and completions in the
    # other (each padded to its own longest, so a long prompt does not pad every completion)
    stacks: list[SegmentStack]
    # where each row position's output is in the stacks' flattened outputs, concatenated
    stack_out: torch.Tensor  # (T,)
    # the CUDA path's tensors, made by ``to`` a CUDA device: the key positions, and the
    # cumulative query and key lengths (varlen offsets)
    key_index: torch.Tensor | None = None  # (sum of key lengths,)
    cu_q: torch.Tensor | None = None  # (S + 1,) int32
    cu_k: torch.Tensor | None = None  # (S + 1,) int32

    # per (heads, groups, device): the key/value head of each query head, (H, 1, 1), made once
    # per forward rather than once per layer
    _heads: dict = field(default_factory=dict, repr=False)

    @property
    def tokens(self) -> int:
        return self.input_ids.shape[1]

    def heads(self, n: int, groups: int, device: torch.device) -> torch.Tensor:
        key = (n, groups, device)
        if key not in self._heads:
            self._heads[key] = (torch.arange(n, device=device) // groups).view(n, 1, 1)
        return self._heads[key]

    def to(self, device: torch.device) -> PackedLayout:
        """The layout on ``device``; on CUDA with the variable-length kernel's tensors."""
        if torch.device(device).type == "cuda" and self.key_index is None:
            cu_q, cu_k = [0], [0]
            for nq, nk in zip(self.q_lens, self.k_lens):
                cu_q.append(cu_q[-1] + nq)
                cu_k.append(cu_k[-1] + nk)
            self.key_index = torch.tensor(self.key_positions, dtype=torch.long)
            self.cu_q = torch.tensor(cu_q, dtype=torch.int32)
            self.cu_k = torch.tensor(cu_k, dtype=torch.int32)
        moved = {}
        for f in fields(self):
            if f.name == "_heads":
                continue
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor):
                v = to_device(v, device)
            elif f.name == "stacks":  # SegmentStack.to
                v = [stack.to(device) for stack in v]
            moved[f.name] = v
        return PackedLayout(**moved)


def packed_tokens(samples: list[Sample], route: list[int] | None = None) -> int:
    """Tokens of the packed row of ``samples``: each distinct (adapter, prompt) once, and every
    completion (what a packed micro-batch's forward runs; ``teamrl.update.micro_batches``)."""
    keys = {(0 if route is None else route[i], tuple(s.prompt_ids)) for i, s in enumerate(samples)}
    return sum(len(p) for _, p in keys) + sum(len(s.completion_ids) for s in samples)


def pack(samples: list[Sample], route: list[int] | None = None) -> PackedLayout:
    """The packed layout of ``samples`` (module docstring), built in Python lists and made into
    one tensor per field: no operation is dispatched per sample."""
    groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault((0 if route is None else route[i], tuple(s.prompt_ids)), []).append(i)
    ids: list[int] = []
    pos: list[int] = []
    token_route: list[int] = []
    keep: list[int] = []
    target: list[int] = []
    row_of: list[int] = []
    col_of: list[int] = []
    segments: list[tuple[list[int], list[int]]] = []  # (query positions, key positions)
    by_sample: dict[int, tuple[int, int, int]] = {}  # sample -> (prompt start, P, its start)
    for (adapter, prompt), members in groups.items():
        if not prompt:
            raise ValueError(
                "packed scoring: a sample with an empty prompt has nothing to condition on"
            )
        start, p = len(ids), len(prompt)
        ids += prompt
        pos += range(p)
        token_route += [adapter] * p
        prompt_keys = list(range(start, start + p))
        segments.append((prompt_keys, prompt_keys))
        for i in members:
            comp = list(samples[i].completion_ids)
            own = len(ids)
            ids += comp
            pos += range(p, p + len(comp))
            token_route += [adapter] * len(comp)
            by_sample[i] = (start, p, own)
            if comp:
                mine = list(range(own, own + len(comp)))
                segments.append((mine, prompt_keys + mine))
    for i, s in enumerate(samples):  # scored tokens in sample order (the loss's rows)
        start, p, own = by_sample[i]
        n = len(s.completion_ids)
        keep += [start + p - 1] + list(range(own, own + n - 1)) if n else []
        target += list(s.completion_ids)
        row_of += [i] * n
        col_of += range(n)
    q_lens = [len(q) for q, _ in segments]
    k_lens = [len(k) for _, k in segments]
    kinds = [
        [sg for sg in segments if sg[0] is sg[1]],
        [sg for sg in segments if sg[0] is not sg[1]],
    ]
    stacks = [_stack(kind) for kind in kinds if kind]
    out = [0] * len(ids)
    offset = 0
    for stack, kind in zip(stacks, kinds):
        lq = stack.q.shape[1]
        for s, (q, _) in enumerate(kind):
            for t, position in enumerate(q):
                out[position] = offset + s * lq + t
        offset += len(kind) * lq
    t_len = len(ids)
    long = torch.long
    return PackedLayout(
        input_ids=torch.tensor(ids, dtype=long).reshape(1, t_len),
        position_ids=torch.tensor(pos, dtype=long).reshape(1, t_len),
        token_route=None if route is None else torch.tensor(token_route).reshape(1, t_len),
        keep=torch.tensor(keep, dtype=long),
        target_ids=torch.tensor(target, dtype=long),
        rows=torch.tensor(row_of, dtype=long),
        cols=torch.tensor(col_of, dtype=long),
        key_positions=[j for _, k in segments for j in k],
        q_lens=q_lens,
        k_lens=k_lens,
        stacks=stacks,
        stack_out=torch.tensor(out, dtype=long),
    )


@functools.cache
def _varlen():
    """``varlen_attn`` where this torch has it with the arguments used here (a causal window
    aligned to the bottom right, grouped-query heads), else None: the stacked path then serves
    CUDA too."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    return varlen_attn if {"window_size", "enable_gqa"} <= params.keys() else None


def packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    packed: PackedLayout | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention over a packed row's segments (module docstring), in transformers' attention
    signature: query (1, H, T, D), key and value (1, H_kv, T, D); returns (1, T, H, D)."""
    if packed is None:
        raise ValueError("packed attention: the forward was called without its packed layout")
    if dropout:
        raise ValueError(f"packed attention: attention dropout {dropout} (the update runs without)")
    groups = query.shape[1] // key.shape[1]
    varlen = _varlen() if query.is_cuda and query.dtype in (torch.float16, torch.bfloat16) else None
    if varlen is not None:
        q = query[0].transpose(0, 1)  # (T, H, D): the segments' queries are the row, in order
        k = key[0].transpose(0, 1)[packed.key_index]  # (sum k_lens, H_kv, D)
        v = value[0].transpose(0, 1)[packed.key_index]
        out = varlen(
            q,
            k,
            v,
            packed.cu_q,
            packed.cu_k,
            max(packed.q_lens),
            max(packed.k_lens),
            scale=scaling,
            window_size=(-1, 0),  # causal, aligned to the bottom right
            enable_gqa=groups > 1,
        )
        return out.unsqueeze(0), None
    # each stack of segments as a batch, heads leading: queries (H, S, Lq, D) by one indexed
    # copy, keys and values (H, S, Lk, D) by one each (a key/value head copied to each of its
    # query heads under grouped-query attention), the mask (1, S, Lq, Lk) broadcast over heads
    q_all, k_all, v_all = query.squeeze(0), key.squeeze(0), value.squeeze(0)
    heads = packed.heads(query.shape[1], groups, query.device)
    flat = []
    for stack in packed.stacks:
        q = q_all[:, stack.q]
        k = k_all[heads, stack.k]
        v = v_all[heads, stack.k]
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=stack.mask, scale=scaling
        )  # (H, S, Lq, D)
        flat.append(out.flatten(1, 2))
    flat = flat[0] if len(flat) == 1 else torch.cat(flat, dim=1)  # (H, slots, D)
    return flat[:, packed.stack_out].transpose(0, 1).unsqueeze(0), None


def _no_mask(*args, **kwargs) -> None:
    """The mask builder for ``NAME``: the layout, not a mask, says what each token sees."""
    return None


def register() -> None:
    """Put ``packed_attention`` in transformers' registries (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, packed_attention)
    AttentionMaskInterface.register(NAME, _no_mask)


def _configs(model: torch.nn.Module) -> list:
    """Every config the model's attention layers read ``_attn_implementation`` from."""
    seen, out = set(), []
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and id(cfg) not in seen and hasattr(cfg, "_attn_implementation"):
            seen.add(id(cfg))
            out.append(cfg)
    return out


@contextmanager
def packed_forward(model: torch.nn.Module):
    """Within the block, the model's attention layers compute ``packed_attention``; its own
    implementation is back on exit (exceptions included)."""
    register()
    configs = _configs(model)
    before = [cfg._attn_implementation for cfg in configs]
    try:
        for cfg in configs:
            cfg._attn_implementation = NAME
        yield
    finally:
        for cfg, name in zip(configs, before):
            cfg._attn_implementation = name
