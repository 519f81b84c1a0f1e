"""Truncated importance sampling for the sampler/trainer mismatch.

The sampler draws token y from q (its own distribution: temperature-scaled, then restricted
to the top-k / top-p set and renormalised, or another engine's numerics), and records log q(y).
The trainer's old policy pi_old is the full temperature-scaled softmax. The clipped loss is
built for samples of pi_old, so with samples of q its gradient estimate is biased:

    E_q[A grad log pi]  !=  E_pi_old[A grad log pi]   (q puts no mass outside the nucleus).

Reweighting each token by pi_old(y) / q(y) restores the expectation on q's support; capping
the weight at C bounds its variance (truncated IS, Yao et al. 2025 "Your efficient RL
framework secretly brings you off-policy RL training"; TRL's
``vllm_importance_sampling_correction`` / ``vllm_importance_sampling_cap``):

    token_truncate:    w_t = min(pi_old(y_t) / q(y_t), C)
    sequence_truncate: w   = min(prod_t pi_old(y_t) / q(y_t), C)   for every token of a sample

The weights are detached: they rescale the policy-gradient term, they are not optimised.
"""

from __future__ import annotations

import torch

from teamrl.config import AlgorithmConfig


def sampler_differs(top_p: list[float], top_k: list[int], backend: str) -> bool:
    """Whether the sampler's distribution differs from the trainer's full softmax."""
    return backend != "hf" or any(p < 1 for p in top_p) or any(k > 0 for k in top_k)


def correction_on(a: AlgorithmConfig, top_p: list[float], top_k: list[int], backend: str) -> bool:
    """``importance_sampling_correction``, with None (auto) = on whenever the sampler differs
    from what the trainer scores: under ``truncated_scoring`` the trainer scores the same
    truncated distribution, so only another backend's numerics remain."""
    if a.importance_sampling_correction is not None:
        return a.importance_sampling_correction
    if a.truncated_scoring:
        return backend != "hf"
    return sampler_differs(top_p, top_k, backend)


def importance_weights(
    old_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, mode: str, cap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(detached weights (B, C), boolean "was capped" (B, C)) for ``mode`` and cap ``cap``."""
    log_w = (old_logp - sampler_logp).detach() * mask
    if mode == "sequence_truncate":
        log_w = log_w.sum(-1, keepdim=True).expand_as(old_logp)
    elif mode != "token_truncate":
        raise ValueError(
            "algorithm.importance_sampling_mode: expected token_truncate|sequence_truncate, "
            f"got {mode!r}"
        )
    raw = torch.exp(log_w)
    return torch.clamp(raw, max=cap), raw > cap


def mismatch_stats(
    old_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """How far the sampler is from the trainer, per real token (samples are drawn from q):

    logp_diff: mean |log pi_old - log q|; kl_sampler_k1: mean (log q - log pi_old), an
    estimate of KL(q || pi_old); kl_sampler_k3: mean (rho - log rho - 1), rho = pi_old / q,
    its non-negative, lower-variance estimate.
    """
    with torch.no_grad():
        d = (old_logp - sampler_logp) * mask
        n = mask.sum().clamp_min(1.0)
        return {
            "logp_diff": float(d.abs().sum() / n),
            "kl_sampler_k1": float((-d).sum() / n),
            "kl_sampler_k3": float(((torch.exp(d) - d - 1) * mask).sum() / n),
        }
