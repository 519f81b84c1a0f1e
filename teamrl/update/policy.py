"""One policy's update: ``num_iterations`` passes of ``num_mini_batches`` clipped
policy-gradient steps over its samples, read top to bottom:

    run      = prepare(...)              train mode, the statistics to gather, each sample's rank
    passes   = plan_passes(...)          shuffled minibatches of every pass, built up front
    with fused_lora(model),              LoRA linears as one autograd node each (lora_linear);
         packed_forward(model):          packed rows' attention (packing; train.padding_free),
                                         on through the backward's recomputation under
                                         gradient checkpointing
      take_old_logprobs(run, passes)     the log-probs *before the first optimizer step*
      for each pass, for each minibatch:
        accumulate_gradients(...)        per chunk: logp; IS weights min(pi_old / q, C) for
                                         the sampler mismatch (importance); policy_loss;
                                         backward; a non-finite loss: error, or skip the step
                                         and count it (train.nan_policy)
        apply_step(...)                  all-reduce over ranks; clip the gradient norm; step
    -> UpdateResult(metrics, skipped, stepped)

What it reads is an ``UpdateSettings`` (``teamrl.update.settings``: the IS switch and the
per-agent overrides resolved), built once per run and policy by the execution that runs the
update. That execution also tells the generation backend when the weights moved
(``stepped``): a sampler holding its own copy of them (vLLM) must reload it; the maths here
never touches the backend.

The LR scheduler is stepped by the trainer, once per trainer step for every policy (even one
with no samples this step), so LR(step) depends on the trainer step alone.

Old log-probs: the first minibatch of pass 1 takes them from its own forward, detached, so its
ratio is exactly 1. When more steps follow, pass 1's other minibatches get theirs from a
no-grad forward made before that first step: taken lazily, after earlier minibatches have
stepped, they would give ratio 1 against a policy that has already moved, and those steps
would never be clipped.

Data parallel (several ranks, ``ctx.world_size > 1``): every rank holds all of the policy's
samples and builds the same passes, minibatches and chunks; each rank then runs its share of
each chunk (sample i belongs to rank i % world_size in every pass, so the rank that took a
sample's old log-probs is the one that uses them), and every loss denominator stays the one of
the whole minibatch or chunk (``policy_loss``'s ``Denominators``: ``minibatch_size``,
``step_tokens``, ``chunk_tokens``). The ranks' gradients are therefore partial sums of the
one-process gradient, and an all-reduce SUM (not a mean) gives it back: W ranks make the update
one process makes, for every loss_type.
"""

from __future__ import annotations

import random
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from teamrl.distributed import DistContext
from teamrl.sample import Sample
from teamrl.tensors import to_device
from teamrl.update.importance import importance_weights, mismatch_stats
from teamrl.update.lora_linear import fused_lora
from teamrl.update.losses import (
    Denominators,
    collate,
    drops_kv_cache,
    loss_mask,
    policy_loss,
    score_tokens,
)
from teamrl.update.micro_batches import micro_batches, oversized
from teamrl.update.packing import packed_forward
from teamrl.update.settings import UpdateSettings

if TYPE_CHECKING:
    from teamrl.team.policies import Policy

Minibatch = list[Sample]


def disable_dropout(model: torch.nn.Module) -> None:
    """p = 0 in every dropout module (LoRA's included): TRL's ``disable_dropout``."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0


@dataclass
class UpdateRun:
    """What every step of one policy's update reads: the policy, the settings, which rank
    works on which sample, the old log-probs taken so far, and the statistics gathered."""

    pol: Policy
    settings: UpdateSettings
    ctx: DistContext
    device: torch.device
    rank_of: dict[int, int]  # id(sample) -> the rank that works on it
    row_of: dict[int, int]  # id(sample) -> its row of ``old_logp``
    # every sample's old log-probs, (samples, longest completion), 0 past each one's length:
    # written and read a chunk at a time by one indexed copy each
    old_logp: torch.Tensor
    # per statistic, its values as (0-d tensor on the device, gate, host scale): the gate (a
    # 0-d bool tensor, or None) says whether it counts (every loss of its optimizer step so far
    # was finite); all are read in one transfer at the end (``metrics``)
    stats: dict[str, list[tuple[torch.Tensor, torch.Tensor | None, float]]]
    ok: torch.Tensor | None = None  # this optimizer step's losses were all finite (device)
    warned: bool = False  # a sample over the token budget was reported (once per update)

    def chunks(self, mb: Minibatch) -> list[Minibatch]:
        """The minibatch's forward chunks (gradient accumulation): at most micro_batch_size
        samples and max_tokens_per_micro_batch forward tokens each (teamrl.algorithms.
        micro_batches). The same on every rank: each derives them from the same samples."""
        u = self.settings
        budget, shares = u.max_tokens_per_micro_batch, not drops_kv_cache(self.pol.model)
        chunks = micro_batches(mb, u.micro_batch_size, budget, shares, u.padding_free)
        over = oversized(chunks, budget, shares, u.padding_free)
        if over is not None and not self.warned:
            self.warned = True
            warnings.warn(
                f"train.max_tokens_per_micro_batch={budget}: a sample of agent {over[0]!r} "
                f"runs {over[1]} tokens on its own; it runs alone, over the budget",
                stacklevel=2,
            )
        return chunks

    def share(self, chunk: Minibatch) -> Minibatch:
        """This rank's samples of a chunk (all of them in one process)."""
        return [s for s in chunk if self.rank_of[id(s)] == self.ctx.rank]

    def counted(self, s: Sample) -> int:
        """Tokens of ``s`` that enter the loss."""
        masked = self.settings.mask_truncated_completions and s.truncated
        return 0 if masked else len(s.completion_ids)

    def batch(self, chunk: Minibatch):
        """The batch (padded, or packed with train.padding_free), with each row's sampler
        truncation (truncated_scoring)."""
        u = self.settings
        top_p, top_k = [u.top_p[s.agent] for s in chunk], [u.top_k[s.agent] for s in chunk]
        pad = self.pol.engine.pad_id
        return collate(chunk, pad, packed=u.padding_free, top_p=top_p, top_k=top_k).to(self.device)

    def score(self, model, batch, with_entropy: bool = False, route=None):
        # Under truncated scoring the KL to the reference compares full softmaxes on both
        # sides (the reference is scored in full): 0 at theta = theta_ref, whatever the sets.
        truncated = self.settings.truncated_scoring
        return score_tokens(
            model,
            batch,
            with_entropy=with_entropy,
            truncate=truncated,
            with_full=truncated and self.settings.loss.beta > 0,
            route=route,
        )

    def rows(self, chunk: Minibatch) -> torch.Tensor:
        return to_device(torch.tensor([self.row_of[id(s)] for s in chunk]), self.device)

    def keep(self, chunk: Minibatch, logp: torch.Tensor) -> None:
        """Store the chunk's old log-probs (0 on its pads, as ``score_tokens`` gives them)."""
        self.old_logp[self.rows(chunk), : logp.shape[1]] = logp.detach()

    def old(self, chunk: Minibatch, width: int) -> torch.Tensor:
        """The chunk's old log-probs, (rows, width), 0 on pads."""
        return self.old_logp[self.rows(chunk), :width]

    def record(self, key: str, value: torch.Tensor, gate: torch.Tensor | None = None, scale=1.0):
        self.stats[key].append((value.detach(), gate, scale))

    def metrics(self) -> dict[str, float]:
        """Each statistic's mean over the values that count: the update's one read of the
        device (the values and gates in one transfer, averaged on the host as before)."""
        entries = [(k, v, g, scale) for k, vs in self.stats.items() for v, g, scale in vs]
        flat = [v.double() for _, v, _, _ in entries]
        flat += [g.double() for _, _, g, _ in entries if g is not None]
        host = torch.stack(flat).tolist() if flat else []
        gates = iter(host[len(entries) :])
        kept: dict[str, list[float]] = {k: [] for k in self.stats}
        for (k, _, gate, scale), x in zip(entries, host):
            if gate is None or next(gates) > 0:
                kept[k].append(x * scale)
        return {k: (sum(v) / len(v) if v else float("nan")) for k, v in kept.items()}


@dataclass(frozen=True)
class UpdateResult:
    metrics: dict[str, float]  # each statistic's mean over the update's chunks or steps
    skipped: int  # optimizer steps skipped for a non-finite loss (train.nan_policy=skip)
    # some optimizer step moved the weights: a generation backend holding its own copy of
    # them must hear of it (``Backend.weights_changed``, which the execution calls)
    stepped: bool


def update_policy(
    pol: Policy,
    samples: list[Sample],
    settings: UpdateSettings,
    *,
    step: int,
    max_completion_length: int,
    ctx: DistContext | None = None,
) -> UpdateResult:
    """Update ``pol`` on its samples with its ``settings`` (``update_settings``).

    ``step`` is the trainer step (it seeds the minibatch shuffle); ``max_completion_length`` is
    the largest budget among the samples' agents (dr_grpo's denominator).
    """
    run = prepare(pol, samples, settings, ctx)
    passes = plan_passes(samples, settings, step)
    # FSDP's sharded parameters keep PEFT's forward (its hooks gather them per module)
    fuse = settings.fused_lora and not pol.sharded
    skipped, stepped = 0, False
    packed = packed_forward(pol.model) if settings.padding_free else nullcontext()
    base_dtype = torch.bfloat16 if settings.bf16 else None  # train.bf16
    fused = fused_lora(pol.model, settings.lora_compute_dtype, base_dtype)
    with fused if fuse else nullcontext(), packed:
        take_old_logprobs(run, passes)
        for it, minibatches in enumerate(passes):
            for j, mb in enumerate(minibatches):
                first_step = it == 0 and j == 0  # the policy has not moved yet
                accumulate_gradients(run, mb, it, first_step, step, max_completion_length)
                (finite,) = step_finite([run], step, it)
                if apply_step(run, finite):
                    stepped = True
                else:
                    skipped += 1
    return UpdateResult(run.metrics(), skipped, stepped)


def prepare(
    pol: Policy,
    samples: list[Sample],
    settings: UpdateSettings,
    ctx: DistContext | None,
    width: int | None = None,
) -> UpdateRun:
    """0. Train mode (no dropout), the statistics to gather, each sample's rank. ``width``: of
    the old log-probs' table (default: the longest completion; a joint update's batches may
    be wider, teamrl.update.joint)."""
    u = settings
    ctx = ctx or DistContext(device=str(next(pol.model.parameters()).device))
    pol.activate()
    if u.disable_dropout:
        disable_dropout(pol.model)
    pol.model.train()
    keys = ["loss", "clip_fraction", "entropy", "grad_norm", "ratio", "logp_diff"]
    keys += ["kl_sampler_k1", "kl_sampler_k3"]  # the mismatch, logged always
    keys += ["is_weight", "is_clipped_fraction"] if u.importance_sampling_correction else []
    keys += ["ratio_dev_first_pass"] + (["kl"] if u.loss.beta > 0 else [])  # none at beta 0
    keys += ["outside_nucleus_fraction"] if u.truncated_scoring else []
    device = torch.device(ctx.device)
    width = max([1, width or 0] + [len(s.completion_ids) for s in samples])
    return UpdateRun(
        pol=pol,
        settings=settings,
        ctx=ctx,
        device=device,
        rank_of={id(s): i % ctx.world_size for i, s in enumerate(samples)},
        row_of={id(s): i for i, s in enumerate(samples)},
        old_logp=torch.zeros((len(samples), width), device=device),
        stats={k: [] for k in keys},
    )


def plan_passes(
    samples: list[Sample], settings: UpdateSettings, step: int
) -> list[list[Minibatch]]:
    """1. Every pass's minibatches up front (a seeded shuffle per pass), so that pass 1's old
    log-probs can be taken before any step."""
    n = settings.num_mini_batches
    passes: list[list[Minibatch]] = []
    order = list(range(len(samples)))
    for it in range(settings.num_iterations):
        random.Random(settings.seed + 7919 * step + it).shuffle(order)
        mbs = [order[i::n] for i in range(n)]
        passes.append([[samples[i] for i in mb] for mb in mbs if mb])
    return passes


def take_old_logprobs(run: UpdateRun, passes: list[list[Minibatch]]) -> None:
    """2. Old log-probs of pass 1's later minibatches, before any step (the first minibatch
    takes its own from its forward, so its ratio is exactly 1)."""
    if sum(len(p) for p in passes) <= 1:
        return
    with torch.no_grad():
        for mb in passes[0][1:]:
            for chunk in run.chunks(mb):
                piece = run.share(chunk)
                if piece:
                    run.keep(piece, run.score(run.pol.model, run.batch(piece)).logp)
                elif run.pol.sharded:  # every rank joins every sharded forward
                    run.score(run.pol.model, run.batch(chunk[:1]))


def accumulate_gradients(
    run: UpdateRun, mb: Minibatch, it: int, first_step: bool, step: int, max_len: int
) -> None:
    """3. One optimizer step's gradients: forward, loss and backward per chunk of this rank's
    share. Nothing here reads the device: whether every loss was finite is kept on it
    (``run.ok``) and read once per step by ``step_finite``."""
    begin_step(run)
    step_tokens = float(sum(run.counted(s) for s in mb))
    for chunk in run.chunks(mb):
        piece, ghost = run.share(chunk), False
        if not piece:
            if not run.pol.sharded:
                continue
            # FSDP: every rank joins every forward and backward; this one runs a row of the
            # chunk whose loss counts 0 (teamrl.scale.sharding)
            piece, ghost = chunk[:1], True
        dens = Denominators(
            max_completion_length=max_len,
            step_tokens=step_tokens,
            chunk_size=len(piece),
            minibatch_size=len(mb),
            chunk_tokens=float(sum(run.counted(s) for s in chunk)),  # bnpo: the whole chunk's
            chunk_rows=len(chunk),
        )
        batch = run.batch(piece)
        scores = run.score(run.pol.model, batch, with_entropy=(it == 0 and not ghost))
        ref = None
        if run.settings.loss.beta > 0:
            with torch.no_grad(), run.pol.reference() as ref_model:
                ref = score_tokens(ref_model, batch).logp  # full softmax
        loss = chunk_loss(run, piece, batch, scores, ref, dens, it, first_step, ghost)
        if ghost:
            (loss * 0.0).backward()  # joins the reduce-scatter, adds nothing
            continue
        # FSDP averages the ranks' gradients; each loss is a share of one sum: scale it back
        (loss * run.ctx.world_size if run.pol.sharded else loss).backward()


def begin_step(run: UpdateRun) -> None:
    run.pol.optimizer.zero_grad(set_to_none=True)
    run.ok = torch.ones((), dtype=torch.bool, device=run.device)


def chunk_loss(
    run: UpdateRun,
    chunk: Minibatch,
    batch,
    scores,
    ref: torch.Tensor | None,
    dens: Denominators,
    it: int,
    first_step: bool,
    ghost: bool = False,
) -> torch.Tensor:
    """The loss of one chunk's rows (``batch`` and ``scores`` hold those rows only), its
    statistics recorded, ``run.ok`` updated; the caller runs the backward.

    A non-finite loss (train.nan_policy) is not branched on here: its backward poisons only
    gradients that its step then drops (``step_finite`` reads ``run.ok`` once per step, and
    ``apply_step`` zeroes them), and the statistics of its step from it on do not count,
    exactly as when the loop stopped at it."""
    u = run.settings
    logp, mask = scores.logp, batch.completion_mask
    if first_step and not ghost:
        run.keep(chunk, logp)
    # pads: 0 in both (and out of every sum); a ghost row's ratio is 1
    old = logp.detach().clone() if ghost else run.old(chunk, logp.shape[1])
    if u.truncated_scoring:  # pi_old(y) = 0: the sets disagree at their edge
        outside = (mask > 0) & ~torch.isfinite(old)
        if it == 0 and not ghost:
            run.record("outside_nucleus_fraction", outside.sum() / mask.sum().clamp_min(1.0))
        # IS weight pi_old / q = 0: out of every sum (a -inf would make NaN)
        mask = torch.where(outside, 0.0, mask)
    weights = importance(run, old, batch, mask, scores.entropy, first_pass=(it == 0), log=not ghost)
    # after the stats; tokens outside the nucleus stay out
    mask = torch.minimum(mask, loss_mask(batch, u.mask_truncated_completions))
    out = policy_loss(
        logp,
        old,
        batch.advantages,
        mask,
        u.loss,
        ref_logp=ref,
        kl_logp=scores.full_logp,
        is_weights=weights,
        denominators=dens,
    )
    # 4. The NaN policy, on the device: from a non-finite loss on, the step's statistics do
    # not count, and the step is skipped (or, train.nan_policy=error, raises) at its end
    run.ok = run.ok & torch.isfinite(out.loss)
    if not ghost:
        ok = run.ok
        run.record("loss", out.loss, ok, out.report_scale)
        if out.kl is not None:
            run.record("kl", out.kl, ok)
        run.record("clip_fraction", out.clip_fraction, ok)
        run.record("ratio", out.ratio_mean, ok)
        if first_step:  # exactly 0 by construction: a check, not a measurement
            run.record("ratio_dev_first_pass", out.ratio_max_dev, ok)
    return out.loss


def importance(run: UpdateRun, old, batch, mask, entropy, first_pass: bool, log: bool = True):
    """The detached IS weights pi_old / q bounded by C (None when the correction is off), and
    on the first pass the mismatch statistics, before any masking of truncated completions."""
    u = run.settings
    q = batch.sampler_logprobs
    weights = capped = None
    if u.importance_sampling_correction:
        weights, capped = importance_weights(
            old, q, mask, u.importance_sampling_mode, u.importance_sampling_cap
        )
    if first_pass and log:
        for k, v in mismatch_stats(old, q, mask).items():
            run.record(k, v)
        run.record("entropy", (entropy * mask).sum() / mask.sum())
        if u.importance_sampling_correction:
            n = mask.sum().clamp_min(1.0)
            run.record("is_weight", (weights * mask).sum() / n)
            run.record("is_clipped_fraction", (capped * mask).sum() / n)
    return weights


def step_finite(runs: list[UpdateRun], step: int, it: int) -> list[bool]:
    """Whether each run's losses of this optimizer step were all finite, on every rank: the
    update's one read of the device per optimizer step (all runs' flags in one transfer).
    train.nan_policy=error raises here, naming the policy."""
    bad = torch.stack([~run.ok for run in runs]).float()
    ctx = runs[0].ctx
    if ctx.world_size > 1:  # a non-finite loss on any rank skips the step on every rank
        bad = ctx.all_reduce_sum(bad)
    flags = [b == 0 for b in bad.tolist()]
    for run, finite in zip(runs, flags):
        if not finite and run.settings.nan_policy == "error":
            raise FloatingPointError(
                f"non-finite loss for policy {run.pol.name!r} at step {step} "
                f"(iteration {it}); set train.nan_policy=skip to skip and count such updates"
            )
    return flags


def apply_step(run: UpdateRun, finite: bool) -> bool:
    """5. The step, unless a loss anywhere was not finite (``step_finite``, every rank skips
    together): gradients summed over ranks (nothing to do in one process), clipped, stepped."""
    pol, ctx = run.pol, run.ctx
    if not finite:
        pol.optimizer.zero_grad(set_to_none=True)
        return False
    params = pol.parameters()
    if ctx.world_size > 1 and not pol.sharded:  # FSDP has reduce-scattered them already
        all_reduce_grads(params, ctx)
    max_norm = run.settings.max_grad_norm
    if max_norm is not None:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    elif pol.sharded:  # the norm of sharded gradients, over every rank's shards
        norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    else:
        norm = torch.norm(torch.stack([p.grad.norm() for p in params if p.grad is not None]))
    if hasattr(norm, "full_tensor"):  # a DTensor (sharded gradients)
        norm = norm.full_tensor()
    run.record("grad_norm", norm)
    pol.optimizer.step()
    return True


def all_reduce_grads(params: list[torch.nn.Parameter], ctx: DistContext) -> None:
    """Sum every parameter's gradient over the ranks, in one flat all-reduce.

    A parameter without a gradient on some rank (that rank had no sample of the minibatch)
    counts as zeros there; one without a gradient on every rank keeps ``grad = None``, as in
    one process (AdamW then leaves it and its moments alone).
    """
    device = params[0].device
    has = ctx.all_reduce_sum(
        torch.tensor([float(p.grad is not None) for p in params], device=device)
    )
    live = [p for p, h in zip(params, has.tolist()) if h > 0]
    for p in live:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if not live:
        return
    flat = ctx.all_reduce_sum(torch.cat([p.grad.reshape(-1) for p in live]))
    offset = 0
    for p in live:
        n = p.grad.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
        offset += n
