"""Batched token log-probs and the clipped policy-gradient loss.

Prefix sharing: the G (or K) samples of a group share one prompt, so the prompt is run once
per distinct prompt (left-padded, with the KV cache kept *with* its autograd graph) and the
cache is copied to each of its samples; the right-padded completions then run on top. The
gradient through the shared prompt is the sum over its samples, exactly as if each sample
had been run in full, at a fraction of the cost when prompts are long.

Loss, per token t of sample i (ratio r = exp(logp - logp_old), advantage A_i):

    l_it = -w_it * min(r' * A_i, clip(r, 1 - eps_low, 1 + eps_high) * A_i) + beta * KL_it

(A_it in place of A_i when a token-level critic gives each token its own advantage)

where r' = min(r, delta) when ``delta`` is set (two-sided clipping, INTELLECT-2 / TRL's
``delta``: bounds the loss of a negative advantage), w_it the detached importance weight that
corrects for the sampler's distribution (``teamrl.update.importance``, 1 when off), and
with ``importance_sampling_level='sequence'`` (GSPO) r is the same for every token of a
sample: exp(mean_t (logp_t - logp_old_t)).

aggregated by ``loss_type`` over the completion mask M:

    grpo:    mean_i ( sum_t l_it M_it / sum_t M_it )          sequence-mean of token-means
    dr_grpo: sum_it l_it M_it / (n * max_completion_length)
    dapo:    sum_it l_it M_it / (active tokens in the whole optimizer step)
    bnpo:    sum_it l_it M_it / (active tokens in this forward chunk)

Pads (and any token with M = 0) never enter the arithmetic: ``policy_loss`` replaces every
input there by 0 with ``torch.where`` first. Truncated scoring gives a pad outside the
sampler's set log-prob -inf, and -inf - (-inf) = NaN would survive a product with M = 0, in
the loss and in exp's backward (0 * NaN) alike.

Data parallel: a rank's forward may hold only its share of a chunk. grpo and dr_grpo are
sums over rows divided by the (global) minibatch size, and dapo's ``step_tokens`` is global,
so their shares add up as they are; bnpo is a mean over the whole chunk's tokens, so it takes
that chunk's ``chunk_tokens`` (denominator) and ``chunk_rows`` (accumulation weight).

Gradient accumulation: an optimizer step's minibatch may run as several forward chunks whose
gradients add up. dapo is already normalised by the whole step's tokens, so its chunk losses
simply add; the other aggregations are means over a chunk, so each chunk's loss is weighted
by its share of the minibatch, len(chunk) / len(minibatch). ``policy_loss`` applies that
weight (given ``chunk_size`` and ``minibatch_size``): callers never special-case a loss type.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from teamrl.tensors import cache_kwargs, output_cache
from teamrl.truncation import truncation_keep
from teamrl.update.batch import Batch, collate, loss_mask  # noqa: F401 (where callers import them)
from teamrl.update.chosen_logprob import (
    chosen_logprob,
    chosen_logprob_and_entropy,
    row_entropy,
)
from teamrl.update.packing import packed_forward


def drops_kv_cache(model: torch.nn.Module) -> bool:
    """HF layers under activation (gradient) checkpointing force ``use_cache=False`` in training
    mode, so a prompt's KV cache cannot be kept for its completions."""
    flag = getattr(model, "is_activation_checkpointing", None)  # transformers >= 5
    if flag is None:
        flag = getattr(model, "is_gradient_checkpointing", False)
    return bool(flag) and model.training


@dataclass
class Scores:
    """Per-token scores of a batch's completions, each (B, C) and exactly 0 on pads.

    ``logp``: under the distribution the update scores (the sampler's truncated one with
    ``truncate``); ``full_logp``: under the full temperature-scaled softmax (the same tensor
    as ``logp`` without truncation; None unless asked for); ``entropy``: of the scored
    distribution (None unless asked for).
    """

    logp: torch.Tensor
    entropy: torch.Tensor | None = None
    full_logp: torch.Tensor | None = None


def token_logprobs(
    model: torch.nn.Module, batch: Batch, with_entropy: bool = False, truncate: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-prob of each completion token under ``model``, its entropy or None); see
    ``score_tokens``."""
    scores = score_tokens(model, batch, with_entropy=with_entropy, truncate=truncate)
    return scores.logp, scores.entropy


def score_tokens(
    model: torch.nn.Module,
    batch: Batch,
    *,
    with_entropy: bool = False,
    truncate: bool = False,
    with_full: bool = False,
    route: Router | None = None,
) -> Scores:
    """Log-prob of each completion token under ``model``, and (optionally) its entropy.

    ``route``: in a one-pass LoRA update (``teamrl.update.joint``), the context that sends each
    row of a forward through its adapter, given the rows' adapter indices (the batch's
    ``prompt_route`` for the prompts' forward, ``row_route`` for the completions').

    ``truncate``: score under the sampler's own distribution, the temperature-scaled softmax
    restricted to each row's top-k / top-p set and renormalised (``truncated_scoring``), so
    that the old log-prob equals the sampler's. A token outside that set scores -inf.
    ``with_full``: also the full softmax's log-prob (what the KL to the reference compares).

    Pads score exactly 0, selected with ``torch.where``: a pad token outside the set would
    score -inf, and -inf - (-inf) = NaN survives any later multiplication by a 0 mask.

    One pass per batch in two stages: distinct prompts (KV cache kept), then completions.
    Under gradient checkpointing (no cache in training) each sample runs in full instead:
    same tokens, positions and mask, so the same maths.
    """
    if batch.packed is not None:
        return _score_packed(model, batch, with_entropy, truncate, with_full, route or _unrouted)
    # Scored part by part (the prompt's last position, then the completion's positions), so no
    # vocabulary-wide tensor is ever concatenated or sliced: a (B, C, vocab) cat copies its
    # inputs, and a slice's backward zero-fills a tensor of the whole before copying in. A bf16
    # model's logits stay bf16 here: chosen_logprob upcasts them a chunk at a time.
    parts = [
        _score_part(_scored(logits), batch, cols, with_entropy, truncate, with_full)
        for logits, cols in _completion_logit_parts(model, batch, route or _unrouted)
    ]
    logp, entropy, full = (
        None if parts[0][i] is None else torch.cat([part[i] for part in parts], dim=1)
        for i in range(3)
    )
    return Scores(logp=logp, entropy=entropy, full_logp=full)


def _score_packed(
    model: torch.nn.Module,
    batch: Batch,
    with_entropy: bool,
    truncate: bool,
    with_full: bool,
    route: Router,
) -> Scores:
    """``score_tokens`` on a packed batch: one forward of the packed row, the vocabulary
    projected only at the N positions that predict a completion token, each of those scored as
    a row of its own (its sample's temperature and sampler truncation), then put in its
    sample's row and column of the (B, C) scores (0 elsewhere)."""
    lay = batch.packed
    with route(lay.token_route), packed_forward(model):
        out = model(
            input_ids=lay.input_ids,
            position_ids=lay.position_ids,
            use_cache=False,
            logits_to_keep=lay.keep,
            packed=lay,
        )
    logits = _at(out.logits, lay.keep).transpose(0, 1)  # (N, 1, vocab): a row per token
    n, rows = logits.shape[0], lay.rows
    truncation = None
    if truncate:
        truncation = (batch.top_p[rows], batch.top_k[rows], batch.max_top_k, batch.nucleus)
    parts = _score_logits(
        _scored(logits),
        lay.target_ids[:, None],
        None if batch.unit_temperature else batch.temperatures[rows],
        truncation,
        None,  # every packed token is a real one
        with_entropy,
        with_full,
    )
    shape = batch.completion_mask.shape
    where = (rows, lay.cols)

    def placed(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None:
            return None
        return t.new_zeros(shape).index_put(where, t.reshape(n))

    logp, entropy = placed(parts[0]), placed(parts[1])
    # the full softmax's log-probs are the scored ones unless the scoring was truncated
    full = placed(parts[2]) if truncate else (logp if with_full else None)
    return Scores(logp=logp, entropy=entropy, full_logp=full)


def _scored(logits: torch.Tensor) -> torch.Tensor:
    """The logits as scored: float32, except half-precision ones, which stay as they are for
    ``_score_part`` to upcast where it needs to (a chunk at a time on the plain path)."""
    return logits if logits.dtype in (torch.float16, torch.bfloat16) else logits.float()


def _score_part(
    logits: torch.Tensor,
    batch: Batch,
    cols: slice,
    with_entropy: bool,
    truncate: bool,
    with_full: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``score_tokens`` on the completion columns ``cols``, whose logits are (B, cols, vocab)
    in the model's dtype (``_score_logits``, each row with its sample's settings)."""
    return _score_logits(
        logits,
        batch.completion_ids[:, cols],
        None if batch.unit_temperature else batch.temperatures,
        (batch.top_p, batch.top_k, batch.max_top_k, batch.nucleus) if truncate else None,
        batch.completion_mask[:, cols] > 0,
        with_entropy,
        with_full,
    )


def _score_logits(
    logits: torch.Tensor,
    completion_ids: torch.Tensor,
    temperatures: torch.Tensor | None,
    truncation: tuple | None,
    real: torch.Tensor | None,
    with_entropy: bool,
    with_full: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(log-prob, entropy, full log-prob) of the (R, c) tokens ``completion_ids`` under the
    (R, c, vocab) ``logits``: in float32 from here on, except on the plain path, where
    ``chosen_logprob`` upcasts half-precision logits a chunk at a time. ``temperatures``: (R,),
    None when all are 1; ``truncation``: each row's (top_p, top_k, and on the host the largest
    top_k and whether some top_p < 1), to score under the sampler's set (None: the full
    softmax); ``real``: the tokens that score (0 elsewhere), None when all do."""
    if temperatures is not None:  # x / 1 == x: skip a (rows, c, vocab) pass
        # float32 temperatures: the quotient is float32 (type promotion), one pass either way
        logits = logits / temperatures.float()[:, None, None]
    elif truncation is not None:
        logits = logits.float()
    ids = completion_ids.unsqueeze(-1)
    full = None
    if truncation is not None:  # the sampler's own distribution: the kept set, renormalised
        top_p, top_k, max_top_k, nucleus = truncation
        token = logits.gather(-1, ids).squeeze(-1)  # the chosen token's logit, never -inf
        b, c, v = logits.shape
        rows = lambda x: x[:, None].expand(b, c).reshape(-1)  # noqa: E731 (one value per row)
        with torch.no_grad():  # which tokens the sampler could draw: a mask, not a function
            keep = truncation_keep(
                logits.reshape(b * c, v),
                rows(top_p),
                rows(top_k),
                max_k=max_top_k,
                nucleus=nucleus,
            )
            keep = keep.reshape(b, c, v)
        if with_full:
            full = token - torch.logsumexp(logits, dim=-1)
        logits = logits.masked_fill(~keep, float("-inf"))
        lse = torch.logsumexp(logits, dim=-1)
        # log q(y) = z_y - log sum_{kept} e^z for a kept token, -inf outside the set; the
        # where leaves no -inf inside a difference, so no NaN reaches the gradient either
        logp = torch.where(keep.gather(-1, ids).squeeze(-1), token - lse, float("-inf"))
        entropy = row_entropy(logits.detach()) if with_entropy else None  # -inf entries: p = 0
    elif with_entropy:  # z_y - lse(z) with a one-tensor backward, and H from the same pass
        logp, entropy = chosen_logprob_and_entropy(logits, completion_ids)
    else:
        logp, entropy = chosen_logprob(logits, completion_ids), None
    if real is not None:
        logp = torch.where(real, logp, 0.0)
    if truncation is not None:
        full = torch.where(real, full, 0.0) if full is not None and real is not None else full
    else:
        full = logp if with_full else None
    return logp, entropy, full


# rows' adapter indices (None: the active adapter) -> the context a forward of those rows runs in
Router = Callable[[torch.Tensor | None], AbstractContextManager]


def _unrouted(rows: torch.Tensor | None) -> AbstractContextManager:
    return nullcontext()


def _completion_logit_parts(
    model: torch.nn.Module, batch: Batch, route: Router
) -> list[tuple[torch.Tensor, slice]]:
    """The logits that predict each completion token (position t-1 for token t), as
    (logits (B, columns, vocab), the completion columns they predict) parts.

    Only the positions needed are projected onto the vocabulary (``logits_to_keep`` as a
    tensor of positions), so no (B, C, vocab) tensor is sliced or concatenated.
    """
    idx = batch.prompt_index
    p_pos = (batch.prompt_mask.cumsum(-1) - 1).clamp_min(0)
    comp_mask = batch.completion_mask.long()
    attn = torch.cat([batch.prompt_mask[idx], comp_mask], dim=1)
    start = batch.prompt_mask.sum(-1)[idx]  # first completion position of each sample
    c = batch.completion_ids.shape[1]
    device = start.device
    pos = start[:, None] + torch.arange(c, device=device)[None]
    if drops_kv_cache(model):
        length = batch.prompt_ids.shape[1] + c
        with route(batch.row_route):
            full = model(
                input_ids=torch.cat([batch.prompt_ids[idx], batch.completion_ids], dim=1),
                attention_mask=attn,
                position_ids=torch.cat([p_pos[idx], pos], dim=1),
                use_cache=False,
                # the prompt's last position and every completion position but the last
                logits_to_keep=(keep := torch.arange(length - c - 1, length - 1, device=device)),
            )
        return [(_at(full.logits, keep), slice(0, c))]
    with route(batch.prompt_route):
        prefix = model(
            input_ids=batch.prompt_ids,
            attention_mask=batch.prompt_mask,
            position_ids=p_pos,
            use_cache=c > 1,
            logits_to_keep=1,
        )
    # token 0's logit comes from the prompt's last position
    parts = [(prefix.logits[idx, -1:], slice(0, 1))]
    if c > 1:  # tokens 1.. from the completion's positions 0 .. c-2
        cache = output_cache(prefix)
        if not batch.prompts_in_order:
            cache.reorder_cache(idx)  # differentiable copy of each prompt's KV to its samples
        with route(batch.row_route):
            suffix = model(
                input_ids=batch.completion_ids,
                attention_mask=attn,
                position_ids=pos,
                use_cache=True,
                logits_to_keep=(keep := torch.arange(c - 1, device=device)),
                **cache_kwargs(model, cache),
            )
        parts.append((_at(suffix.logits, keep), slice(1, c)))
    return parts


def _at(logits: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The logits at positions ``keep``: as returned by a model that honours ``logits_to_keep``
    (every transformers causal LM), or sliced from one that returns every position."""
    return logits if logits.shape[1] == len(keep) else logits[:, keep]


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from samples of pi (the value logged as ``kl``)."""
    log_ratio = ref_logp - logp
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":  # 0.5 (log pi - log ref)^2, >= 0
        return 0.5 * log_ratio**2
    if estimator == "k3":  # unbiased, always >= 0 (Schulman's k3)
        return torch.exp(log_ratio) - log_ratio - 1
    raise ValueError(f"algorithm.kl_estimator: expected k1|k2|k3, got {estimator!r}")


def kl_loss_term(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    ratio: torch.Tensor,
    estimator: str,
    bias_correction: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-token loss term, per-token KL estimate) for the KL pull, from sampled tokens y ~ pi.

    Expected gradients (theta the policy's parameters, E over y ~ pi):
      k1 (a reward penalty): the loss is sg(log pi - log ref) * r, so the gradient is
          E[(log pi - log ref) grad log pi] = grad KL(pi || ref). k1 used *as a loss* would
          have gradient E[grad log pi] = 0 and pull nothing.
      k2: grad 0.5 (log pi - log ref)^2 = (log pi - log ref) grad log pi, the same
          expectation, grad KL(pi || ref).
      k3: grad (pi_ref/pi - log(pi_ref/pi) - 1) = (1 - pi_ref/pi) grad log pi, whose
          expectation sum_y (pi - pi_ref) grad log pi = grad KL(pi_ref || pi) (TRL's form
          with its ``use_bias_correction_kl`` off).
      k3 with ``bias_correction`` (TRL's ``use_bias_correction_kl``): the term is r * k3,
          r = pi / pi_old not detached. E_{pi_old}[r k3] = E_pi[k3] = KL(pi || ref), so its
          gradient is grad KL(pi || ref): at r = 1, (k3 + 1 - pi_ref/pi) grad log pi =
          (log pi - log ref) grad log pi. The logged estimate is r * k3 too.
    """
    kl_tok = kl_penalty(logp, ref_logp, estimator)
    if estimator == "k1":
        return kl_tok.detach() * ratio, kl_tok
    if bias_correction:
        if estimator != "k3":
            raise ValueError(
                f"algorithm.use_bias_correction_kl: needs kl_estimator='k3', got {estimator!r}"
            )
        kl_tok = kl_tok * ratio
    return kl_tok, kl_tok


@dataclass
class LossOut:
    """The loss and its statistics. The statistics are detached 0-d tensors on the loss's
    device, never Python floats: reading one would wait for the device (the update reads them
    all once, at its end)."""

    loss: torch.Tensor
    clip_fraction: torch.Tensor
    ratio_mean: torch.Tensor
    ratio_max_dev: torch.Tensor  # max |ratio - 1| over real tokens (exactly 0 on a first step)
    kl: torch.Tensor | None  # mean per-token KL to the reference; None when beta == 0
    # float(loss) * report_scale is the chunk's loss before its accumulation weight (for logs)
    report_scale: float = 1


@dataclass(frozen=True)
class LossSettings:
    """The loss's own settings, the same for every chunk of a run (TRL's names)."""

    loss_type: str  # how token losses aggregate: grpo | dr_grpo | dapo | bnpo (module docstring)
    epsilon: float  # lower clip range: how far below 1 the ratio moves before its gradient stops
    epsilon_high: float | None = None  # upper clip range (None: epsilon); DAPO's clip-higher
    beta: float = 0.0  # weight of the KL to the reference (0: no reference is scored)
    kl_estimator: str = "k3"  # k1 | k2 | k3: which KL the penalty pulls down (kl_loss_term)
    delta: float | None = None  # cap on the unclipped ratio: bounds a negative advantage's loss
    importance_sampling_level: str = "token"  # a ratio per token, or one per sequence (GSPO)
    use_bias_correction_kl: bool = False  # k3 times the ratio: the pull becomes KL(pi || ref)


@dataclass(frozen=True)
class Denominators:
    """What one chunk's loss is divided and weighted by; the defaults give the chunk's own
    loss. In data parallel each is the whole minibatch's or chunk's, over every rank."""

    max_completion_length: int = 1  # dr_grpo: the largest budget among the samples' agents
    step_tokens: float | None = None  # dapo: loss tokens of the optimizer step (None: chunk's)
    chunk_size: int | None = None  # rows of this forward: its gradient-accumulation weight...
    minibatch_size: int | None = None  # ...over the rows of the optimizer step's minibatch
    chunk_tokens: float | None = None  # bnpo: loss tokens of the whole chunk (None: this one's)
    chunk_rows: int | None = None  # bnpo: rows of the whole chunk, its accumulation weight


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    settings: LossSettings,
    *,
    ref_logp: torch.Tensor | None = None,
    kl_logp: torch.Tensor | None = None,
    is_weights: torch.Tensor | None = None,
    denominators: Denominators | None = None,
) -> LossOut:
    """The clipped policy-gradient loss of one forward chunk, aggregated by ``loss_type``.

    With ``denominators.chunk_size`` and ``minibatch_size`` the loss is weighted for gradient
    accumulation over the minibatch's chunks (see the module docstring); without them it is the
    chunk's own. ``is_weights``: the detached importance weights (``teamrl.update.importance``;
    None: 1). ``kl_logp``: the policy's log-probs the KL compares with ``ref_logp`` (default
    ``logp``; under truncated scoring the update passes the full softmax's, as the reference's
    are).

    Only tokens with ``mask > 0`` enter the arithmetic: every input is first replaced by 0
    elsewhere (``torch.where``, not a product with the mask: a -inf log-prob there would give
    -inf - (-inf) = NaN, and 0 * NaN is NaN in the loss and in exp's backward alike).
    """
    s, d = settings, denominators or Denominators()
    live = mask > 0
    logp, old_logp = _live(logp, live), _live(old_logp, live)
    eps_high = s.epsilon if s.epsilon_high is None else s.epsilon_high
    log_ratio = logp - old_logp
    if s.importance_sampling_level == "sequence":  # GSPO: one length-normalised ratio per sample
        log_ratio = (log_ratio.sum(-1) / mask.sum(-1).clamp_min(1.0))[:, None]
        log_ratio = log_ratio.expand_as(logp)
    elif s.importance_sampling_level != "token":
        raise ValueError(
            "algorithm.importance_sampling_level: expected token|sequence, "
            f"got {s.importance_sampling_level!r}"
        )
    ratio = torch.exp(log_ratio)
    # one advantage per sample, broadcast over its tokens, or one per token (0 off the mask)
    adv = advantages[:, None] if advantages.ndim == 1 else _live(advantages, live)
    capped = ratio if s.delta is None else torch.clamp(ratio, max=s.delta)
    unclipped = capped * adv
    clipped = torch.clamp(ratio, 1 - s.epsilon, 1 + eps_high) * adv
    per_token = -torch.min(unclipped, clipped)
    if is_weights is not None:
        per_token = per_token * _live(is_weights.detach(), live)
    kl_tok = None
    if s.beta > 0:
        if ref_logp is None:
            raise ValueError("policy_loss: beta > 0 needs ref_logp")
        kl_logp = logp if kl_logp is None else _live(kl_logp, live)
        kl_term, kl_tok = kl_loss_term(
            kl_logp,
            _live(ref_logp, live),
            torch.exp(logp - old_logp) if s.kl_estimator == "k1" else ratio,
            s.kl_estimator,
            bias_correction=s.use_bias_correction_kl,
        )
        per_token = per_token + s.beta * kl_term

    tokens = mask.sum().clamp_min(1.0)
    if s.loss_type == "grpo":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)).mean()
    elif s.loss_type == "dr_grpo":
        loss = (per_token * mask).sum() / (mask.shape[0] * d.max_completion_length)
    elif s.loss_type == "dapo":
        loss = (per_token * mask).sum() / (d.step_tokens if d.step_tokens else tokens)
    elif s.loss_type == "bnpo":
        loss = (per_token * mask).sum() / (max(d.chunk_tokens, 1.0) if d.chunk_tokens else tokens)
    else:
        raise ValueError(
            f"algorithm.loss_type: expected grpo|dr_grpo|dapo|bnpo, got {s.loss_type!r}"
        )
    report_scale = 1
    if d.chunk_size is not None and d.minibatch_size is not None and s.loss_type != "dapo":
        rows = d.chunk_rows if s.loss_type == "bnpo" and d.chunk_rows else d.chunk_size
        loss = loss * rows / d.minibatch_size  # a mean over the chunk: weight by its share
        report_scale = d.minibatch_size / rows

    with torch.no_grad():
        is_clipped = ((ratio < 1 - s.epsilon) & (adv < 0)) | ((ratio > 1 + eps_high) & (adv > 0))
        if s.delta is not None:
            is_clipped |= (ratio > s.delta) & (adv < 0)
        clip_fraction = (is_clipped.float() * mask).sum() / tokens
        ratio_mean = (ratio * mask).sum() / tokens
        ratio_max_dev = ((ratio - 1).abs() * mask).max()
        kl = (kl_tok * mask).sum() / tokens if kl_tok is not None else None
    return LossOut(
        loss=loss,
        clip_fraction=clip_fraction,
        ratio_mean=ratio_mean,
        ratio_max_dev=ratio_max_dev,
        kl=kl,
        report_scale=report_scale,
    )


def _live(x: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
    """``x`` where ``live``, exactly 0 elsewhere (its gradient there is 0, never NaN)."""
    return torch.where(live, x, 0.0)
