"""The coding table's checkpoints on new instances of the families they trained on.

The table ``gencode_magrpo`` scores every condition on test problems from families (templates)
that no run trains on: generalisation across families. This script evaluates the same runs'
last checkpoints, greedy, on new *instances of the training families*: gencode drawn with
another instance seed (``env.kwargs.seed``), minus every problem whose prompt equals one of the
table's own train, validation or test problems, so no run has seen any of them. Where the
trained teams rise here and not on the test families, learning stops at the family: what was
learned holds for new instances of what was trained, and does not carry to new kinds of problem.

    python experiments/in_family.py                                  # every condition, its seeds
    python experiments/in_family.py --conditions untrained magrpo --seeds 0 1 2 3 4

Needs the table's run folders (``runs/experiments/gencode_magrpo__<condition>__seed<k>``, with
their checkpoints): run the table first. Records: one JSON per (condition, seed) in
``experiments/results/gencode_magrpo/in_family/`` (a rerun skips them), then ``table.md`` there,
rewritten from every record: mean over seeds [bootstrap 95 % interval of the mean].
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `import experiments`

TABLE = "gencode_magrpo"
OUT = Path(__file__).resolve().parent / "results" / TABLE / "in_family"
# The untrained rows are greedy and untrained: one seed is exact.
SEEDS = {
    "untrained": [0],
    "untrained_multiturn": [0],
    "magrpo": [0, 1, 2, 3, 4],
    "one_agent": [0, 1, 2],
    "independent": [0, 1, 2],
    "magrpo_multiturn": [0, 1, 2, 3, 4],
}


def new_instances(instance_seed: int, n: int) -> list[dict]:
    """The first ``n`` training-split problems of gencode (the table's tiers) drawn with
    ``instance_seed``, leaving out any whose prompt is a problem of the table's own splits."""
    from experiments.tables import get_table
    from teamrl.config import load_config
    from teamrl.tasks.registry import make_task

    table = get_table(TABLE)
    kwargs = dict(load_config(table.config, list(table.base)).env.kwargs)
    own = make_task("gencode", **kwargs)
    seen = {r["prompt"] for split in (own.train, own.eval, own.test) for r in split or []}
    other = make_task("gencode", **{**kwargs, "seed": instance_seed})
    fresh = [r for r in other.train if r["prompt"] not in seen]
    if len(fresh) < n:
        raise SystemExit(f"--problems {n}: only {len(fresh)} new instances with this seed")
    return fresh[:n]


def added_fields(checkpoint: Path, config: dict) -> list[str]:
    """Dotted names of the fields of ``config`` that the checkpoint's saved config lacks."""
    import yaml

    def walk(saved: dict, now: dict, prefix: str) -> list[str]:
        out = []
        for key, value in now.items():
            if key not in saved:
                out.append(f"{prefix}{key}")
            elif isinstance(value, dict) and isinstance(saved[key], dict):
                out += walk(saved[key], value, f"{prefix}{key}.")
        return out

    saved = yaml.safe_load((Path(checkpoint) / "config.yaml").read_text())
    return walk(saved, config, "")


def evaluate(condition: str, seed: int, rows: list[dict], runs_dir: Path) -> dict:
    """One run's last checkpoint (the untrained model for an untrained condition), greedy, on
    ``rows``: per problem its pass rate, success, team reward and texts."""
    import torch

    from experiments import runner
    from experiments.tables import get_table
    from teamrl.config import load_config, to_dict
    from teamrl.evaluation import chunked_episodes, greedy_outputs, progress_bar
    from teamrl.run import checkpoints
    from teamrl.trainer import Trainer

    t0 = time.perf_counter()
    table = get_table(TABLE)
    cond = next(c for c in table.conditions if c.name == condition)
    trained_dir = runs_dir / runner.run_name(table, condition, seed)
    # The same config as the run, in a scratch folder: the run's own (its checkpoints) stays
    # untouched.
    scratch = tempfile.mkdtemp(prefix="in_family_")
    overrides = [*runner.run_overrides(table, cond, seed, runs_dir), f"log.output_dir={scratch}"]
    cfg = load_config(table.config, overrides)
    trainer = Trainer(cfg)
    ckpt = None
    if cond.train:
        ckpt = checkpoints.latest_checkpoint(trained_dir)
        if ckpt is None:
            raise SystemExit(f"{condition} seed {seed}: no checkpoint in {trained_dir}")
        # the scratch folder differs, and so do fields added to the config since the run (absent
        # from its saved config.yaml, so the run used what is now their default)
        added = tuple(added_fields(ckpt, to_dict(cfg)))
        runner.check_same_config(ckpt, to_dict(cfg), ignore=("log.output_dir", *added))
        trainer.load_checkpoint(ckpt)
    examples = list(enumerate(rows))
    rollouts: list = []
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        bar = progress_bar(len(examples), f"{condition} seed {seed}", False)
        episodes = chunked_episodes(trainer, examples, 1, True, bar, rollouts)
    texts = {o["problem"]: o["texts"] for o in greedy_outputs(rollouts)}
    per_problem = [
        {
            "problem": e["problem"],
            "template": rows[e["problem"]]["template"],
            "pass_rate": e["components"]["pass_rate"],
            "success": float(e["success"]),
            "reward": e["team_return"],
            "texts": texts.get(e["problem"], {}),
        }
        for e in sorted(episodes, key=lambda e: e["problem"])
    ]
    del trainer
    gc.collect()
    return {
        "table": TABLE,
        "condition": condition,
        "seed": seed,
        "checkpoint": str(ckpt) if ckpt else None,
        "problems": len(rows),
        "pass_rate": statistics.mean(p["pass_rate"] for p in per_problem),
        "solved": statistics.mean(p["success"] for p in per_problem),
        "reward": statistics.mean(p["reward"] for p in per_problem),
        "per_problem": per_problem,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "machine": runner.machine(),
        "git_commit": runner.git_commit(),
        "wall_seconds": time.perf_counter() - t0,
    }


def report(out: Path) -> str:
    """table.md from every record in ``out``: per condition, the mean over its seeds with a
    bootstrap 95 % interval, and the templates evaluated."""
    from experiments.runner import summarise

    records = [json.loads(p.read_text()) for p in sorted(out.glob("*__seed*.json"))]
    by_cond: dict[str, list[dict]] = {}
    for r in records:
        by_cond.setdefault(r["condition"], []).append(r)
    lines = [
        "# gencode_magrpo: new instances of the training families",
        "",
        "`python experiments/in_family.py` (greedy; each run's last checkpoint; mean over seeds "
        "[bootstrap 95 % interval of the mean])",
        "",
        "| condition | seeds | problems | pass rate (hidden asserts) | problems solved | "
        "team reward |",
        "|---|---|---|---|---|---|",
    ]
    order = [c for c in SEEDS if c in by_cond] + sorted(set(by_cond) - set(SEEDS))
    for cond in order:
        rs = by_cond[cond]
        cells = []
        for key in ("pass_rate", "solved", "reward"):
            s = summarise([r[key] for r in rs])
            cells.append(
                f"{s['mean']:.3f}"
                if len(rs) == 1
                else f"{s['mean']:.3f} [{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}]"
            )
        per_seed = ", ".join(f"{r['pass_rate']:.3f}" for r in sorted(rs, key=lambda r: r["seed"]))
        lines.append(
            f"| {cond} | {len(rs)} | {rs[0]['problems']} | {cells[0]} ({per_seed}) | "
            f"{cells[1]} | {cells[2]} |"
        )
    if records:
        fams = sorted({p["template"] for p in records[0]["per_problem"]})
        lines += ["", f"Families ({len(fams)}): " + ", ".join(f"`{f}`" for f in fams) + "."]
        r0 = records[0]
        lines += [
            f"Machine: {r0['machine']}; first record {r0['date']}, commit {r0['git_commit']}."
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from experiments import runner
    from teamrl.team.models import quiet_hf

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conditions", nargs="+", default=list(SEEDS), choices=list(SEEDS))
    ap.add_argument("--seeds", nargs="+", type=int, help="default: each condition's table seeds")
    ap.add_argument("--problems", type=int, default=48, help="new instances to evaluate")
    ap.add_argument("--instance-seed", type=int, default=1, help="gencode's seed for them")
    ap.add_argument("--runs", default=str(runner.RUNS), help="the table's run folders")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    quiet_hf()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = new_instances(args.instance_seed, args.problems)
    for cond in args.conditions:
        for seed in args.seeds if args.seeds is not None else SEEDS[cond]:
            path = out / f"{cond}__seed{seed}.json"
            if path.exists():
                continue
            record = evaluate(cond, seed, rows, Path(args.runs))
            record["instance_seed"] = args.instance_seed
            runner.write_json_atomic(path, record)
            print(f"{cond} seed {seed}: pass rate {record['pass_rate']:.3f}", flush=True)
    (out / "table.md").write_text(report(out))
    print(report(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
