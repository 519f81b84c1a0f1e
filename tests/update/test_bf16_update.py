"""Mixed precision in the update (``train.bf16``): on a float32 model with LoRA adapters, each
adapted linear's products run in bfloat16 on a bf16 copy of its frozen base weight, and
everything else (the residual stream, norms, attention, logits, adapters, optimizer) stays
float32 (teamrl.update.lora_linear).

By hand on values bf16 holds exactly (so no CPU's rounding enters), then that the products
really see bf16 inputs, which products run in which dtype over a whole update, that the copy is
made once and remade when the weight changes, that one update is the float32 update up to bf16
rounding, and the settings it refuses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from teamrl.config import ConfigError, load_config
from teamrl.update import lora_linear as ll
from teamrl.update.policy import update_policy

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from update_counters import build, ragged_samples  # noqa: E402

BF16 = torch.bfloat16
ALICE = "{name: alice, max_completion_length: 12}"


def test_values_and_gradients_by_hand_on_a_bf16_copy():
    # the by-hand case of test_lora_linear, every value exact in bf16: x = (1, 2),
    # W rows (1, 0), (0, 1), (1, 1); A = (1, 1); B = (1, 0, 2)^T; s = 2; b = (0.5, -1, 0):
    # y = W x + s (A x) B + b = (7.5, 1, 15); with g = 1: dx = (8, 8), dA = (6, 12), dB = 6.
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    bias = torch.tensor([0.5, -1.0, 0.0])
    a = torch.tensor([[1.0, 1.0]], requires_grad=True)
    b = torch.tensor([[1.0], [0.0], [2.0]], requires_grad=True)
    y = ll.lora_linear(x, w.to(BF16), bias, a, b, 2.0, BF16)
    assert y.dtype == torch.float32  # the residual stream stays float32
    assert y.tolist() == [[7.5, 1.0, 15.0]]
    y.sum().backward()
    assert x.grad.dtype == a.grad.dtype == b.grad.dtype == torch.float32
    assert x.grad.tolist() == [[8.0, 8.0]]
    assert a.grad.tolist() == [[6.0, 12.0]]
    assert b.grad.tolist() == [[6.0], [6.0], [6.0]]


def test_the_products_see_bf16_inputs_and_gradients():
    # 1 + 2**-10 is between two bf16 values (8 significant bits): the products see 1.0.
    # float32 would give y = 1 + 2**-10 + 2 * (1 + 2**-10) and dx = 1 + 2 * 2 * (1 + 2**-10)...
    eps = 2.0**-10
    x = torch.tensor([[1.0 + eps]], requires_grad=True)
    w = torch.tensor([[1.0]])
    a = torch.tensor([[1.0]], requires_grad=True)
    b = torch.tensor([[2.0]], requires_grad=True)
    y = ll.lora_linear(x, w.to(BF16), None, a, b, 1.0, BF16)
    assert y.tolist() == [[3.0]]  # 1 * 1 + (1 * 1) * 2, from the rounded x
    # an incoming gradient of 1 + 2**-10 is rounded too: dx = g W + g B A = 1 + 2 = 3
    y.backward(torch.tensor([[1.0 + eps]]))
    assert x.grad.tolist() == [[3.0]]
    assert a.grad.tolist() == [[2.0]]  # (g B) x = 2 * 1, rounded x and g
    assert b.grad.tolist() == [[1.0]]  # g (A x) = 1 * 1
    # the float32 path keeps them: the same call without the copy
    x32 = torch.tensor([[1.0 + eps]])
    assert ll.lora_linear(x32, w, None, a, b, 1.0).item() == pytest.approx(3 * (1 + eps), 1e-7)


class MatmulShapes(TorchDispatchMode):
    """Each matmul's dtype and its operands' shapes."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[torch.dtype, tuple, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in ("mm", "addmm", "bmm", "matmul"):
            x, y = (args[1], args[2]) if name == "addmm" else (args[0], args[1])
            self.seen.append((x.dtype, tuple(x.shape), tuple(y.shape)))
        return func(*args, **(kwargs or {}))


def setup(bf16: bool, **extra):
    items = {
        "model.name_or_path": "tiny-llama-wide",
        "team.policies": "lora",
        "team.agents": f"[{ALICE}]",
        "train.bf16": str(bf16).lower(),
        "train.optim": "sgd",
        "train.learning_rate": "0.1",
        "train.max_grad_norm": "null",
        "log.progress_bar": "false",
        **extra,
    }
    cfg, team, pol, settings = build([f"{k}={v}" for k, v in items.items()])
    rows = ragged_samples("alice", pol.name, (6, 20), (2, 12, 5, 9))
    return cfg, pol, settings, rows


def adapters(pol) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in pol.model.named_parameters() if p.requires_grad}


def test_every_adapted_product_runs_in_bf16_and_the_logits_in_float32():
    cfg, pol, settings, rows = setup(True)
    vocab, rank = pol.model.config.vocab_size, cfg.model.lora_r
    with MatmulShapes() as mode:
        update_policy(pol, rows, settings, step=0, max_completion_length=12)
    wide = [m for m in mode.seen if m[1][-1] > rank]  # inner dimension above the rank
    in_bf16 = [m for m in wide if m[0] == BF16]
    # 4 layers x 7 adapted linears, each a base product forward and dL/dx backward
    assert len(in_bf16) >= 4 * 7 * 2
    # what stays float32 is the logits' product and its backward (the vocabulary's size in
    # an operand), nothing else that is wider than the rank
    left = [m for m in wide if m[0] == torch.float32 and vocab not in m[1] + m[2]]
    assert left == []
    # and the float32 update has none of them in bf16
    cfg, pol, settings, rows = setup(False)
    with MatmulShapes() as mode:
        update_policy(pol, rows, settings, step=0, max_completion_length=12)
    assert all(m[0] == torch.float32 for m in mode.seen)


def test_the_base_copy_is_made_once_and_remade_when_the_weight_changes():
    cfg, pol, settings, rows = setup(True)
    layer = next(m for m in pol.model.modules() if hasattr(m, "lora_A"))
    base = layer.base_layer
    update_policy(pol, rows, settings, step=0, max_completion_length=12)
    first = ll.base_copy(base, BF16)
    assert first.dtype == BF16 and torch.equal(first, base.weight.to(BF16))
    update_policy(pol, rows, settings, step=1, max_completion_length=12)
    assert ll.base_copy(base, BF16) is first  # no new cast of the weights per update
    with torch.no_grad():
        base.weight.mul_(2.0)  # an in-place load: a new version of the same tensor
    again = ll.base_copy(base, BF16)
    assert again is not first and torch.equal(again, base.weight.to(BF16))


def test_two_updates_are_the_float32_updates_up_to_bf16_rounding():
    # two, so that the adapters' A matrices move too (B starts at 0, so A's first gradient is
    # 0). The rows' sampler log-probs are made up, so the importance-sampling correction that
    # train.bf16 turns on would weigh them by exp(old - q), not by 1: both runs without it.
    off = {"algorithm.importance_sampling_correction": "false"}
    deltas = {}
    for bf16 in (False, True):
        cfg, pol, settings, rows = setup(bf16, **off)
        before = adapters(pol)
        for step in (0, 1):
            out = update_policy(pol, rows, settings, step=step, max_completion_length=12)
            assert out.metrics["ratio_dev_first_pass"] == 0.0  # old log-probs: its own forward
        after = adapters(pol)
        assert all(p.dtype == torch.float32 for p in after.values())
        deltas[bf16] = {k: (after[k] - before[k]).reshape(-1) for k in before}
    for part in ("lora_A", "lora_B"):
        d32 = torch.cat([v for k, v in deltas[False].items() if part in k])
        d16 = torch.cat([v for k, v in deltas[True].items() if part in k])
        assert d32.norm() > 0
        # bf16 rounds each product's inputs to 8 significant bits (relative 2^-9): the update's
        # direction and size stay within a fraction of a percent (0.99998 on this CPU)
        cosine = float(d32 @ d16 / (d32.norm() * d16.norm()))
        assert cosine > 0.999, (part, cosine)
        assert abs(float(d16.norm() / d32.norm()) - 1) < 0.02, part


def test_it_turns_the_importance_sampling_correction_on():
    # the sampler stays float32: its log-probs are no longer the trainer's
    _, _, on, _ = setup(True)
    _, _, off, _ = setup(False)
    assert on.bf16 and on.importance_sampling_correction
    assert not off.bf16 and not off.importance_sampling_correction


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"model.dtype": "bfloat16"}, "model.dtype is 'bfloat16'"),
        ({"team.policies": "shared"}, "team.policies='shared'"),
        ({"train.fused_lora": "false"}, "train.fused_lora=false"),
        ({"train.one_pass_lora": "true"}, "train.one_pass_lora"),
    ],
)
def test_settings_it_cannot_reach_are_one_line_errors(extra, named):
    items = {"model.name_or_path": "tiny-llama", "train.bf16": "true", **extra}
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"{k}={v}" for k, v in items.items()])
    msg = str(err.value)
    assert msg.startswith("train.bf16") and named in msg and "\n" not in msg
    # use_peft freezes the base of a shared model: allowed
    load_config(None, ["model.name_or_path=tiny-llama", "train.bf16=true",
                       "team.policies=shared", "model.use_peft=true"])  # fmt: skip


def test_the_memory_estimate_counts_the_copy_the_update_makes():
    from teamrl.preflight import estimate_memory, meta_model, model_config_of

    # tiny-llama: hidden 64, 2 layers, k/v width 2 heads x 16 = 32, MLP 128: each layer's
    # seven targets hold 2 * 64^2 + 2 * 64 * 32 + 3 * 64 * 128 = 36,864 weights
    by_hand = 2 * (2 * 64**2 + 2 * 64 * 32 + 3 * 64 * 128)
    base = ["model.name_or_path=tiny-llama", "team.policies=lora", f"team.agents=[{ALICE}]"]
    estimates = {}
    for bf16 in (False, True):
        cfg = load_config(None, [*base, f"train.bf16={str(bf16).lower()}"])
        models = {"tiny-llama": meta_model(model_config_of(cfg, "tiny-llama"))}
        estimates[bf16] = estimate_memory(cfg, models, prompt_len=16)
    assert estimates[True].weights - estimates[False].weights == 2 * by_hand  # bf16 bytes
    # and that is the copy an update makes
    cfg, pol, settings, rows = setup(True, **{"model.name_or_path": "tiny-llama"})
    update_policy(pol, rows, settings, step=0, max_completion_length=12)
    layers = [m.base_layer for m in pol.model.modules() if hasattr(m, "lora_A")]
    assert sum(ll.base_copy(b, BF16).numel() for b in layers) == by_hand
