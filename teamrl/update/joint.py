"""One forward/backward for every agent's LoRA adapter (``team.policies=lora``).

The agents' policies share one frozen base and differ only in their adapters, so a step of all
of them can run as one pass: each row of the batch through the base and its own adapter
(the grouped multi-LoRA forward that sampling uses, ``teamrl.generation.multi_lora``, written
here again with a backward: the update stands below no generation backend),

    y = x W^T + ((x A^T) * M) B^T,   A = [A_1; ...; A_K],  B = [B_1, ..., B_K],
    M_i = s_a(i) on the r columns of row i's adapter a(i), 0 elsewhere,

and the loss of the pass is the sum of the agents' losses, each over its own rows with its own
denominators (``policy_loss``'s, exactly as in its own update). The gradient of adapter k is
then exactly its own update's: no other agent's loss depends on A_k or B_k (another row's
entries of M in block k are 0, so its terms are exactly 0, and the base is frozen), and its
own rows compute the same function as in a pass of their own. Only the order of float sums
differs (a wider batch, a product over K r columns of which r are non-zero).

How the agents' updates line up: each agent keeps its own passes, shuffles, minibatches and
chunks (``plan_passes``, ``UpdateRun.chunks``, with its own ``num_iterations``). Optimizer step
(pass it, minibatch j) of every agent that has one runs together; chunk c of each agent's
minibatch joins the c-th joint forward. An agent with fewer passes, minibatches or chunks drops
out of the later ones. Each agent's optimizer then steps on its own gradients with its own
learning rate, and its NaN check, skips and statistics are its own.

Where the grouping cannot apply the agents update one after the other (``update_policy``), and
``joint_blocker`` names why (the execution logs it once): policies that do not share one
LoRA model, sharded (FSDP) policies or data parallel ranks, gradient (activation)
checkpointing (the recomputing backward would not see the rows' routing), LoRA layers the
grouped forward does not compute (DoRA, non-linear targets, a bias on B), LoRA dropout in
training, update settings that differ between the agents beyond their iterations and sampler
truncation. Ray worker groups (``distributed.enabled``) update each policy on its own group and
never come here.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager, nullcontext

import torch

from teamrl.distributed import DistContext
from teamrl.sample import Sample
from teamrl.tensors import lora_branch_dtype
from teamrl.update.losses import Batch, Denominators, Scores, collate, drops_kv_cache, score_tokens
from teamrl.update.micro_batches import forward_tokens
from teamrl.update.packing import packed_forward, packed_tokens
from teamrl.update.policy import (
    Minibatch,
    UpdateResult,
    UpdateRun,
    apply_step,
    begin_step,
    chunk_loss,
    plan_passes,
    prepare,
    step_finite,
)
from teamrl.update.settings import UpdateSettings

# the batch's per-row fields (the prompts' are shared by the rows and not sliced)
ROW_FIELDS = (
    "completion_ids",
    "completion_mask",
    "advantages",
    "temperatures",
    "sampler_logprobs",
    "truncated",
    "top_p",
    "top_k",
    "row_route",
)


def joint_blocker(pols: list, settings: list[UpdateSettings], ctx: DistContext | None) -> str:
    """Why these policies cannot update in one pass ('' when they can)."""
    engines = {id(p.engine) for p in pols}
    if len(engines) != 1 or any(p.adapter is None for p in pols):
        return "the policies do not share one LoRA model"
    if any(p.sharded for p in pols) or (ctx is not None and ctx.world_size > 1):
        return "sharded or data parallel policies"
    model = pols[0].model
    if drops_kv_cache(model) or getattr(model, "is_gradient_checkpointing", False):
        return "gradient checkpointing is on"
    if not _plain_lora(model):
        return "a LoRA layer the grouped forward does not compute (DoRA, a non-linear target)"
    shared = [dataclasses.replace(s, num_iterations=1, top_p={}, top_k={}) for s in settings]
    if any(s != shared[0] for s in shared):
        return "the agents' update settings differ beyond num_iterations and top_p/top_k"
    if not settings[0].disable_dropout and any(
        m.p > 0 for m in model.modules() if isinstance(m, torch.nn.Dropout)
    ):
        return "dropout is on in training (algorithm.disable_dropout=false)"
    return ""


def _lora_layers(model: torch.nn.Module) -> list:
    from peft.tuners.lora.layer import LoraLayer

    return [m for m in model.modules() if isinstance(m, LoraLayer)]


def _plain_lora(model: torch.nn.Module) -> bool:
    """Every LoRA layer a plain ``nn.Linear`` one the routed forward computes exactly: no DoRA,
    no bias on B, no other variant, no embedding or conv target."""
    from peft.tuners.lora.layer import Linear

    layers = _lora_layers(model)
    return bool(layers) and all(
        isinstance(m, Linear)
        and type(m.base_layer) is torch.nn.Linear
        and not any(m.use_dora.values())
        and not any(getattr(m, "lora_bias", {}).values())
        and not getattr(m, "lora_variant", {})
        for m in layers
    )


@contextmanager
def routed_lora(model: torch.nn.Module, names: list[str], lora_compute_dtype: str = "adapter"):
    """Within the block, every LoRA linear of ``model`` computes each row through the adapter
    ``names[route[i]]`` inside a ``route(rows)`` context (yielded); outside one, or with the
    adapters disabled (the KL reference), PEFT's own forward. Differentiable in every
    adapter's A and B (the stacks are concatenated in the graph at each call). The branch's
    products in ``lora_compute_dtype``'s dtype (``teamrl.tensors.lora_branch_dtype``): under
    'model' the stacks are cast to x's dtype in the graph, so their gradients come back in
    fp32."""
    current: dict[str, torch.Tensor | None] = {"rows": None}
    patched = []
    try:
        for layer in _lora_layers(model):
            ranks = [layer.lora_A[n].weight.shape[0] for n in names]
            w = layer.lora_A[names[0]].weight
            # row k: adapter k's scale on its own r columns (M's row for a row of adapter k)
            table = torch.zeros(len(names), sum(ranks), dtype=w.dtype, device=w.device)
            offset = 0
            for k, (n, r) in enumerate(zip(names, ranks)):
                table[k, offset : offset + r] = layer.scaling[n]
                offset += r
            layer.forward = _routed_forward(layer, names, table, current, lora_compute_dtype)
            patched.append(layer)

        @contextmanager
        def route(rows: torch.Tensor | None):
            current["rows"] = rows
            try:
                yield
            finally:
                current["rows"] = None

        yield route
    finally:
        for layer in patched:
            del layer.forward


def _routed_forward(layer, names: list[str], table: torch.Tensor, current: dict, setting: str):
    def forward(x, *args, **kwargs):
        rows = current["rows"]
        if rows is None or layer.disable_adapters or args or kwargs:
            return type(layer).forward(layer, x, *args, **kwargs)  # PEFT's own
        a = torch.cat([layer.lora_A[n].weight for n in names], dim=0)  # (K r, d_in)
        b = torch.cat([layer.lora_B[n].weight for n in names], dim=1)  # (d_out, K r)
        dtype = lora_branch_dtype(setting, x.dtype, a.dtype)
        a, b = a.to(dtype), b.to(dtype)  # r x d casts in the graph (none when they agree)
        mask = table[rows].to(dtype)  # (rows, K r), or (1, T, K r) for a packed row's tokens
        if rows.dim() == 1:
            mask = mask.view(mask.shape[0], *([1] * (x.dim() - 2)), -1)
        low = (x.to(a.dtype) @ a.T) * mask
        y = layer.base_layer(x)
        if y.dtype == low.dtype:
            return y + low @ b.T
        return (y.to(low.dtype) + low @ b.T).to(x.dtype)  # PEFT: summed in the adapters' dtype

    return forward


def update_policies(
    pols: list,
    samples: list[list[Sample]],
    settings: list[UpdateSettings],
    *,
    step: int,
    max_completion_length: list[int],
    ctx: DistContext | None = None,
) -> list[UpdateResult]:
    """Update the LoRA policies ``pols`` (one model) on their samples in joint passes (module
    docstring); ``joint_blocker`` must have said ''. One result per policy, in order."""
    width = max(len(s.completion_ids) for ss in samples for s in ss)
    runs = [prepare(p, ss, u, ctx, width=width) for p, ss, u in zip(pols, samples, settings)]
    for pol in pols:  # PEFT's set_adapter (prepare's activate) froze the other adapters
        for param in pol.parameters():
            param.requires_grad_(True)
    passes = [plan_passes(ss, u, step) for ss, u in zip(samples, settings)]
    skipped, stepped = [0] * len(pols), [False] * len(pols)
    names, dtype_setting = [p.adapter for p in pols], settings[0].lora_compute_dtype
    packed = packed_forward(pols[0].model) if settings[0].padding_free else nullcontext()
    with routed_lora(pols[0].model, names, dtype_setting) as route, packed:
        _old_logprobs(runs, passes, route)
        for it in range(max(len(p) for p in passes)):
            width_j = max(len(p[it]) for p in passes if it < len(p))
            for j in range(width_j):
                active = [k for k, p in enumerate(passes) if it < len(p) and j < len(p[it])]
                mbs = {k: passes[k][it][j] for k in active}
                first = it == 0 and j == 0
                marks = {k: {key: len(v) for key, v in runs[k].stats.items()} for k in active}
                _accumulate(runs, mbs, it, first, max_completion_length, route)
                flags = step_finite([runs[k] for k in active], step, it)
                if any(flags) and not all(flags):
                    # a non-finite loss reaches every adapter's gradient through the shared
                    # pass (0 * NaN in the other rows' terms): the finite agents' step runs
                    # again without it, its first statistics dropped (a rare, counted event)
                    redo = {k: mbs[k] for k, ok in zip(active, flags) if ok}
                    for k in redo:
                        for key, n in marks[k].items():
                            del runs[k].stats[key][n:]
                    _accumulate(runs, redo, it, first, max_completion_length, route)
                    again = dict(zip(redo, step_finite([runs[k] for k in redo], step, it)))
                    flags = [again.get(k, False) for k in active]
                for k, finite in zip(active, flags):
                    if apply_step(runs[k], finite):
                        stepped[k] = True
                    else:
                        skipped[k] += 1
    return [UpdateResult(r.metrics(), n, s) for r, n, s in zip(runs, skipped, stepped)]


def _joint_batch(runs: list[UpdateRun], parts: dict[int, Minibatch]) -> Batch:
    """One batch of every agent's rows, agent after agent, each routed to its adapter."""
    rows = [s for k in parts for s in parts[k]]
    route = [k for k in parts for _ in parts[k]]
    top_p = [runs[k].settings.top_p[s.agent] for k in parts for s in parts[k]]
    top_k = [runs[k].settings.top_k[s.agent] for k in parts for s in parts[k]]
    packed, pad = runs[0].settings.padding_free, runs[0].pol.engine.pad_id
    batch = collate(rows, pad, route, packed=packed, top_p=top_p, top_k=top_k)
    return batch.to(runs[0].device)


def _slices(parts: dict[int, Minibatch]) -> dict[int, slice]:
    out, start = {}, 0
    for k, chunk in parts.items():
        out[k] = slice(start, start + len(chunk))
        start += len(chunk)
    return out


def _rows(batch: Batch, rows: slice) -> Batch:
    picked = {f: getattr(batch, f)[rows] for f in ROW_FIELDS if getattr(batch, f) is not None}
    return dataclasses.replace(batch, **picked)


def _rows_of_scores(scores: Scores, rows: slice) -> Scores:
    cut = lambda t: None if t is None else t[rows]  # noqa: E731
    return Scores(
        logp=scores.logp[rows], entropy=cut(scores.entropy), full_logp=cut(scores.full_logp)
    )


def _joint_chunks(runs: list[UpdateRun], mbs: dict[int, Minibatch]) -> list[dict[int, Minibatch]]:
    """The joint forwards of one optimizer step: every agent's own chunks, packed.

    Each agent's minibatch is cut into its own chunks, as in its own update (so each agent's
    denominators, bnpo's per-chunk means included, are exactly its own update's). The chunks
    are then taken in the order chunk 0 of every agent, chunk 1 of every agent, ..., and packed
    greedily into joint forwards of at most one chunk per agent, within the bounds of one
    forward: ``train.micro_batch_size`` rows and ``train.max_tokens_per_micro_batch`` forward
    tokens (``forward_tokens``) where either is set; with neither set, the per-agent path's
    largest forward (its largest chunk's rows and tokens). So a joint forward never holds more
    than the memory bounds allow: agents whose chunks fill them still run one after the other,
    and chunks smaller than them (few samples an agent, a last partial chunk, or a
    micro_batch_size above an agent's minibatch) share one forward."""
    chunks = {k: runs[k].chunks(mb) for k, mb in mbs.items()}
    u = runs[next(iter(mbs))].settings
    shares, packed = not drops_kv_cache(runs[0].pol.model), u.padding_free
    every = [c for cs in chunks.values() for c in cs]

    def tokens(parts: list[tuple[int, Minibatch]]) -> int:
        rows = [s for _, c in parts for s in c]
        if packed:  # a prompt is shared within one adapter only
            return packed_tokens(rows, [k for k, c in parts for _ in c])
        return forward_tokens(rows, shares)

    if u.micro_batch_size is None and u.max_tokens_per_micro_batch is None:
        max_rows = max(len(c) for c in every)
        max_tokens = max(tokens([(0, c)]) for c in every)
    else:
        max_rows = u.micro_batch_size or len(every) * max(len(c) for c in every)
        max_tokens = u.max_tokens_per_micro_batch or float("inf")
    order = [
        (k, cs[i])
        for i in range(max(map(len, chunks.values())))
        for k, cs in chunks.items()
        if i < len(cs)
    ]
    out: list[dict[int, Minibatch]] = []
    for k, chunk in order:
        open_ = out[-1] if out else None
        if open_ is not None and k not in open_:
            parts = [*open_.items(), (k, chunk)]
            if sum(len(c) for _, c in parts) <= max_rows and tokens(parts) <= max_tokens:
                open_[k] = chunk
                continue
        out.append({k: chunk})
    return out


def _old_logprobs(runs: list[UpdateRun], passes: list[list[list[Sample]]], route) -> None:
    """Pass 1's later minibatches' old log-probs, before any step (``take_old_logprobs``),
    in joint no-grad forwards."""
    n = max(len(p[0]) for p in passes)
    later = [{k: p[0][j] for k, p in enumerate(passes) if j < len(p[0])} for j in range(1, n)]
    with torch.no_grad():
        for mbs in later:
            for parts in _joint_chunks(runs, mbs):
                batch = _joint_batch(runs, parts)
                logp = runs[0].score(runs[0].pol.model, batch, route=route).logp
                for k, rows in _slices(parts).items():
                    runs[k].keep(parts[k], logp[rows])


def _accumulate(
    runs: list[UpdateRun],
    mbs: dict[int, Minibatch],
    it: int,
    first_step: bool,
    max_len: list[int],
    route,
) -> None:
    """One joint optimizer step's gradients: per joint chunk one forward, the agents' losses
    (``chunk_loss`` on each one's rows) summed, one backward."""
    for k in mbs:
        begin_step(runs[k])
    step_tokens = {k: float(sum(runs[k].counted(s) for s in mb)) for k, mb in mbs.items()}
    lead = runs[next(iter(mbs))]
    for parts in _joint_chunks(runs, mbs):
        batch = _joint_batch(runs, parts)
        scores = lead.score(lead.pol.model, batch, with_entropy=(it == 0), route=route)
        ref = None
        if lead.settings.loss.beta > 0:
            with torch.no_grad(), lead.pol.reference() as ref_model:
                ref = score_tokens(ref_model, batch).logp  # adapters off: the base for all
        total = None
        for k, rows in _slices(parts).items():
            chunk, run = parts[k], runs[k]
            dens = Denominators(
                max_completion_length=max_len[k],
                step_tokens=step_tokens[k],
                chunk_size=len(chunk),
                minibatch_size=len(mbs[k]),
                chunk_tokens=float(sum(run.counted(s) for s in chunk)),
                chunk_rows=len(chunk),
            )
            loss = chunk_loss(
                run,
                chunk,
                _rows(batch, rows),
                _rows_of_scores(scores, rows),
                None if ref is None else ref[rows],
                dens,
                it,
                first_step,
            )
            total = loss if total is None else total + loss
        total.backward()
