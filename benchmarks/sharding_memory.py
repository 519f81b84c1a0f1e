"""Memory per worker with and without FSDP sharding (``distributed.sharding``), on CPU workers.

    python benchmarks/sharding_memory.py                         # SmolLM2-135M full fine-tune
    python benchmarks/sharding_memory.py --model tiny-llama-wide # smoke

For each setting (``none``, ``fsdp``) one Ray worker group of ``--workers`` CPU workers holds a
full fine-tune of the model (float32, AdamW), takes one update on the same recorded rollout,
and reports each worker's resident memory and peak (``PolicyWorker.memory``), each under
glibc's adaptive mmap threshold and under the fixed 128 KiB that sharded CPU workers set by
default (``distributed.cpu_mmap_threshold_kib``: FSDP's per-layer buffers fragment the heap
otherwise, ``teamrl/scale/cpu_malloc.py``). Unsharded, each
worker holds the weights, their gradients and AdamW's two moments (16 bytes a parameter);
sharded, a 1/W share of each plus the full replica it samples from (4 bytes a parameter), so
the saving grows with the worker count. The settings run one after the other (each group is
shut down before the next starts), so the peaks do not mix; ``--rounds`` alternate them
(rotated each round) and the report gives medians with their range. Output:
``results/sharding_memory.md`` and ``.json`` with date, machine and load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rounds import header, provenance, round_order, summarize  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="sharding_memory")
    args = ap.parse_args(argv)
    import ray

    from teamrl.config import load_config
    from teamrl.credit.advantages import compute_advantages
    from teamrl.scale.group import WorkerGroup
    from teamrl.scale.placement import placement_plan
    from teamrl.team.models import quiet_hf, resolve
    from teamrl.trainer import Trainer

    quiet_hf()
    overrides = [
        f"model.name_or_path={args.model}",
        "team.policies=shared",
        "model.use_peft=false",
        "env.name=tldr",
        "env.kwargs={source: offline}",
        "team.agents=[{name: concise, max_completion_length: 32}, "
        "{name: detailed, max_completion_length: 32}]",
        "algorithm.num_generations=4",
        "train.learning_rate=1e-6",
        "log.progress_bar=false",
    ]
    load_start = os.getloadavg()[0]
    cfg = load_config(None, overrides)
    resolve(cfg.model.name_or_path, cfg.seed)  # built once here, not by every worker
    local = Trainer(cfg, run_dir=tempfile.mkdtemp())
    result = local.rollout(local.data.next(1))
    compute_advantages(result.samples, "mean", "group")
    params = sum(p.numel() for p in local.team.policies["shared"].model.parameters())
    del local
    ray.init(num_cpus=max(2, args.workers), include_dashboard=False, log_to_driver=False)
    # rounds: none, fsdp, then fsdp, none, ... (rotated), each setting on fresh worker processes
    # each sharding under glibc's adaptive mmap threshold (0) and the fixed 128 KiB that
    # sharded CPU workers set by default (teamrl/scale/cpu_malloc.py)
    rows: dict[tuple[str, int], list[dict]] = {
        (sharding, kib): [] for sharding in ("none", "fsdp") for kib in (0, 128)
    }
    for r in range(args.rounds):
        for sharding, kib in round_order(list(rows), r):
            d = dataclasses.replace(
                cfg.distributed,
                backend="ray",
                sharding=sharding,
                cpu_mmap_threshold_kib=kib,
                num_workers_per_policy=args.workers,
                num_cpus_per_worker=1.0,
            )
            run_cfg = dataclasses.replace(cfg, distributed=d)
            (plan,) = placement_plan(run_cfg)
            group = WorkerGroup(plan, run_cfg)
            try:
                group.update("shared", result.samples, run_cfg, 0, 32)
                rows[sharding, kib].extend(group._call("memory"))
            finally:
                group.shutdown()
    ray.shutdown()
    out = {
        **provenance(argv, args, load_start),
        "params": params,
        "workers": [
            {"sharding": k[0], "mmap_threshold_kib": k[1], "workers": w} for k, w in rows.items()
        ],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(out, indent=1))
    lines = header(out, "Memory per worker, with and without FSDP sharding", "sharding_memory.py")
    lines[-1] += (
        f" {args.model} ({params / 1e6:.1f}M parameters), full fine-tune in float32 with AdamW, "
        f"one update, {args.workers} CPU workers (gloo); {args.rounds} rounds alternating the "
        "settings, each on fresh workers; median over every worker of every round [min, max]."
    )
    lines += [
        "",
        "| sharding | glibc mmap threshold | workers measured | resident GiB after the update "
        "| peak GiB |",
        "|---|---|---|---|---|",
    ]
    for (sharding, kib), workers in rows.items():
        cells = []
        for key in ("rss_gib", "peak_rss_gib"):
            st = summarize([w[key] for w in workers])
            cells.append(f"{st['median']:.2f} [{st['min']:.2f}, {st['max']:.2f}]")
        threshold = f"{kib} KiB, fixed" if kib else "adaptive (glibc's default)"
        lines.append(f"| {sharding} | {threshold} | {len(workers)} | {cells[0]} | {cells[1]} |")
    md = "\n".join(lines) + "\n"
    (RESULTS / f"{args.out}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
