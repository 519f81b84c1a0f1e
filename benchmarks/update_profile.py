"""Where an update's time goes: one fixed batch per policy mode, its update timed in rounds and
profiled by operator class, beside its FLOP floor.

    python benchmarks/update_profile.py                                  # SmolLM2-135M, 5 rounds
    python benchmarks/update_profile.py --model tiny-llama --rounds 1    # smoke

Why a fixed batch. ``roofline.py`` times each round's update on a new rollout, so prompts and
completion lengths change from round to round (the same mode's update spread 20 % on its own).
Here each mode samples one rollout once (the roofline's setting: the TLDR writers, two agents,
G samples of exactly ``--new-tokens`` tokens) and every round updates on those same samples: the
weights move, the work does not. Modes alternate within each round (``rounds.round_order``).

Then one profiled update per mode (``torch.profiler``, each operator's self CPU time, so nothing
is counted twice), summed into classes (``op_class``):

- matmul: the products (mm, addmm, bmm, linear's kernels, oneDNN's);
- attention: scaled-dot-product attention, forward and backward;
- elementwise: arithmetic, activations, norms, softmax and their backward kernels;
- memory: copies, fills, concatenation, indexing, allocation, layout changes;
- optimizer: AdamW's kernels;
- other: every other operator. The profiled update's wall time minus the operators' total is
  time outside any operator: Python, the autograd engine's bookkeeping, the profiler itself.

The matmul class is set against the update's FLOP floor (``roofline.floors``'s 4 P T for LoRA,
6 P T for a full fine-tune, over the measured 2048 x 2048 matmul throughput): floor / matmul
time is how close the products themselves run to this CPU's peak, and the rest of the update is
what a faster update would have to take back. The profiler slows small operators, so the classes
are read as shares of the profiled update, beside the unprofiled median.

Modes: ``lora`` (one adapter per agent, the update's LoRA linears fused into one autograd node
each: ``teamrl.update.lora_linear``), ``lora-peft`` (the same through PEFT's own forward,
``train.fused_lora=false``: the A/B of that change), ``shared`` and ``separate`` (full
fine-tunes).

Output: ``results/update_profile.md`` and ``.json`` with date, machine and load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from op_classes import CLASSES, op_class  # noqa: E402
from roofline import Step, matmul_gflops  # noqa: E402
from rounds import provenance, round_order, summarize  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
# mode -> (team.policies, further overrides). lora-peft: the LoRA update through PEFT's own
# forward (five autograd nodes per adapted linear) instead of teamrl's fused linear.
MODES = {
    "lora": ("lora", ()),
    "lora-peft": ("lora", ("train.fused_lora=false",)),
    "shared": ("shared", ()),
    "separate": ("separate", ()),
}


class FixedBatch:
    """One mode's trainer and one rollout, sampled once; ``update`` runs every policy's update
    on those samples (what ``train_step`` times as ``time/update``)."""

    def __init__(self, args, mode: str):
        from teamrl.credit.advantages import compute_advantages

        policies, extra = MODES[mode]
        self.step = Step(args, policies, extra)
        self.policies = policies
        tr = self.step.trainer
        self.samples = tr.rollout(tr.data.next(1)).samples
        a = tr.cfg.algorithm
        compute_advantages(self.samples, a.baseline, a.scale_rewards)
        self.mode = mode

    def tokens(self) -> int:
        """T of the floor: completion tokens, plus each policy's distinct prompts once (prefix
        sharing scores a prompt once per policy)."""
        t = sum(len(s.completion_ids) for s in self.samples)
        prompts = {(s.policy, tuple(s.prompt_ids)) for s in self.samples}
        return t + sum(len(p) for _, p in prompts)

    def update(self) -> float:
        tr = self.step.trainer
        t0 = time.perf_counter()
        for name, pol in tr.team.policies.items():
            mine = [s for s in self.samples if s.policy == name]
            if mine:
                tr.update(pol, mine)
        return time.perf_counter() - t0

    def profile(self) -> dict:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            wall = self.update()
        classes = dict.fromkeys(CLASSES, 0.0)
        top: list[tuple[float, str]] = []
        for evt in prof.key_averages():
            s = evt.self_cpu_time_total / 1e6
            classes[op_class(evt.key)] += s
            top.append((s, evt.key))
        top.sort(reverse=True)
        return {
            "wall_s": wall,
            "classes_s": classes,
            "outside_ops_s": max(0.0, wall - sum(classes.values())),
            "top_ops": [{"op": k, "self_s": s} for s, k in top[:15]],
        }


def render(result: dict) -> str:
    m, a = result["machine"], result["args"]
    fl = max(result["matmul_gflops"])
    lines = [
        "# Where an update's time goes (one fixed batch per mode)",
        "",
        f"`python benchmarks/update_profile.py {' '.join(result['argv'])}`",
        "",
        f"{result['date']} on {m['cpu']} ({m['cores']} cores), torch {m['torch']}; load "
        f"{result['load_start']} at start, {result['load_end']} at the end. {a['model']}, two "
        f"agents, G = {a['num_generations']}, {a['new_tokens']} tokens each; float32 matmul "
        f"{fl:.1f} GFLOP/s (2048 x 2048, best of the start's and the end's tries). "
        f"{a['rounds']} interleaved rounds on the same samples: median [min, max].",
        "",
        "| mode | tokens T | update s [min, max] | FLOP floor s (x floor) | profiled s | "
        + " | ".join(CLASSES)
        + " | outside ops | matmul efficiency |",
        "|---|---|---|---|---|" + "---|" * len(CLASSES) + "---|---|",
    ]
    for mode, row in result["modes"].items():
        sp, prof = row["spread"], row["profile"]
        wall = prof["wall_s"]
        shares = " | ".join(
            f"{prof['classes_s'][c]:.2f} ({100 * prof['classes_s'][c] / wall:.0f} %)"
            for c in CLASSES
        )
        lines.append(
            f"| {mode} | {row['tokens']} | {sp['median']:.2f} [{sp['min']:.2f}, {sp['max']:.2f}] "
            f"| {row['floor_s']:.2f} ({sp['median'] / row['floor_s']:.1f}x) | {wall:.2f} | "
            f"{shares} | {prof['outside_ops_s']:.2f} | "
            f"{row['floor_s'] / max(prof['classes_s']['matmul'], 1e-9):.2f} |"
        )
    lines += ["", "Largest operators by self time (profiled update):", ""]
    for mode, row in result["modes"].items():
        ops = ", ".join(f"`{o['op']}` {o['self_s']:.2f}" for o in row["profile"]["top_ops"][:8])
        lines.append(f"- {mode}: {ops}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument(
        "--modes", default="lora,lora-peft,shared", help=f"comma-separated, of {', '.join(MODES)}"
    )
    ap.add_argument("--num-generations", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", default="update_profile")
    args = ap.parse_args(argv)
    from teamrl.team.models import quiet_hf

    quiet_hf()
    load_start = os.getloadavg()[0]
    gflops = [matmul_gflops()]
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"--modes: {unknown[0]!r} is not one of {', '.join(MODES)}")
    batches = {mode: FixedBatch(args, mode) for mode in modes}
    for _ in range(args.warmup):
        for mode in modes:
            batches[mode].update()
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for r in range(args.rounds):
        for mode in round_order(modes, r):
            times[mode].append(batches[mode].update())
    profiles = {mode: batches[mode].profile() for mode in modes}
    gflops.append(matmul_gflops())
    fl = max(gflops)
    rows = {}
    for mode in modes:
        b = batches[mode]
        work = b.step.work()
        per_token = 4 if b.policies == "lora" else 6
        tokens = b.tokens()
        rows[mode] = {
            "tokens": tokens,
            "params": work["params"],
            "floor_s": per_token * work["params"] * tokens / (fl * 1e9),
            "spread": summarize(times[mode]),
            "times": times[mode],
            "profile": profiles[mode],
        }
    result = {**provenance(argv, args, load_start), "matmul_gflops": gflops, "modes": rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=1))
    md = render(result)
    (RESULTS / f"{args.out}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
