"""Importance sampling for the sampler/trainer mismatch.

The sampler draws token y from q (its own distribution: temperature-scaled, then restricted
to the top-k / top-p set and renormalised, or another engine's numerics), and records log q(y).
The trainer's old policy pi_old is the full temperature-scaled softmax. The clipped loss is
built for samples of pi_old, so with samples of q its gradient estimate is biased:

    E_q[A grad log pi]  !=  E_pi_old[A grad log pi]   (q puts no mass outside the nucleus).

Reweighting by pi_old / q restores the expectation on q's support; bounding the weight by C
bounds its variance (truncated IS, Yao et al. 2025 "Your efficient RL framework secretly
brings you off-policy RL training"; TRL's ``vllm_importance_sampling_correction`` /
``vllm_importance_sampling_mode`` / ``vllm_importance_sampling_clip_max``). With
rho_t = pi_old(y_t) / q(y_t) over the n real tokens of a sample, ``mode`` is
<granularity>_<constraint>:

    token:      w_t = rho_t                              (each token its own ratio)
    sequence:   w   = prod_t rho_t                        (the exact sequence ratio)
    geometric:  w   = (prod_t rho_t)^(1/n) = exp(mean_t log rho_t)   (length-normalised, GSPO's)

    truncate:   min(w, C)                                 (TRL's *_truncate)
    mask:       w if w <= C else 0                        (TRL's *_mask: drop, not shrink)

Under top-p alone rho_t = m_t <= 1, the nucleus mass at step t, so the sequence ratio falls
geometrically with length (m = 0.9: 0.66 at 4 tokens, 0.19 at 16, 0.0064 at 48) and the cap
never engages: ``sequence_*`` down-weights long completions by orders of magnitude. The
token and geometric weights stay near m at any length. docs/algorithms/update.md has the bias
and variance of each mode.

The weights are detached: they rescale the policy-gradient term, they are not optimised.
"""

from __future__ import annotations

import torch

from teamrl.config import AlgorithmConfig


def sampler_differs(
    top_p: list[float], top_k: list[int], backend: str, other_dtype: bool = False
) -> bool:
    """Whether the sampler's distribution differs from the trainer's full softmax (another
    backend, a truncated set, or the hf sampler in another dtype than the trainer's)."""
    numerics = backend != "hf" or other_dtype
    return numerics or any(p < 1 for p in top_p) or any(k > 0 for k in top_k)


def correction_on(
    a: AlgorithmConfig,
    top_p: list[float],
    top_k: list[int],
    backend: str,
    other_dtype: bool = False,
) -> bool:
    """``importance_sampling_correction``, with None (auto) = on whenever the sampler differs
    from what the trainer scores: under ``truncated_scoring`` the trainer scores the same
    truncated distribution, so only another backend's numerics (or a sampler in another dtype,
    ``other_dtype``: generation.sampler_dtype) remain; and always in asynchronous training
    (``max_staleness`` > 0), whose sampler may be updates behind."""
    if a.importance_sampling_correction is not None:
        return a.importance_sampling_correction
    if a.max_staleness > 0:
        return True
    if a.truncated_scoring:
        return backend != "hf" or other_dtype
    return sampler_differs(top_p, top_k, backend, other_dtype)


GRANULARITIES = ("token", "sequence", "geometric")
CONSTRAINTS = ("truncate", "mask")
MODES = tuple(f"{g}_{c}" for g in GRANULARITIES for c in CONSTRAINTS)


def importance_weights(
    old_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, mode: str, cap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(detached weights (B, C), boolean "above the cap" (B, C)) for ``mode`` and cap ``cap``.

    Pads (mask 0) never enter the sums: their log ratio is set to 0 with ``torch.where``.
    """
    granularity, _, constraint = mode.rpartition("_")
    if granularity not in GRANULARITIES or constraint not in CONSTRAINTS:
        raise ValueError(
            f"algorithm.importance_sampling_mode: expected one of {'|'.join(MODES)}, got {mode!r}"
        )
    log_w = torch.where(mask > 0, old_logp - sampler_logp, 0.0).detach()
    if granularity != "token":
        log_w = log_w.sum(-1, keepdim=True)
        if granularity == "geometric":  # mean over the sample's real tokens
            log_w = log_w / mask.sum(-1, keepdim=True).clamp_min(1.0)
        log_w = log_w.expand_as(old_logp)
    raw = torch.exp(log_w)
    over = raw > cap
    if constraint == "truncate":
        return torch.clamp(raw, max=cap), over
    return torch.where(over, 0.0, raw), over


def mismatch_stats(
    old_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """How far the sampler is from the trainer, per real token (samples are drawn from q):

    logp_diff: mean |log pi_old - log q|; kl_sampler_k1: mean (log q - log pi_old), an
    estimate of KL(q || pi_old); kl_sampler_k3: mean (rho - log rho - 1), rho = pi_old / q,
    its non-negative, lower-variance estimate. Each a 0-d tensor on the device (read once,
    with the update's other statistics).
    """
    with torch.no_grad():
        d = torch.where(mask > 0, old_logp - sampler_logp, 0.0)  # pads never enter
        n = mask.sum().clamp_min(1.0)
        return {
            "logp_diff": d.abs().sum() / n,
            "kl_sampler_k1": (-d).sum() / n,
            "kl_sampler_k3": ((torch.exp(d) - d - 1) * mask).sum() / n,
        }
