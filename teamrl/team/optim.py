"""A policy's optimizer (``train.optim``) and its learning-rate schedule, shared by the
trainer and by the Ray workers that hold a policy's replicas."""

from __future__ import annotations

import math

import torch

from teamrl.config import Config, agent_setting
from teamrl.generation import versions
from teamrl.team.policies import Policy

# The optimizer steps a policy has taken, kept in its first parameter group: the optimizer's
# state dict (and so every checkpoint) carries it, and a resumed run counts on from there.
STEPS = "teamrl_steps"


def lr_lambda(cfg: Config):
    t = cfg.train

    def f(step: int) -> float:
        if step < t.warmup_steps:
            return (step + 1) / (t.warmup_steps + 1)
        if t.lr_scheduler_type == "constant":
            return 1.0
        span = max(1, t.max_steps - t.warmup_steps)
        progress = min(1.0, (step - t.warmup_steps) / span)
        if t.lr_scheduler_type == "linear":
            shape = 1.0 - progress
        else:
            shape = 0.5 * (1.0 + math.cos(math.pi * progress))
        return t.min_lr_ratio + (1 - t.min_lr_ratio) * shape

    return f


def make_optimizer(pol: Policy, cfg: Config) -> None:
    """The optimizer (``train.optim``) over the policy's trainable parameters, and its LR
    schedule (``lr_lambda``)."""
    t = cfg.train
    params = pol.parameters()
    if not params:
        raise RuntimeError(f"policy {pol.name!r} has no trainable parameters")
    lr = agent_setting(cfg, pol.agents, "learning_rate", t.learning_rate)
    if t.optim == "sgd":
        # w <- w - lr * g: the update is linear in the gradient, so two runs that sum the same
        # gradient in another order differ by rounding relative to the gradient's scale. AdamW's
        # first step, lr * g / (|g| + eps), turns rounding in a near-zero entry into a step of
        # size lr, which is why exactness checks use this optimizer.
        pol.optimizer = torch.optim.SGD(params, lr=lr, weight_decay=t.weight_decay)
    else:
        # One fused kernel for every parameter: on CUDA in any floating dtype (bf16 weights of a
        # full fine-tune included), on CPU for float32, where torch has it.
        on_cuda = all(p.is_cuda for p in params)
        fused = {"fused": True} if on_cuda or all(p.dtype == torch.float32 for p in params) else {}
        pol.optimizer = torch.optim.AdamW(
            params,
            lr=lr,
            betas=(t.adam_beta1, t.adam_beta2),
            weight_decay=t.weight_decay,
            **fused,
        )
    pol.scheduler = torch.optim.lr_scheduler.LambdaLR(pol.optimizer, lr_lambda(cfg))
    count_steps(pol)


def count_steps(pol: Policy) -> None:
    """Count the policy's optimizer steps (``optimizer_steps``), and make that count the
    version of the weights it trains (``teamrl.generation.versions``: what a reply names)."""
    opt = pol.optimizer
    opt.param_groups[0].setdefault(STEPS, 0)

    def counted(optimizer, args, kwargs) -> None:
        group = optimizer.param_groups[0]  # a new dict after load_state_dict: read it each time
        group[STEPS] = group.get(STEPS, 0) + 1

    opt.register_step_post_hook(counted)
    # the clock holds the optimizer only, never the model (versions keys its table on it); a
    # policy whose model lives in another process (None here) is versioned there
    if pol.model is not None:
        versions.attach(pol.model, pol.adapter, lambda: optimizer_steps(opt))


def optimizer_steps(optimizer: torch.optim.Optimizer) -> int:
    """The optimizer steps taken (0 for a checkpoint written before they were counted)."""
    return int(optimizer.param_groups[0].get(STEPS, 0))
