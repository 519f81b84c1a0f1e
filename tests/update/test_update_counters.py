"""The update's cost, counted on a tiny bf16 model (benchmarks/update_counters.py has the
counters, and prints them at Qwen2.5-0.5B's shape for docs/performance.md):

- FLOPs of one ``update_policy`` at most 1.1x the minimum for the same rows (each prompt once,
  each completion once, one sequence per forward: no pad can exist), with no pad position in
  the forward;
- no float32 matmul wider than the LoRA rank on a bf16 model;
- dispatched operators per micro-batch at most 1.25x the raw loop's on the same rows;
- with every agent's adapter in one pass, each agent adds no more than its own loss,
  statistics and optimizer step (and the slicing of its gradients out of the stacked adapters),
  and the model's forward does not grow at all.

The rows are ragged on purpose (prompts of 6 and 20 tokens, completions of 2 to 12): the padded
update runs 1.5x the minimum there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from update_counters import (  # noqa: E402
    Counter,
    build,
    oracle_flops,
    ragged_samples,
    raw_loop,
    update_counts,
)

PROMPTS, COMPLETIONS = (6, 20), (2, 12, 5, 9)
MODEL = "tiny-llama-wide"  # 4 layers, 256 wide, grouped-query attention


def overrides(policies: str, **extra) -> list[str]:
    items = {
        "model.name_or_path": MODEL,
        "model.dtype": "bfloat16",
        "team.policies": policies,
        "team.agents": "[{name: alice, max_completion_length: 12}]",
        "log.progress_bar": "false",
        **extra,
    }
    return [f"{k}={v}" for k, v in items.items()]


def setup(policies: str, **extra):
    cfg, team, pol, settings = build(overrides(policies, **extra))
    rows = ragged_samples("alice", pol.name, PROMPTS, COMPLETIONS)
    return cfg, pol, settings, rows


def forward_inputs(model) -> list[torch.Tensor]:
    """Every forward's input_ids (a hook on the model)."""
    seen: list[torch.Tensor] = []
    model.register_forward_pre_hook(
        lambda _m, args, kwargs: seen.append(kwargs["input_ids"]), with_kwargs=True
    )
    return seen


@pytest.mark.parametrize("policies", ["lora", "shared"])
def test_the_update_runs_at_most_1_1x_the_minimum_flops_and_no_pad(policies):
    cfg, pol, settings, rows = setup(policies)
    inputs = forward_inputs(pol.model)
    flops, _ = update_counts(pol, rows, settings, max(COMPLETIONS))
    counted = inputs[len(inputs) // 2 :]  # the second of the two updates (the counted one)
    minimum, _ = oracle_flops(pol, rows, cfg.model.lora_compute_dtype)
    assert flops <= 1.1 * minimum, (flops, minimum, flops / minimum)
    # the counted update ran one forward (one pass, one minibatch, one chunk), and it held
    # exactly the real tokens: each prompt once and every completion, nothing else
    assert len(counted) == 1
    real = sorted(
        [t for s in rows for t in s.completion_ids]
        + [t for p in {tuple(s.prompt_ids) for s in rows} for t in p]
    )
    assert sorted(counted[0].reshape(-1).tolist()) == real


def test_the_padded_update_would_not_meet_the_bound():
    """The bound has teeth on these rows: the padded forward (train.padding_free=false, the
    update before packing) spends half again the minimum."""
    cfg, pol, settings, rows = setup("shared", **{"train.padding_free": "false"})
    flops, _ = update_counts(pol, rows, settings, max(COMPLETIONS))
    minimum, _ = oracle_flops(pol, rows, cfg.model.lora_compute_dtype)
    assert flops > 1.3 * minimum


def test_no_float32_matmul_wider_than_the_rank_on_a_bf16_model():
    cfg, pol, settings, rows = setup("lora")
    _, count = update_counts(pol, rows, settings, max(COMPLETIONS))
    assert len(count.matmuls) > 0
    assert {dtype for _, dtype, _ in count.matmuls} >= {torch.bfloat16}
    assert count.float32_matmuls(cfg.model.lora_r) == []
    # the detector sees them where they are: PEFT's own float32 branch (x cast to float32
    # for the down-projection, inner dimension = the hidden size)
    cfg, pol, settings, rows = setup("lora", **{"model.lora_compute_dtype": "adapter"})
    _, count = update_counts(pol, rows, settings, max(COMPLETIONS))
    assert count.float32_matmuls(cfg.model.lora_r) != []


@pytest.mark.parametrize("policies", ["lora", "shared"])
def test_operators_per_micro_batch_at_most_1_25x_the_raw_loop(policies):
    _, pol, settings, rows = setup(policies, **{"train.micro_batch_size": 4})
    _, count = update_counts(pol, rows, settings, max(COMPLETIONS))
    raw = raw_loop(pol, rows, 4, pol.engine.pad_id)  # the same 2 micro-batches, one step
    assert count.ops <= 1.25 * raw.ops, (count.ops, raw.ops, count.ops / raw.ops)


class ModelCounter(Counter):
    """A Counter that also counts the operators dispatched inside the model's forward."""

    def __init__(self, model):
        super().__init__()
        self.inside, self.model_ops = False, 0
        self.hooks = [
            model.register_forward_pre_hook(lambda *a: setattr(self, "inside", True)),
            model.register_forward_hook(lambda *a: setattr(self, "inside", False)),
        ]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.model_ops += self.inside
        return super().__torch_dispatch__(func, types, args, kwargs)


def one_pass(agents: int) -> tuple[ModelCounter, int]:
    """(counter of one joint update of ``agents`` LoRA agents with the same rows each, the
    number of trainable tensors of one agent)."""
    from teamrl.config import load_config
    from teamrl.team.optim import make_optimizer
    from teamrl.team.policies import Team
    from teamrl.update.joint import update_policies
    from teamrl.update.settings import update_settings

    names = ["alice", "bob", "carol"][:agents]
    team_agents = ", ".join(f"{{name: {n}, max_completion_length: 12}}" for n in names)
    extra = {
        "team.agents": f"[{team_agents}]",
        "train.one_pass_lora": "true",
        "train.micro_batch_size": 64,  # every agent's rows in one forward
    }
    torch.manual_seed(0)
    cfg = load_config(None, overrides("lora", **extra))
    team = Team(cfg)
    pols = [team.policies[team.policy_of[n]] for n in names]
    for p in pols:
        make_optimizer(p, cfg)
    settings = [update_settings(cfg, p.agents) for p in pols]
    work = [ragged_samples(n, p.name, PROMPTS, COMPLETIONS) for n, p in zip(names, pols)]
    widths = [max(COMPLETIONS)] * agents
    update_policies(pols, work, settings, step=0, max_completion_length=widths)
    with ModelCounter(pols[0].model) as count:
        update_policies(pols, work, settings, step=1, max_completion_length=widths)
    return count, len(pols[0].parameters())


def test_operators_do_not_grow_with_the_agents_beyond_their_own_steps():
    (one, tensors), (two, _), (three, _) = one_pass(1), one_pass(2), one_pass(3)
    # the model's forward is one forward whatever the number of agents
    assert one.model_ops == two.model_ops == three.model_ops > 0
    # each agent adds its loss, statistics and optimizer step: at most what a one-agent update
    # spends outside the model's forward and backward (measured below), plus, per trainable
    # tensor, the slice of its gradient out of the stacked adapters and that slice's copy into
    # a contiguous .grad (the backward of the routed forward's concatenation)
    own = one.ops - model_forward_and_backward_ops()
    for more, fewer in ((two, one), (three, two)):
        assert more.ops - fewer.ops <= own + 3 * tensors, (more.ops - fewer.ops, own, tensors)


def model_forward_and_backward_ops() -> int:
    """Operators of the one-agent joint update's forward and backward alone (the packed
    scoring of the same rows, routed, with a scalar loss)."""
    from teamrl.update.joint import routed_lora
    from teamrl.update.losses import collate, score_tokens
    from teamrl.update.packing import packed_forward

    _, pol, _, rows = setup("lora")
    pol.activate()
    pol.model.train()
    batch = collate(rows, pol.engine.pad_id, [0] * len(rows), packed=True)
    with routed_lora(pol.model, [pol.adapter], "model") as route, packed_forward(pol.model):
        for counted in (False, True):
            with Counter() if counted else torch.enable_grad() as count:
                scores = score_tokens(pol.model, batch, with_entropy=True, route=route)
                scores.logp.sum().backward()
    return count.ops
