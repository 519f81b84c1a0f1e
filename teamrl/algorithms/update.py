"""One policy's update: ``num_iterations`` passes of ``num_mini_batches`` clipped
policy-gradient steps over its samples, read top to bottom:

    passes   = shuffled minibatches of every pass, built up front
    old_logp = the policy's log-probs *before its first optimizer step*
    for each pass, for each minibatch:
        for each chunk (gradient accumulation): logp -> policy_loss -> backward
        a non-finite loss: error, or skip the step and count it (train.nan_policy)
        clip the gradient norm; optimizer step
    scheduler step (once per trainer step); tell the generation backend the weights moved

Old log-probs: the first minibatch of pass 1 takes them from its own forward, detached, so its
ratio is exactly 1. When more steps follow, pass 1's other minibatches get theirs from a
no-grad forward made before that first step: taken lazily, after earlier minibatches have
stepped, they would give ratio 1 against a policy that has already moved, and those steps
would never be clipped.

Data parallel (several ranks, ``ctx.world_size > 1``): every rank holds all of the policy's
samples and builds the same passes, minibatches and chunks; each rank then runs its share of
each chunk (sample i belongs to rank i % world_size in every pass, so the rank that took a
sample's old log-probs is the one that uses them), and every loss denominator stays the one of the whole minibatch or
chunk (``policy_loss``'s ``minibatch_size``, ``step_tokens``, ``chunk_tokens``). The ranks'
gradients are therefore partial sums of the one-process gradient, and an all-reduce SUM (not
a mean) gives it back: W ranks make the update one process makes, for every loss_type.
"""

from __future__ import annotations

import random
import warnings
from typing import TYPE_CHECKING

import torch

from teamrl.algorithms.losses import collate, policy_loss, token_logprobs
from teamrl.config import Config
from teamrl.distributed import DistContext
from teamrl.sample import Sample

if TYPE_CHECKING:
    from teamrl.team import Policy

Minibatch = list[Sample]


def update_policy(
    pol: Policy,
    samples: list[Sample],
    cfg: Config,
    *,
    step: int,
    max_completion_length: int,
    ctx: DistContext | None = None,
) -> tuple[dict[str, float], int]:
    """Update ``pol`` on its samples; return its metrics and the number of skipped (NaN) steps.

    ``step`` is the trainer step (it seeds the minibatch shuffle); ``max_completion_length`` is
    the largest budget among the samples' agents (dr_grpo's denominator).
    """
    a, t = cfg.algorithm, cfg.train
    ctx = ctx or DistContext(device=str(next(pol.model.parameters()).device))
    device = torch.device(ctx.device)
    pad = pol.engine.pad_id
    pol.activate()
    pol.model.train()
    keys = ["loss", "clip_fraction", "entropy", "grad_norm", "ratio", "logp_diff"]
    keys += ["ratio_dev_first_pass"] + (["kl"] if a.beta > 0 else [])  # no KL when beta == 0
    stats: dict[str, list[float]] = {k: [] for k in keys}

    def chunks(mb: Minibatch) -> list[Minibatch]:  # micro-batches (gradient accumulation)
        size = t.micro_batch_size or len(mb)
        return [mb[i : i + size] for i in range(0, len(mb), size)]

    rank_of = {id(s): i % ctx.world_size for i, s in enumerate(samples)}

    def share(chunk: Minibatch) -> Minibatch:  # this rank's samples (all of them in 1 process)
        return [s for s in chunk if rank_of[id(s)] == ctx.rank]

    # 1. Every pass's minibatches up front, so pass 1's old log-probs can be taken before a step.
    passes: list[list[Minibatch]] = []
    order = list(range(len(samples)))
    for it in range(a.num_iterations):
        random.Random(cfg.seed + 7919 * step + it).shuffle(order)
        mbs = [order[i :: t.num_mini_batches] for i in range(t.num_mini_batches)]
        passes.append([[samples[i] for i in mb] for mb in mbs if mb])

    # 2. Old log-probs of pass 1's later minibatches, before any step (id(sample) -> unpadded).
    old_logp: dict[int, torch.Tensor] = {}

    def keep(chunk: Minibatch, logp: torch.Tensor) -> None:
        for s, row in zip(chunk, logp):
            old_logp[id(s)] = row[: len(s.completion_ids)]

    if sum(len(p) for p in passes) > 1:
        with torch.no_grad():
            for mb in passes[0][1:]:
                for piece in filter(None, map(share, chunks(mb))):
                    keep(piece, token_logprobs(pol.model, collate(piece, pad).to(device))[0])

    # 3. The clipped steps.
    skipped, stepped = 0, False
    for it, minibatches in enumerate(passes):
        for j, mb in enumerate(minibatches):
            first_step = it == 0 and j == 0  # the policy has not moved yet
            step_tokens = float(sum(len(s.completion_ids) for s in mb))
            pol.optimizer.zero_grad(set_to_none=True)
            finite = True
            for chunk in chunks(mb):
                piece = share(chunk)
                if not piece:
                    continue
                whole = (float(sum(len(s.completion_ids) for s in chunk)), len(chunk))
                chunk, batch = piece, collate(piece, pad).to(device)
                logp, entropy = token_logprobs(pol.model, batch, with_entropy=(it == 0))
                mask = batch.completion_mask
                if first_step:
                    keep(chunk, logp.detach())
                old = logp.detach().clone()  # pads keep ratio 1 (and are masked anyway)
                for i, s in enumerate(chunk):
                    old[i, : len(s.completion_ids)] = old_logp[id(s)]
                if it == 0:
                    diff = ((old - batch.sampler_logprobs).abs() * mask).sum() / mask.sum()
                    stats["logp_diff"].append(float(diff))
                    stats["entropy"].append(float((entropy * mask).sum() / mask.sum()))
                ref = None
                if a.beta > 0:
                    with torch.no_grad(), pol.reference() as ref_model:
                        ref, _ = token_logprobs(ref_model, batch)
                out = policy_loss(
                    logp,
                    old,
                    batch.advantages,
                    mask,
                    loss_type=a.loss_type,
                    epsilon=a.epsilon,
                    epsilon_high=a.epsilon_high,
                    ref_logp=ref,
                    beta=a.beta,
                    kl_estimator=a.kl_estimator,
                    max_completion_length=max_completion_length,
                    step_tokens=step_tokens,
                    chunk_size=len(chunk),
                    minibatch_size=len(mb),
                    chunk_tokens=whole[0],
                    chunk_rows=whole[1],
                )
                # 4. The NaN policy: an error, or no backward and the whole step skipped.
                if not torch.isfinite(out.loss):
                    if t.nan_policy == "error":
                        raise FloatingPointError(
                            f"non-finite loss for policy {pol.name!r} at step {step} "
                            f"(iteration {it}); set train.nan_policy=skip to skip and count "
                            "such updates"
                        )
                    finite = False
                if not finite:
                    continue  # no backward; the first step's later chunks still keep old logp
                out.loss.backward()
                stats["loss"].append(float(out.loss.detach()) * out.report_scale)
                if out.kl is not None:
                    stats["kl"].append(out.kl)
                stats["clip_fraction"].append(out.clip_fraction)
                stats["ratio"].append(out.ratio_mean)
                if first_step:  # exactly 0 by construction: a check, not a measurement
                    stats["ratio_dev_first_pass"].append(out.ratio_max_dev)
            if ctx.world_size > 1:  # a non-finite loss on any rank skips the step on every rank
                bad = ctx.all_reduce_sum(torch.tensor([0.0 if finite else 1.0], device=device))
                finite = bool(bad.item() == 0)
            if not finite:
                skipped += 1
                pol.optimizer.zero_grad(set_to_none=True)
                continue
            # 5. Gradients summed over ranks (nothing to do in one process), clipped, stepped.
            params = pol.parameters()
            if ctx.world_size > 1:
                all_reduce_grads(params, ctx)
            if t.max_grad_norm is not None:
                norm = torch.nn.utils.clip_grad_norm_(params, t.max_grad_norm)
            else:
                norm = torch.norm(
                    torch.stack([p.grad.norm() for p in params if p.grad is not None])
                )
            stats["grad_norm"].append(float(norm))
            pol.optimizer.step()
            stepped = True

    # The LR schedule is indexed by trainer step, so it advances even when every step of this
    # update was skipped (NaN): LR(step) does not depend on skips, and the scheduler state is
    # checkpointed, so resume stays exact. torch warns about that order once; here it is
    # intended.
    with warnings.catch_warnings():
        if not stepped:
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step")
        pol.scheduler.step()
    if stepped and pol.engine.backend is not None:
        pol.engine.backend.weights_changed(pol.adapter)
    metrics = {k: (sum(v) / len(v) if v else float("nan")) for k, v in stats.items()}
    metrics["lr"] = pol.scheduler.get_last_lr()[0]
    return metrics, skipped


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
