"""The importance-sampling modes for the sampler mismatch, pinned by hand (issue 20, 4c/4e).

Under top-p alone every sampled token's ratio pi_old / q is the nucleus mass m <= 1. With
m = 0.9 on every token the exact sequence ratio is 0.9^n: 0.6561 at 4 tokens, 0.18530 at 16,
0.0063627 at 48, far under any cap >= 1, so the sequence modes shrink long completions by
orders of magnitude; the token and geometric (GSPO-style, length-normalised) modes give 0.9
at any length.
"""

from __future__ import annotations

import math

import pytest
import torch

from teamrl.config import AlgorithmConfig, load_config
from teamrl.update.importance import MODES, importance_weights, mismatch_stats

LENGTHS = (4, 16, 48)
# 0.9^4, 0.9^16, 0.9^48, multiplied out by hand
SEQUENCE = {4: 0.6561, 16: 0.1853020188851841, 48: 0.006362685441135942}


def ragged(log_rho: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three samples of 4, 16 and 48 tokens in one padded (3, 48) batch, log rho_t = log_rho
    on every real token; pads hold -inf (what truncated scoring gives a pad) and q = 0."""
    mask = torch.zeros(3, 48)
    for i, n in enumerate(LENGTHS):
        mask[i, :n] = 1.0
    q = torch.where(mask > 0, math.log(0.5), 0.0)
    old = torch.where(mask > 0, math.log(0.5) + log_rho, float("-inf"))
    return old, q, mask


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_at_4_16_and_48_tokens_under_top_p(mode):
    old, q, mask = ragged(math.log(0.9))
    w, over = importance_weights(old, q, mask, mode, cap=2.0)
    want = {
        "token": {n: 0.9 for n in LENGTHS},
        "sequence": SEQUENCE,
        "geometric": {n: 0.9 for n in LENGTHS},
    }[mode.rpartition("_")[0]]
    for i, n in enumerate(LENGTHS):
        assert w[i, :n].tolist() == pytest.approx([want[n]] * n, rel=1e-5)
    assert not over.any()  # <= 1 < C: the cap never engages, truncate and mask agree
    assert torch.isfinite(w).all()  # the -inf pads never entered a sum


@pytest.mark.parametrize(
    "mode, want",
    [
        # per-token ratio 1.5, cap 2: 1.5^4 = 5.0625 > 2 for the whole sequence
        ("token_truncate", 1.5),
        ("token_mask", 1.5),
        ("sequence_truncate", 2.0),  # capped
        ("sequence_mask", 0.0),  # dropped
        ("geometric_truncate", 1.5),
        ("geometric_mask", 1.5),
    ],
)
def test_truncate_caps_and_mask_drops_above_the_cap(mode, want):
    old = torch.full((1, 4), math.log(0.6))
    q = torch.full((1, 4), math.log(0.4))  # rho = 0.6 / 0.4 = 1.5 per token
    w, over = importance_weights(old, q, torch.ones(1, 4), mode, cap=2.0)
    assert w[0].tolist() == pytest.approx([want] * 4)
    assert over.all() == mode.startswith("sequence")


@pytest.mark.parametrize(
    "mode, want", [("token_truncate", 2.0), ("token_mask", 0.0), ("geometric_truncate", 2.0),
                   ("geometric_mask", 0.0)],
)  # fmt: skip
def test_a_ratio_of_3_per_token_is_capped_or_dropped(mode, want):
    old = torch.full((1, 2), math.log(0.9))
    q = torch.full((1, 2), math.log(0.3))  # rho = 3
    w, _ = importance_weights(old, q, torch.ones(1, 2), mode, cap=2.0)
    assert w[0].tolist() == pytest.approx([want] * 2)


def test_an_unknown_mode_is_named():
    one = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="algorithm.importance_sampling_mode: .*'seq'"):
        importance_weights(one, one, one, "seq", 2.0)


def test_mismatch_stats_ignore_minus_inf_pads():
    old, q, mask = ragged(math.log(0.9))
    stats = mismatch_stats(old, q, mask)
    d = math.log(0.9)  # log pi_old - log q on each of the 68 real tokens
    assert stats["logp_diff"] == pytest.approx(-d)
    assert stats["kl_sampler_k1"] == pytest.approx(-d)
    assert stats["kl_sampler_k3"] == pytest.approx(0.9 - d - 1, abs=1e-6)  # float32: 0.0054


def test_no_default_or_shipped_config_collapses():
    """The default, and every shipped config, uses a mode that does not shrink with length."""
    from importlib.resources import files

    assert AlgorithmConfig().importance_sampling_mode == "token_truncate"
    names = [p.name.removesuffix(".yaml") for p in files("teamrl.configs").iterdir()
             if p.name.endswith(".yaml")]  # fmt: skip
    assert names
    for name in names:
        assert not load_config(name).algorithm.importance_sampling_mode.startswith("sequence")
