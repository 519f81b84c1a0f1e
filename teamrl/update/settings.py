"""What one policy's update reads, frozen once per run: ``update_settings(cfg, agents)``.

The update never sees the whole ``Config``. Its execution (``teamrl.execution.local``, the Ray
worker in ``teamrl.scale.worker``) builds these once per policy and hands them to every
``update_policy`` call: the per-agent overrides are resolved here, and so is the switch of the
importance-sampling correction, the one place where the generation backend enters the maths
(another backend's numerics make its sampler differ from the trainer's softmax).
"""

from __future__ import annotations

from dataclasses import dataclass

from teamrl.config import Config, agent_setting
from teamrl.update.importance import correction_on
from teamrl.update.losses import LossSettings


@dataclass(frozen=True)
class UpdateSettings:
    """One policy's update settings (TRL's names where TRL has the setting)."""

    seed: int  # with the trainer step, seeds each pass's minibatch shuffle: resumes replay it
    num_iterations: int  # mu, passes over the samples (the policy's per-agent override)
    num_mini_batches: int  # optimizer steps per pass: the samples are split this many ways
    micro_batch_size: int | None  # rows per forward (gradient accumulation); None: the minibatch
    max_tokens_per_micro_batch: int | None  # forward-token budget: bounds activation memory
    padding_free: bool  # each forward one packed row, no pads (teamrl.update.packing)
    max_grad_norm: float | None  # gradient clipping norm (None: off)
    nan_policy: str  # a non-finite loss: 'error' raises, 'skip' drops the step and counts it
    fused_lora: bool  # each plain LoRA linear as one autograd node (teamrl.update.lora_linear)
    lora_compute_dtype: str  # the LoRA branch in the model's dtype ('model') or the adapters'
    bf16: bool  # adapted linears' products in bf16 on a float32 model (train.bf16)
    disable_dropout: bool  # p = 0: the ratio compares the same function on both sides
    mask_truncated_completions: bool  # completions cut without EOS give no loss (DAPO)
    truncated_scoring: bool  # score under the sampler's top-k/top-p set: pi_old equals q
    # the sampler/trainer mismatch correction is on (importance.correction_on, resolved from
    # the generation backend, the agents' sampling and the algorithm); TRL's
    # vllm_importance_sampling_correction
    importance_sampling_correction: bool
    importance_sampling_mode: str  # weight per token, sequence or geometric mean; cap or mask
    importance_sampling_cap: float  # C: the bound on pi_old / q, which bounds its variance
    top_p: dict[str, float]  # per agent: the sampler's nucleus (truncated scoring re-applies it)
    top_k: dict[str, int]  # per agent: the sampler's top-k (0: off)
    loss: LossSettings  # what policy_loss reads


def sampler_in_other_dtype(cfg: Config) -> bool:
    """The hf sampler runs a copy of the weights in another dtype than the trainer's
    (generation.sampler_dtype): its log-probs are not the trainer's. (train.bf16 is the
    mirror case, the trainer's products in bf16 and the sampler's in float32: update_settings
    counts it too.)"""
    g = cfg.generation
    return g.backend == "hf" and g.sampler_dtype not in ("model", cfg.model.dtype)


def update_settings(cfg: Config, agents: list[str]) -> UpdateSettings:
    """The settings of the update of the policy that serves ``agents`` (its names)."""
    a, t = cfg.algorithm, cfg.train
    mine = [ag for ag in cfg.team.agents if ag.name in agents]
    top_p = {ag.name: ag.top_p for ag in mine}
    top_k = {ag.name: ag.top_k for ag in mine}
    return UpdateSettings(
        seed=cfg.seed,
        num_iterations=agent_setting(cfg, agents, "num_iterations", a.num_iterations),
        num_mini_batches=t.num_mini_batches,
        micro_batch_size=t.micro_batch_size,
        max_tokens_per_micro_batch=t.max_tokens_per_micro_batch,
        padding_free=t.padding_free,
        max_grad_norm=t.max_grad_norm,
        nan_policy=t.nan_policy,
        fused_lora=t.fused_lora,
        lora_compute_dtype=cfg.model.lora_compute_dtype,
        bf16=t.bf16,
        disable_dropout=a.disable_dropout,
        mask_truncated_completions=a.mask_truncated_completions,
        truncated_scoring=a.truncated_scoring,
        importance_sampling_correction=correction_on(
            a,
            list(top_p.values()),
            list(top_k.values()),
            cfg.generation.backend,
            other_dtype=sampler_in_other_dtype(cfg) or t.bf16,
        ),
        importance_sampling_mode=a.importance_sampling_mode,
        importance_sampling_cap=a.importance_sampling_cap,
        top_p=top_p,
        top_k=top_k,
        loss=LossSettings(
            loss_type=a.loss_type,
            epsilon=a.epsilon,
            epsilon_high=a.epsilon_high,
            beta=a.beta,
            kl_estimator=a.kl_estimator,
            delta=a.delta,
            importance_sampling_level=a.importance_sampling_level,
            use_bias_correction_kl=a.use_bias_correction_kl,
        ),
    )
