"""The exactness criterion every "same update" test shares (the Ray replicas, FSDP shards,
token-budget micro-batches): the update under plain SGD (w <- w - lr * g, linear in the
gradient), compared with a tolerance relative to the update's own scale, so that only the order
of floating-point sums may differ, on any CPU."""

from __future__ import annotations

import torch


def snapshot(pol) -> dict:
    # a LoRA policy's state_dict holds the live adapter tensors: copy them
    return {k: v.detach().clone() for k, v in pol.state_dict().items()}


# Relative tolerance on the update. Reordered float32 sums differ by ~1e-7 of the summands'
# scale; what the update adds on top is the rounding of w + delta itself, |w| * 2**-24 per
# entry, which the test keeps small against the update by its learning rate (UPDATE_LR). The
# planted bugs change the update by 5% to 100% of its scale.
RTOL = 1e-3
UPDATE_LR = 0.5  # SGD with clipping (max_grad_norm=1): a step of norm <= 0.5, well above ulps
SGD = {"train.optim": "sgd", "train.learning_rate": UPDATE_LR, "train.max_grad_norm": "null"}


def assert_same_update(got: dict, want: dict, before: dict, what: str):
    """The update ``got - before`` equals ``want - before`` within RTOL of the update's largest
    entry, plus the float32 rounding of each weight (4 ulps of |w|)."""
    assert got.keys() == want.keys() == before.keys()
    scale = max(float((want[k] - before[k]).abs().max()) for k in want)
    assert scale > 0, f"{what}: the reference update is zero"
    worst = 0.0
    for k in want:
        step_got, step_want = got[k] - before[k], want[k] - before[k]
        rounding = 4 * torch.finfo(torch.float32).eps * before[k].abs()
        excess = (step_got - step_want).abs() - rounding
        worst = max(worst, float(excess.max()) / scale)
    assert worst <= RTOL, f"{what}: update differs by {worst:.3g} of its scale (> {RTOL})"
