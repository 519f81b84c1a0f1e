"""What one update costs, counted rather than timed: FLOPs against the minimum, float32 matmuls
on a bf16 model, and dispatched operators against a raw forward/backward loop on the same rows.

    python benchmarks/update_counters.py                      # Qwen2.5-0.5B's shape, bf16, CPU
    python benchmarks/update_counters.py --model tiny-llama-wide --out /tmp/c   # seconds

Why counted. A GPU is lent by chance, minutes at a time; the update's cost on it is set by what
the update asks the device to do, and that can be counted on any CPU:

- **FLOPs** (``torch.utils.flop_counter.FlopCounterMode``) of one ``update_policy`` (one pass,
  one minibatch) against the *minimum* for the same samples: each distinct prompt run once and
  each completion once on top of its prompt's KV cache, one sequence at a time (no pad can
  exist), the vocabulary projected only where a completion token is predicted, then the
  backward that autograd needs for the trained parameters (for LoRA: input gradients and the
  adapters' gradients, no base weight gradient). That is ``oracle_flops``: the same model, the
  same linear implementation (fused LoRA), one sequence per forward.
- **float32 matmuls**: every matmul-family operator's input dtype and inner dimension. On a bf16
  model the only float32 products allowed are the LoRA adapters' own (inner dimension at most
  the rank): a float32 product over the hidden size would run at a fraction of the bf16 rate.
- **operators per micro-batch** (a ``TorchDispatchMode`` counts every dispatched operator: on
  a GPU each is at least one kernel launch) against ``raw_loop``: the hand-written loop of
  ``magrpo_step.RawStep`` on the same rows (left-padded sequences, one forward with
  ``logits_to_keep``, a float32 log-softmax, a masked mean, backward, clipping, one AdamW
  step), with PEFT's own LoRA forward for LoRA.

``tests/update/test_update_counters.py`` asserts the bounds on tiny models; this script prints
the same counters at a real shape (default: Qwen2.5-0.5B's published config, random weights, on
the CPU: the counts do not depend on the device or the weights) for docs/performance.md.
Output: ``--out`` .md and .json (default ``results/update_counters``) with date and machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

# matmul-family operators: (name, index of the first matmul operand). addmm/baddbmm/addmv take
# the added term first.
MATMULS = {
    "mm": 0,
    "bmm": 0,
    "matmul": 0,
    "mv": 0,
    "dot": 0,
    "vdot": 0,
    "linear": 0,
    "addmm": 1,
    "baddbmm": 1,
    "addmv": 1,
    "_scaled_dot_product_flash_attention_for_cpu": 0,
    "_scaled_dot_product_efficient_attention": 0,
    "_scaled_dot_product_flash_attention": 0,
    "_scaled_dot_product_cudnn_attention": 0,
    "_scaled_dot_product_attention_math": 0,
}


class Counter(TorchDispatchMode):
    """Counts every dispatched operator; records each matmul's (name, dtype, inner dimension),
    and the forward FLOPs of every attention call (4 B H Lq Lk D: the scores and the weighted
    sum, masked entries included; ``FlopCounterMode`` has no formula for the CPU's kernels)."""

    def __init__(self):
        super().__init__()
        self.ops = 0
        self.matmuls: list[tuple[str, torch.dtype, int]] = []
        self.attention_flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        name = func.__name__.split(".")[0]
        if name in MATMULS:
            x = args[MATMULS[name]]
            self.matmuls.append((name, x.dtype, int(x.shape[-1])))
            if name.startswith("_scaled_dot_product"):
                q, k = args[0], args[1]
                *batch, lq, d = q.shape
                self.attention_flops += (
                    4 * lq * int(k.shape[-2]) * d * int(torch.Size(batch).numel())
                )
        return func(*args, **(kwargs or {}))

    def float32_matmuls(self, max_inner: int) -> list[tuple[str, torch.dtype, int]]:
        """The float32 matmuls whose inner dimension exceeds ``max_inner``."""
        return [m for m in self.matmuls if m[1] == torch.float32 and m[2] > max_inner]


def ragged_samples(agent: str, policy: str, prompts, completions, seed: int = 0, vocab=60):
    """One sample per (prompt length, completion length) pair of ``prompts`` x
    ``completions``: every prompt continued by every completion length (a group per prompt)."""
    from teamrl.sample import Sample

    rng = random.Random(seed)
    out = []
    for p, plen in enumerate(prompts):
        prompt = [rng.randrange(3, vocab) for _ in range(plen)]
        for n in completions:
            out.append(
                Sample(
                    agent=agent,
                    policy=policy,
                    turn=0,
                    group=p,
                    prompt_ids=prompt,
                    completion_ids=[rng.randrange(3, vocab) for _ in range(n)],
                    sampler_logprobs=[-rng.random() for _ in range(n)],
                    advantage=rng.uniform(-1, 1),
                )
            )
    return out


def build(overrides: list[str]):
    """(cfg, team, policy of the first agent, its update settings) from config overrides."""
    from teamrl.config import load_config
    from teamrl.team.optim import make_optimizer
    from teamrl.team.policies import Team
    from teamrl.update.settings import update_settings

    torch.manual_seed(0)
    cfg = load_config(None, overrides)
    team = Team(cfg)
    first = cfg.team.agents[0].name
    pol = team.policies[team.policy_of[first]]
    make_optimizer(pol, cfg)
    return cfg, team, pol, update_settings(cfg, pol.agents)


def update_counts(pol, samples, settings, max_len: int) -> tuple[int, Counter]:
    """(FLOPs, counter) of one ``update_policy``, after an uncounted one (lazy inits)."""
    from teamrl.update.policy import update_policy

    update_policy(pol, samples, settings, step=0, max_completion_length=max_len)
    with Counter() as count, FlopCounterMode(display=False) as flops:
        update_policy(pol, samples, settings, step=1, max_completion_length=max_len)
    return flops.get_total_flops(), count


def oracle_flops(pol, samples, lora_compute_dtype: str = "model") -> tuple[int, int]:
    """The minimum FLOPs of one forward/backward of ``samples`` (module docstring): each
    distinct prompt once, each completion once over a copy of its prompt's cache, one sequence
    per forward, the same fused LoRA linears as the update. (matmul FLOPs, attention forward
    FLOPs as ``Counter`` counts them)."""
    from transformers import DynamicCache

    from teamrl.tensors import cache_kwargs, output_cache
    from teamrl.update.chosen_logprob import chosen_logprob
    from teamrl.update.lora_linear import fused_lora

    pol.activate()
    model = pol.model
    model.train()
    device = next(model.parameters()).device
    groups: dict[tuple[int, ...], list] = {}
    for s in samples:
        groups.setdefault(tuple(s.prompt_ids), []).append(s)
    with (
        Counter() as count,
        FlopCounterMode(display=False) as flops,
        fused_lora(model, lora_compute_dtype),
    ):
        total = torch.zeros((), device=device)
        for prompt, members in groups.items():
            p = len(prompt)
            ids = torch.tensor([prompt], device=device)
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            for s in members:
                c = len(s.completion_ids)
                if c == 0:
                    continue
                first = torch.tensor([[s.completion_ids[0]]], device=device)
                total = total + chosen_logprob(out.logits[:, -1:], first).sum()
                if c == 1:
                    continue
                cache = DynamicCache()  # the prompt's keys and values, shared, not recomputed
                for i, layer in enumerate(output_cache(out).layers):
                    cache.update(layer.keys, layer.values, i)
                comp = torch.tensor([s.completion_ids], device=device)
                more = model(
                    input_ids=comp,
                    position_ids=torch.arange(p, p + c, device=device)[None],
                    use_cache=True,
                    logits_to_keep=torch.arange(c - 1, device=device),
                    **cache_kwargs(model, cache),
                )
                total = total + chosen_logprob(more.logits, comp[:, 1:]).sum()
        total.backward()
    model.zero_grad(set_to_none=True)
    return flops.get_total_flops(), count.attention_flops


def raw_loop(pol, samples, micro_batch_size: int | None = None, pad_id: int = 0) -> Counter:
    """Operators of the raw loop's optimizer step over ``samples`` (module docstring), in
    micro-batches of ``micro_batch_size`` rows, after an uncounted one."""
    from teamrl.tensors import left_pad

    pol.activate()
    model = pol.model
    model.train()
    device = next(model.parameters()).device
    size = micro_batch_size or len(samples)
    chunks = [samples[i : i + size] for i in range(0, len(samples), size)]

    def step():
        pol.optimizer.zero_grad(set_to_none=True)
        for chunk in chunks:
            ids, mask = left_pad(
                [list(s.prompt_ids) + list(s.completion_ids) for s in chunk], pad_id
            )
            width = max(len(s.completion_ids) for s in chunk)
            pads = [width - len(s.completion_ids) for s in chunk]
            comp = torch.tensor(
                [[pad_id] * k + list(s.completion_ids) for s, k in zip(chunk, pads)]
            )
            real = torch.tensor([[0.0] * k + [1.0] * (width - k) for k in pads])
            adv = torch.tensor([s.advantage for s in chunk])
            ids, mask, comp, real, adv = (t.to(device) for t in (ids, mask, comp, real, adv))
            out = model(input_ids=ids, attention_mask=mask, logits_to_keep=width + 1)
            logp = torch.log_softmax(out.logits[:, :-1].float(), -1)
            logp = logp.gather(-1, comp[..., None])[..., 0]
            per_row = (logp * adv[:, None] * real).sum(-1) / real.sum(-1).clamp_min(1.0)
            (-per_row.sum() / len(samples)).backward()
        torch.nn.utils.clip_grad_norm_(pol.parameters(), 1.0)
        pol.optimizer.step()

    step()
    with Counter() as count:
        step()
    return count


def lora_rank(cfg) -> int:
    return cfg.model.lora_r


# ------------------------------------------------------------------------------ the benchmark
SHAPE = {"prompts": (48, 80), "completions": (12, 32, 20, 56)}  # ragged on purpose


def measure(model: str, policies: str, packed: bool, micro: int | None) -> dict:
    """The counters of one contender: teamrl's update (packed or padded) on ragged rows."""
    overrides = [
        f"model.name_or_path={model}",
        "model.dtype=bfloat16",
        f"team.policies={policies}",
        "team.agents=[{name: alice, max_completion_length: 128}]",
        f"train.padding_free={packed}",
        f"train.micro_batch_size={micro if micro else 'null'}",
        "log.progress_bar=false",
    ]
    cfg, _team, pol, settings = build(overrides)
    rows = ragged_samples("alice", pol.name, SHAPE["prompts"], SHAPE["completions"], vocab=250)
    flops, count = update_counts(pol, rows, settings, 128)
    minimum, min_attention = oracle_flops(pol, rows, cfg.model.lora_compute_dtype)
    raw = raw_loop(pol, rows, micro, pol.engine.pad_id)
    n_micro = -(-len(rows) // micro) if micro else 1
    real_tokens = sum(SHAPE["prompts"]) + len(SHAPE["prompts"]) * sum(SHAPE["completions"])
    trained = len(SHAPE["prompts"]) * sum(SHAPE["completions"])
    return {
        "policies": policies,
        "padding_free": packed,
        "micro_batches": n_micro,
        "flops": flops,
        "min_flops": minimum,
        "flops_ratio": flops / minimum,
        "flops_per_trained_token": flops / trained,
        "real_tokens": real_tokens,
        "attention_flops": count.attention_flops,
        "min_attention_flops": min_attention,
        "attention_ratio": count.attention_flops / min_attention,
        "fp32_matmuls_over_rank": len(count.float32_matmuls(lora_rank(cfg))),
        "ops_per_micro_batch": count.ops / n_micro,
        "raw_ops_per_micro_batch": raw.ops / n_micro,
        "ops_ratio": count.ops / raw.ops,
    }


def main() -> None:
    from rounds import provenance

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model",
        default="qwen2.5-0.5b",
        help="a gpu_generation.CONFIGS shape, or a teamrl model (tiny-llama-wide, a folder)",
    )
    ap.add_argument("--micro-batch-size", type=int, default=4)
    ap.add_argument("--out", default=str(HERE / "results" / "update_counters"))
    args = ap.parse_args()
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        from gpu_generation import CONFIGS

        if model in CONFIGS:  # random weights at the published shape, no hub
            from gpu_check import write_model

            model = str(write_model(args.model, Path(tmp) / "model", False, "cpu", "bfloat16"))
        rows = [
            measure(model, policies, packed, args.micro_batch_size)
            for policies in ("lora", "shared")
            for packed in (False, True)
        ]
    report = {"model": args.model, "shape": SHAPE, "rows": rows}
    report.update(provenance(None, args, load_start))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(render(report))
    print(render(report))


def render(report: dict) -> str:
    shape = report["shape"]
    lines = [
        f"# Update counters: {report['model']}, bf16",
        "",
        f"{report['date']} on {report['machine']['cpu']} (torch {report['machine']['torch']}); "
        f"`python benchmarks/update_counters.py --model {report['model']}`. Rows: prompts of "
        f"{', '.join(map(str, shape['prompts']))} tokens, each continued by completions of "
        f"{', '.join(map(str, shape['completions']))} tokens (one agent); one update_policy "
        "(one pass, one minibatch, micro-batches of 4 rows). Minimum FLOPs: each prompt once, "
        "each completion once on its prompt's cache, one sequence per forward "
        "(`oracle_flops`). Raw loop: left-padded rows, one forward/backward per micro-batch, "
        "one AdamW step.",
        "",
        "| policies | padding_free | matmul FLOPs / minimum | attention FLOPs / minimum | "
        "GFLOP per trained token | float32 matmuls over the rank | operators per micro-batch "
        "| raw loop's | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['policies']} | {r['padding_free']} | {r['flops_ratio']:.3f} | "
            f"{r['attention_ratio']:.2f} | "
            f"{r['flops_per_trained_token'] / 1e9:.2f} | {r['fp32_matmuls_over_rank']} | "
            f"{r['ops_per_micro_batch']:.0f} | {r['raw_ops_per_micro_batch']:.0f} | "
            f"{r['ops_ratio']:.2f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
