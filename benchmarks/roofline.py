"""The roofline of a training step, per policy mode: each part's floor beside its measured time.

    python benchmarks/roofline.py                        # SmolLM2-135M, 5 rounds
    python benchmarks/roofline.py --model tiny-llama --rounds 1 --warmup 0   # smoke
    python benchmarks/roofline.py --compiled --out roofline-compiled
        # sampling through the compiled decode step on CPU (generation.fast_decode_compile=on)

``--set KEY=VALUE`` (repeatable) applies a config override to every mode; ``--compiled`` is
``--set generation.fast_decode_compile=on``. ``--against KEY=VALUE`` (repeatable) runs every
mode twice, as it is and with these overrides, both in the same interleaved rounds: an A/B of a
setting on one machine at one time (``--against generation.fast_decode=on``: the static KV
cache against the default dynamic one). The compile itself happens in the warm-up round
(at least one with ``--compiled``) and is reported apart: seconds per mode, summed over its
models (``teamrl.generation.fast_decode.stats``).

The machine first (best of several tries, at the start and again at the end):

- memory bandwidth B: copying a 256 MiB float32 tensor (read + write bytes / time);
- matmul throughput F: a 2048 x 2048 float32 matmul (2 n^3 FLOPs / time).

Then one MAGRPO step of each policy mode (``shared``, ``lora``, ``separate``; two agents, G
samples each, exactly ``--new-tokens`` per completion), in interleaved rounds
(``rounds.round_order``), with its floors:

- generation: every decode step reads every weight of every model once (the batch shares the
  read), so its floor is max(weight bytes x decode steps / B, 2 x params x generated tokens /
  F); with ``shared`` and ``lora`` one model serves both agents, with ``separate`` two do;
- update: forward 2 P T, backward 2 P T for the activations' gradients, and 2 P T more for the
  weights' gradients in a full fine-tune (``shared``, ``separate``), FLOPs over F. T counts
  the completion tokens and each distinct prompt once (prefix sharing); a LoRA update skips
  the base weights' gradients, so its floor is 4 P T against a full fine-tune's 6 P T.

The report gives measured / floor per part: how far each is from what this CPU allows.
``--profile`` adds, after the rounds, one profiled rollout per mode (``torch.profiler``, each
operator's self CPU time by class, ``op_classes.op_class``): what the sampling time beyond
its floor is made of (the matmuls themselves, attention, elementwise work, copies, and the time
outside any operator: Python, dispatch, the profiler), and how many operators a decode step
dispatches. Output: ``results/roofline.md`` and ``.json`` with date, machine and load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rounds  # noqa: E402
from rounds import provenance, round_order, summarize  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MODES = ("shared", "lora", "separate")


def bandwidth_gbs(tries: int = 5) -> float:
    import torch

    src = torch.rand(64 * 2**20)  # 256 MiB of float32
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(tries):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best / 1e9


def matmul_gflops(n: int = 2048, tries: int = 5) -> float:
    import torch

    a, b = torch.rand(n, n), torch.rand(n, n)
    best = float("inf")
    for _ in range(tries):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


class Step:
    """One policy mode's MAGRPO step on the quickstart task, every completion at full length."""

    def __init__(self, args, policies: str, extra: tuple[str, ...] = ()):
        extra = (*extra, *args.set)
        from teamrl.config import load_config
        from teamrl.trainer import Trainer

        n = args.new_tokens
        overrides = [
            f"model.name_or_path={args.model}",
            f"team.policies={policies}",
            "model.use_peft=false",
            "team.ignore_eos=true",
            "env.name=tldr",
            "env.kwargs={source: offline}",
            f"team.agents=[{{name: concise, max_completion_length: {n}}}, "
            f"{{name: detailed, max_completion_length: {n}}}]",
            f"algorithm.num_generations={args.num_generations}",
            "train.learning_rate=1e-6",
            f"train.max_steps={10**6}",
            "train.shuffle=false",
            "log.progress_bar=false",
            *extra,
        ]
        self.trainer = Trainer(load_config(None, overrides), run_dir=tempfile.mkdtemp())
        self.policies = policies

    def step(self) -> dict[str, float]:
        m = self.trainer.train_step()
        samples = m["completion_length/mean"] * 2 * self.trainer.cfg.algorithm.num_generations
        return {
            "step_s": m["time/step"],
            "generate_s": m["time/generate"],
            "update_s": m["time/update"],
            "generated_tokens": samples,
        }

    def work(self) -> dict[str, float]:
        """Parameters per model, models, prompt tokens (distinct prompts, each once)."""
        team = self.trainer.team
        engines = team.engines()
        base = sum(p.numel() for n, p in engines[0].model.named_parameters() if "lora_" not in n)
        prompt = self.trainer.rollout(self.trainer.data.next(1)).samples[0].prompt_ids
        return {"params": base, "models": len(engines), "prompt_tokens": len(prompt)}

    def compile_s(self) -> float:
        """Seconds the models of this mode spent compiling their decode steps so far."""
        from teamrl.generation import fast_decode

        return sum(fast_decode.stats(e.model)["compile_s"] for e in self.trainer.team.engines())


def profile_rollout(step: Step, new_tokens: int) -> dict:
    """One profiled rollout of ``step``'s trainer: seconds by operator class (self CPU time),
    the time outside operators, and operator calls per decode step."""
    from op_classes import op_class
    from torch.profiler import ProfilerActivity, profile

    tr = step.trainer
    batch = tr.data.next(1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        tr.rollout(batch)
        wall = time.perf_counter() - t0
    by_class: dict[str, float] = {}
    calls = 0
    for e in prof.key_averages():
        by_class[op_class(e.key)] = by_class.get(op_class(e.key), 0.0) + e.self_cpu_time_total / 1e6
        calls += e.count
    in_ops = sum(by_class.values())
    # one call per model: new_tokens decode steps each (a prefill and the draws included)
    steps = new_tokens * len(tr.team.engines())
    return {
        "wall_s": wall,
        "operators_s": in_ops,
        "outside_s": max(0.0, wall - in_ops),
        "by_class": dict(sorted(by_class.items(), key=lambda kv: -kv[1])),
        "calls_per_decode_step": calls / steps,
    }


def floors(work: dict, policies: str, new_tokens: int, g: int, bw: float, fl: float) -> dict:
    p, models = work["params"], work["models"]
    generated = 2 * g * new_tokens  # two agents, G completions each
    gen = max(p * models * 4 * new_tokens / (bw * 1e9), 2 * p * generated / (fl * 1e9))
    tokens = generated + 2 * work["prompt_tokens"]  # each agent's prompt once (prefix sharing)
    per_token = 4 if policies == "lora" else 6
    return {"generate_s": gen, "update_s": per_token * p * tokens / (fl * 1e9)}


def contender(mode: str, against: list[str]) -> str:
    """The label of ``mode`` run with the ``--against`` overrides (the plain mode: its name)."""
    return " ".join([mode, *against])


def ab_lines(result: dict) -> list[str]:
    """With ``--against``: per mode, the overridden contender's generate and update times over the
    plain one's (medians), and in how many rounds it was the faster of the two (rounds pair the
    two contenders' steps of one round, so a slow spell of the machine hits both)."""
    against = result.get("args", {}).get("against") or []
    if not against:
        return []
    tag = " ".join(against)
    lines = ["", f"A/B of `{tag}` (B) against the plain config (A), the same rounds:", ""]
    lines += ["| mode | generate B / A | B faster (rounds) | update B / A | B faster (rounds) |"]
    lines += ["|---|---|---|---|---|"]
    for mode in MODES:
        a, b = result["timings"].get(mode), result["timings"].get(contender(mode, against))
        if not a or not b:
            continue
        cells = [rounds.ab(a, b, k) for k in ("generate_s", "update_s")]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return lines


def render(result: dict) -> str:
    """The Markdown report of one run's ``result`` (what ``main`` writes as JSON): per mode the
    median time with its [min, max] over the rounds, its floor and the ratio."""
    m, a, hw = result["machine"], result["args"], result["hardware"]
    bw, fl = max(hw["bandwidth_gbs"]), max(hw["matmul_gflops"])
    lines = [
        "# The roofline of a step, per policy mode",
        "",
        f"`python benchmarks/roofline.py {' '.join(result['argv'])}`",
        "",
        f"{result['date']} on {m['cpu']} ({m['cores']} cores), torch {m['torch']}; load "
        f"{result['load_start']} at start, {result['load_end']} at the end. Measured memory "
        f"bandwidth {bw:.1f} GB/s, float32 matmul {fl:.1f} GFLOP/s (best of the start's and "
        f"the end's tries). {a['model']}, two agents, G = {a['num_generations']}, "
        f"{a['new_tokens']} tokens each; {a['rounds']} interleaved rounds: median [min, max].",
        "",
        "| mode | generate s [min, max] (floor, x floor) | update s [min, max] (floor, x floor) |",
        "|---|---|---|",
    ]
    for mode, row in result["modes"].items():
        cells = []
        for k in ("generate_s", "update_s"):
            sp = row["spread"][k]
            cells.append(
                f"{sp['median']:.2f} [{sp['min']:.2f}, {sp['max']:.2f}] "
                f"({row['floor'][k]:.2f}, {row['ratio'][k]:.1f}x)"
            )
        lines.append(f"| {mode} | {cells[0]} | {cells[1]} |")
    profiled = {mode: row["profile"] for mode, row in result["modes"].items() if "profile" in row}
    if profiled:
        classes = sorted({c for p in profiled.values() for c in p["by_class"]})
        lines += [
            "",
            "One profiled rollout per mode (operators' self CPU time, s; the profiler slows small "
            "operators, so read shares rather than totals):",
            "",
            "| mode | profiled s | outside operators | "
            + " | ".join(classes)
            + " | operator calls per decode step |",
            "|---|---|---|" + "---|" * len(classes) + "---|",
        ]
        for mode, p in profiled.items():
            cells = [f"{p['by_class'].get(c, 0.0):.2f}" for c in classes]
            lines.append(
                f"| {mode} | {p['wall_s']:.2f} | {p['outside_s']:.2f} | "
                + " | ".join(cells)
                + f" | {p['calls_per_decode_step']:.0f} |"
            )
    lines += ab_lines(result)
    compiled = {mode: row.get("compile_s", 0.0) for mode, row in result["modes"].items()}
    if any(compiled.values()):
        spent = ", ".join(f"{mode} {s:.1f} s" for mode, s in compiled.items())
        lines += ["", f"Compiling the decode steps (in the warm-up, not in the table): {spent}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--num-generations", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", default="roofline")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    ap.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="run every mode also with this override, in the same rounds (an A/B)",
    )
    ap.add_argument(
        "--compiled",
        action="store_true",
        help="sample through the compiled decode step (generation.fast_decode_compile=on)",
    )
    ap.add_argument(
        "--profile", action="store_true", help="after the rounds, one profiled rollout per mode"
    )
    args = ap.parse_args(argv)
    if args.compiled:
        args.set.append("generation.fast_decode_compile=on")
        args.warmup = max(args.warmup, 1)  # the compile stays out of the timed rounds
    from teamrl.team.models import quiet_hf

    quiet_hf()
    load_start = os.getloadavg()[0]
    hw = {"bandwidth_gbs": [bandwidth_gbs()], "matmul_gflops": [matmul_gflops()]}
    contenders = {mode: (mode, ()) for mode in MODES}
    if args.against:
        contenders.update({contender(m, args.against): (m, tuple(args.against)) for m in MODES})
    steps = {label: Step(args, mode, extra) for label, (mode, extra) in contenders.items()}
    work = {label: s.work() for label, s in steps.items()}
    for _ in range(args.warmup):
        for label in contenders:
            steps[label].step()
    timings: dict[str, list[dict]] = {label: [] for label in contenders}
    for r in range(args.rounds):
        for label in round_order(list(contenders), r):
            timings[label].append(steps[label].step())
    hw["bandwidth_gbs"].append(bandwidth_gbs())
    hw["matmul_gflops"].append(matmul_gflops())
    profiles = {c: profile_rollout(steps[c], args.new_tokens) for c in contenders if args.profile}
    bw, fl = max(hw["bandwidth_gbs"]), max(hw["matmul_gflops"])
    rows = {}
    for label, (mode, _) in contenders.items():
        floor = floors(work[label], mode, args.new_tokens, args.num_generations, bw, fl)
        row = {k: summarize([t[k] for t in timings[label]]) for k in ("generate_s", "update_s")}
        rows[label] = {
            "measured": {k: v["median"] for k, v in row.items()},
            "spread": row,
            "floor": floor,
            "ratio": {k: row[k]["median"] / floor[k] for k in floor},
            "work": work[label],
            "compile_s": steps[label].compile_s(),
        }
        if label in profiles:
            rows[label]["profile"] = profiles[label]
    result = {
        **provenance(argv, args, load_start),
        "hardware": hw,
        "modes": rows,
        "timings": timings,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=1))
    md = render(result)
    (RESULTS / f"{args.out}.md").write_text(md)
    print(md)
    print(json.dumps({k: statistics.median(v) for k, v in hw.items()}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
