"""Where teamrl's update spends the time that a raw forward/backward does not, on the same rows.

    python benchmarks/update_gap.py --model FOLDER --device cuda --dtype bfloat16 \\
        --policies lora --micro-batch-size 16                 # on a GPU (gpu_check's models)
    python benchmarks/update_gap.py --model tiny-llama --rounds 1 --prompt-tokens 8 \\
        --new-tokens 4 --num-generations 2 --prompts-per-step 2   # smoke, CPU

Why. At a real step's shape on an H200 (benchmarks/results/gpu-2026-11-28-h200-c) teamrl's
update took 3.6x (shared) to 4.4x (lora) the raw loop's time for the same rows and micro-batches
(``magrpo_step.RawStep``: one forward with ``logits_to_keep``, a float32 log-softmax, one backward
per micro-batch, one fused AdamW step). That table times each contender's whole step on its own
rollout; here one rollout of teamrl's (the step benchmark's task: 2 agents, G samples of exactly
``--new-tokens`` tokens per prompt) is kept, and on its samples, in alternating rounds:

- ``teamrl``: every policy's update (``Trainer.update``, what ``time/update`` times);
- ``raw``: the raw loop's forward/backward and optimizer step over the same sequences (each
  sample's prompt and completion, left-padded per micro-batch) on a second copy of the model,
  trained in full like ``shared`` (with ``--policies lora`` it is still the full fine-tune: the
  number to beat is the table's raw loop).

Then one profiled update of each (``torch.profiler``; on CUDA the kernels' self device time,
on CPU the operators' self CPU time), the top operators of each, and the host's time outside
them (Python, autograd, launches). Output: ``--out`` .md and .json (default
``results/update_gap``) with date, device and the rows' shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from magrpo_step import TeamrlStep, prompts, sync  # noqa: E402
from rounds import provenance, round_order  # noqa: E402


class TeamrlUpdate:
    """One rollout of the benchmark's task, kept; ``run`` updates every policy on it."""

    def __init__(self, args):
        from teamrl.credit.advantages import compute_advantages
        from teamrl.team.models import load_tokenizer

        texts = prompts(
            args.prompts_per_step, "short", load_tokenizer(args.model), args.prompt_tokens
        )
        self.step = TeamrlStep(args, texts, args.policies, None)
        tr = self.step.trainer
        self.samples = tr.rollout(tr.data.next(args.prompts_per_step)).samples
        a = tr.cfg.algorithm
        compute_advantages(self.samples, a.baseline, a.scale_rewards)
        self.device = args.device

    def run(self) -> float:
        tr = self.step.trainer
        sync(self.device)
        t0 = time.perf_counter()
        for name, pol in tr.team.policies.items():
            mine = [s for s in self.samples if s.policy == name]
            if mine:
                tr.update(pol, mine)
        sync(self.device)
        return time.perf_counter() - t0


class RawUpdate:
    """The raw loop's update (``magrpo_step.RawStep``'s) over the same samples' tokens."""

    def __init__(self, args, samples):
        import torch

        from teamrl.team.models import load_model

        self.torch, self.device = torch, args.device
        self.model = load_model(args.model, dtype=args.dtype, device=args.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-6, fused=True)
        self.new = args.new_tokens
        micro = args.micro_batch_size or len(samples)
        self.parts = []
        for lo in range(0, len(samples), micro):
            rows = samples[lo : lo + micro]
            width = max(len(s.prompt_ids) + len(s.completion_ids) for s in rows)
            ids = torch.zeros(len(rows), width, dtype=torch.long)
            mask = torch.zeros(len(rows), width, dtype=torch.long)
            for i, s in enumerate(rows):  # left padding, as the raw loop's generate leaves it
                seq = s.prompt_ids + s.completion_ids
                ids[i, width - len(seq) :] = torch.tensor(seq)
                mask[i, width - len(seq) :] = 1
            adv = torch.tensor([float(s.advantage or 0.0) for s in rows])
            self.parts.append((ids.to(args.device), mask.to(args.device), adv.to(args.device)))
        self.n = len(samples)

    def run(self) -> float:
        torch, new = self.torch, self.new
        sync(self.device)
        t0 = time.perf_counter()
        for ids, mask, adv in self.parts:
            logits = self.model(input_ids=ids, attention_mask=mask, logits_to_keep=new + 1).logits
            logp = torch.log_softmax(logits[:, :-1].float(), -1)
            token_logp = logp.gather(-1, ids[:, -new:, None]).squeeze(-1)
            loss = -(token_logp.mean(-1) * adv).sum() / self.n
            loss.backward()
            del logits, logp, token_logp, loss
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        sync(self.device)
        return time.perf_counter() - t0


def profiled(fn, device: str, top: int) -> dict:
    """One profiled call: the top operators by self time (device time on CUDA)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        wall = fn()
    rows = []
    for evt in prof.key_averages():
        own = (evt.self_device_time_total if cuda else evt.self_cpu_time_total) / 1e6
        rows.append({"op": evt.key, "self_s": own, "calls": evt.count})
    rows.sort(key=lambda r: -r["self_s"])
    busy = sum(r["self_s"] for r in rows)
    return {"wall_s": wall, "ops_s": busy, "top": rows[:top], "ops": len(rows)}


def _device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return "CPU"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--policies", default="lora", help="lora, shared or separate")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--prompts-per-step", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--micro-batch-size", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--out", default=str(HERE / "results" / "update_gap"))
    args = ap.parse_args(argv)
    import os

    from teamrl.team.models import quiet_hf

    quiet_hf()
    load_start = os.getloadavg()[0]
    teamrl = TeamrlUpdate(args)
    raw = RawUpdate(args, teamrl.samples)
    contenders = {"teamrl": teamrl.run, "raw": raw.run}
    for fn in contenders.values():  # warm-up (allocator, kernels' first launches)
        fn()
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for r in range(args.rounds):
        for name in round_order(list(contenders), r):
            times[name].append(contenders[name]())
    profiles = {k: profiled(fn, args.device, args.top) for k, fn in contenders.items()}
    rows = len(teamrl.samples)
    result = {
        **provenance(argv, args, load_start),
        "device_name": _device_name(args.device),
        "rows": rows,
        "tokens": sum(len(s.prompt_ids) + len(s.completion_ids) for s in teamrl.samples),
        "times_s": times,
        "median_s": {k: statistics.median(v) for k, v in times.items()},
        "profiles": profiles,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    out.with_suffix(".md").write_text(render(result))
    print(render(result))
    return 0


def render(res: dict) -> str:
    a, med = res["args"], res["median_s"]
    lines = [
        "# teamrl's update against the raw loop's, on the same rows",
        "",
        f"`python benchmarks/update_gap.py {' '.join(res['argv'])}`",
        "",
        f"{res['date']}; {a['model']} {a['dtype']} on {res['device_name']}, team.policies="
        f"{a['policies']}; {res['rows']} rows ({res['tokens']} tokens), micro-batches of "
        f"{a['micro_batch_size']}; {a['rounds']} alternating rounds after a warm-up.",
        "",
        "| contender | median s | rounds s | profiled s | in operators s | operators |",
        "|---|---|---|---|---|---|",
    ]
    for k, p in res["profiles"].items():
        ts = ", ".join(f"{t:.3f}" for t in res["times_s"][k])
        lines.append(
            f"| {k} | {med[k]:.3f} | {ts} | {p['wall_s']:.3f} | {p['ops_s']:.3f} | {p['ops']} |"
        )
    lines += ["", f"teamrl / raw: {med['teamrl'] / max(med['raw'], 1e-9):.2f}x", ""]
    for k, p in res["profiles"].items():
        lines += [f"Top operators of {k} (self time, calls):", ""]
        lines += [f"- `{o['op']}` {o['self_s']:.4f} s, {o['calls']}" for o in p["top"]]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
