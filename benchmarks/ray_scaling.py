"""Step time of the same tiny run in one process and on Ray with 1 and 2 workers per policy.

Work per step: MAGRPO on the toy `digits` task, two agents on one `shared` policy
(tiny-llama-wide, fp32, CPU), G = 8 samples per agent, 4 prompts per step, 24 new tokens per
sample (EOS ignored, so every contender generates the same tokens), one update.
Contenders: ``distributed.backend=none`` (this process), ``ray`` with 1 worker and with 2
workers (1 logical CPU and 1 torch thread each; the controller runs 1 thread as well).

Usage: python benchmarks/ray_scaling.py [--steps 3] [--out FILE]   (needs teamrl[ray])
Prints a markdown table of per-step medians after one warm-up step and writes it to --out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import tempfile
from pathlib import Path

BASE = [
    "model.name_or_path=tiny-llama-wide",
    "team.policies=shared",
    "env.name=digits",
    "team.agents=[{name: alice, max_completion_length: 24}, "
    "{name: bob, max_completion_length: 24}]",
    "team.ignore_eos=true",
    "algorithm.num_generations=8",
    "train.prompts_per_step=4",
    "train.learning_rate=1e-4",
    "log.progress_bar=false",
    "distributed.sandbox_tasks=false",
]
KEYS = ("time/step", "time/generate", "time/update")


def run(label: str, overrides: list[str], steps: int, root: Path) -> dict[str, float]:
    from teamrl.config import load_config
    from teamrl.scale import shutdown_team
    from teamrl.trainer import Trainer

    cfg = load_config(None, [*BASE, f"train.max_steps={steps + 1}", *overrides])
    tr = Trainer(cfg, run_dir=root / label)
    try:
        history = [tr.train_step() for _ in range(steps + 1)][1:]  # the first one warms up
    finally:
        shutdown_team(tr.team)
    return {k: statistics.median(h[k] for h in history) for k in KEYS}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3, help="Measured steps per contender.")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "ray_scaling.md"))
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import ray
    import torch

    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    ray_on = ["distributed.backend=ray", "distributed.num_cpus_per_worker=1"]
    contenders = {
        "one process (backend=none)": [],
        "ray, 1 worker": [*ray_on, "distributed.num_workers_per_policy=1"],
        "ray, 2 workers": [*ray_on, "distributed.num_workers_per_policy=2"],
    }
    with tempfile.TemporaryDirectory() as tmp:
        rows = {
            k: run(str(i), v, args.steps, Path(tmp)) for i, (k, v) in enumerate(contenders.items())
        }
    one = rows["ray, 1 worker"]["time/step"]
    load = os.getloadavg()[0]
    lines = [
        f"# Ray scaling on CPU ({dt.date.today()})",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.processor() or 'CPU'}; "
        f"torch {torch.__version__}, ray {ray.__version__}; 1-minute load average before: "
        f"{load_before:.2f}.",
        f"Work per step: {' '.join(BASE[:1] + BASE[5:7])}, 2 agents x 24 tokens, one update. "
        f"Medians of {args.steps} steps after a warm-up step.",
        "",
        "| contender | s/step | s generate | s update | step speed-up vs 1 worker |",
        "|---|---|---|---|---|",
    ]
    for k, r in rows.items():
        lines.append(
            f"| {k} | {r['time/step']:.2f} | {r['time/generate']:.2f} | "
            f"{r['time/update']:.2f} | {one / r['time/step']:.2f} |"
        )
    lines += ["", f"1-minute load average after the run: {load:.2f}"]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
