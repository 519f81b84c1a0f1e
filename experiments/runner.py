"""The experiment runner: one training run + held-out test evaluation per (condition, seed).

    for condition in table.conditions:
        for seed in seeds:
            if records/<condition>__seed<k>.json exists: skip          # resume from raw records
            cfg     = load_config(table.config, table.base + condition.overrides + seed/run dir)
            trainer = Trainer(cfg)                                    # the teamrl Trainer
            train, resuming from the run folder's latest checkpoint   # a killed run continues
            test    = evaluate_trainer(trainer, "test", limit=table.test_problems)
            write the raw record atomically (config, per-step curve, test metrics, date,
                                             machine, wall time, git commit)

Aggregation (``aggregate``) reads only the raw records: per condition and metric the mean, the
standard deviation over seeds (n - 1 in the denominator) and a percentile bootstrap 95 %
interval of the mean. **What is resampled: the seeds.** One resample draws n of the condition's
n per-seed values with replacement and takes their mean; the interval is the 2.5th and 97.5th
percentiles of B = 10,000 such means, drawn from ``numpy.random.default_rng(seed)`` (seed 0 by
default), so the same records always give the same interval. The per-seed value is already a
mean over the test problems; the interval covers seed-to-seed variation only. With 3 seeds a
bootstrap interval is narrow and optimistic: read it together with the per-seed values.
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

import experiments.tasks  # noqa: F401  (registers the experiments' own tasks)
from experiments.tables import Condition, Table
from teamrl.evaluation import bootstrap_ci

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "experiments" / "results"
RUNS = ROOT / "runs" / "experiments"
# Config fields that change how a finished run is scored, never how it trained: a table may
# evaluate another table's runs with them set (plan_path_messages, tldr_messages).
EVAL_ONLY = ("eval.message_ablation",)


# --- raw records -------------------------------------------------------------------------------


def record_path(out_dir: Path, condition: str, seed: int) -> Path:
    return Path(out_dir) / f"{condition}__seed{seed}.json"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write to a temporary file, then rename: a killed run never leaves half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load_records(out_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(out_dir).glob("*__seed*.json"))]


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine() -> str:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {gpu}, "
        f"torch {torch.__version__}, python {platform.python_version()}"
    )


# --- one run -----------------------------------------------------------------------------------


def run_name(table: Table, condition: str, seed: int, tune: tuple[str, ...] = ()) -> str:
    name = f"{table.name}__{condition}__seed{seed}"
    return f"{name}__tune-{tune_slug(tune)}" if tune else name


def tune_slug(tune: tuple[str, ...]) -> str:
    """A file-name-safe id of tuning overrides, e.g. ``train.learning_rate=1e-4`` ->
    ``train.learning_rate-1e-4``."""
    text = "_".join(tune)
    return "".join(c if c.isalnum() or c in ".-_" else "-" for c in text)[:120]


def run_overrides(
    table: Table, condition: Condition, seed: int, runs_dir: Path, tune: tuple[str, ...] = ()
) -> list[str]:
    return [
        *table.base,
        *condition.overrides,
        *tune,  # tuning overrides come last: they win
        f"seed={seed}",
        f"run_name={run_name(table, condition.name, seed, tune)}",
        f"log.output_dir={runs_dir}",
        "log.overwrite=true",
    ]


def check_held_out(task: Any, n_test: int) -> None:
    """No test problem may also be a training or validation problem (by content)."""
    key = lambda row: json.dumps(row, sort_keys=True, default=str)  # noqa: E731
    seen = {key(r) for r in list(task.train) + list(task.eval or [])}
    clash = [i for i, r in enumerate(task.test[:n_test]) if key(r) in seen]
    if clash:
        raise SystemExit(f"task {task.name!r}: test problems {clash[:5]} are also train/eval rows")


def outputs(trainer: Any, n: int, split: str = "test") -> list[dict]:
    """Greedy outputs of the first ``n`` problems of ``split``: each agent's text and the
    reward (``teamrl.evaluation.greedy_outputs``). The torch RNG is left as it was found."""
    import torch

    from teamrl.algorithms.registry import recipe_for
    from teamrl.evaluation import greedy_outputs

    data = getattr(trainer.task, split)
    examples = [(i, data[i]) for i in range(min(n, len(data)))]
    recipe = recipe_for(trainer.cfg.algorithm.name)
    # forked: the rollout must not move the torch RNG, or training after it would draw other
    # samples than the same seed draws without it (make demo scores through evaluate_trainer,
    # which forks too, so a table's trained run is the demo's run for the same seed and threads)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        result = recipe.eval_rollout(
            trainer.team, trainer.task.make_env, examples, trainer.cfg, n=1, greedy=True
        )
    return greedy_outputs([result])


def config_diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields whose values differ between two config dicts."""
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            out += config_diff(x, y, f"{prefix}{key}.")
        elif x != y:
            out.append(f"{prefix}{key}")
    return out


def check_same_config(checkpoint: Path, config: dict, ignore: tuple[str, ...] = ()) -> None:
    """Refuse to continue a checkpoint written under another config (one line, the fields);
    ``ignore``: fields that may differ (a reused run's own ``run_name``)."""
    import yaml

    saved = yaml.safe_load((Path(checkpoint) / "config.yaml").read_text())
    diff = config_diff(saved, yaml.safe_load(yaml.safe_dump(config)))  # as the file holds it
    diff = [d for d in diff if d not in ignore]
    if diff:
        raise SystemExit(
            f"{checkpoint}: a run of another config ({', '.join(diff[:6])} differ) left this "
            f"checkpoint under the same run name; delete {Path(checkpoint).parent.parent} to start "
            "this one afresh"
        )


def reused_run_dir(table: Table, condition: Condition, seed: int, runs_dir: Path, tune) -> Path:
    """The run a ``from_run`` condition evaluates: ``from_run`` names a condition of this
    table, or ``TABLE:CONDITION`` one of another table (the same seed and tuning), so that two
    tables that share a trained condition train it once (the swap table reuses the main
    table's per-role LoRA runs)."""
    from experiments.tables import TABLES

    other, _, name = condition.from_run.rpartition(":")
    if other and other not in TABLES:
        raise SystemExit(f"{condition.name}.from_run={condition.from_run!r}: no table {other!r}")
    return Path(runs_dir) / run_name(TABLES[other] if other else table, name, seed, tune)


def swapped(policy_of: dict[str, str], swap: dict[str, str]) -> dict[str, str]:
    """Agent -> policy with each agent in ``swap`` routed to the policy of its partner."""
    unknown = (set(swap) | set(swap.values())) - set(policy_of)
    if unknown:
        raise SystemExit(f"swap {swap}: unknown agents {sorted(unknown)}")
    return {a: policy_of[swap.get(a, a)] for a in policy_of}


def run_one(
    table: Table,
    condition: Condition,
    seed: int,
    runs_dir: Path = RUNS,
    split: str = "test",
    tune: tuple[str, ...] = (),
) -> dict:
    """Train (unless the condition is the untrained model), evaluate on ``split``; the record.

    ``split="eval"`` (the validation split) with ``tune`` overrides is how settings are chosen;
    the test split is only for the table's final numbers.
    """
    import torch

    threads_before = torch.get_num_threads()
    if condition.threads is not None:
        torch.set_num_threads(condition.threads)
    try:
        return _run_one(table, condition, seed, runs_dir, split, tune)
    finally:
        torch.set_num_threads(threads_before)


def _run_one(
    table: Table, condition: Condition, seed: int, runs_dir: Path, split: str, tune: tuple
) -> dict:
    import torch

    from teamrl.config import load_config, to_dict
    from teamrl.evaluation import evaluate_trainer, greedy_outputs
    from teamrl.run import checkpoints
    from teamrl.run.logging import read_metrics
    from teamrl.trainer import Trainer

    t0 = time.perf_counter()
    import_table_tasks(table)
    overrides = run_overrides(table, condition, seed, runs_dir, tune)
    cfg = load_config(table.config, overrides)
    trainer = Trainer(cfg)
    check_held_out(trainer.task, table.test_problems)
    before = outputs(trainer, table.sample_outputs, split) if table.sample_outputs else []
    curve: list[dict] = []
    warned: list[dict] = []  # the run's NotLearningWarnings, as its metrics.jsonl logged them
    trained_dir = None
    if condition.from_run:  # evaluate another condition's trained run (e.g. swapped policies)
        trained_dir = reused_run_dir(table, condition, seed, runs_dir, tune)
        ckpt = checkpoints.latest_checkpoint(trained_dir)
        if ckpt is None:
            raise SystemExit(
                f"{condition.name}: no checkpoint in {trained_dir}; run condition "
                f"{condition.from_run!r} with seed {seed} first"
            )
        # the checkpoint must come from this condition's own config (its name aside, and what
        # only the test evaluation reads): a renamed or changed twin would otherwise be
        # evaluated as if it were this one
        check_same_config(ckpt, to_dict(cfg), ignore=("run_name", *EVAL_ONLY))
        trainer.load_checkpoint(ckpt)
    elif condition.train and cfg.train.max_steps > 0:
        # a run killed mid-way continues from its latest checkpoint (log.save_steps), but only
        # a run of this very config: a folder left by another setting under the same name
        # (a renamed table, changed constants) would otherwise be continued silently
        latest = checkpoints.latest_checkpoint(trainer.run_dir)
        if latest is not None:
            check_same_config(latest, to_dict(cfg))
        trainer.train(resume=latest is not None)
        trained_dir = trainer.run_dir
    if trained_dir is not None:
        rows = read_metrics(trained_dir)
        curve = [{k: v for k, v in m.items() if isinstance(v, int | float)} for m in rows]
        warned = [
            {"step": m.get("step"), "warnings": m["warnings"]} for m in rows if m.get("warnings")
        ]
    if condition.swap:  # route each agent to another agent's trained policy at test time
        trainer.team.policy_of = swapped(trainer.team.policy_of, condition.swap)
    rollouts: list = []
    test = evaluate_trainer(
        trainer, split, num_samples=table.eval_samples, limit=table.test_problems,
        greedy_rollouts=rollouts,
    )  # fmt: skip
    # the texts the evaluation itself scored (no second pass): every problem's, or a few
    scored = greedy_outputs(rollouts)
    after = scored if table.test_outputs else scored[: table.sample_outputs]
    record = {
        "table": table.name,
        "condition": condition.name,
        "seed": seed,
        "config": to_dict(cfg),
        "overrides": overrides,
        "split": split,
        "tune": list(tune),
        "trained": condition.train,
        "swap": condition.swap,
        "from_run": condition.from_run,
        "threads": torch.get_num_threads(),
        "splits": table.splits,
        "split_sizes": {s: len(getattr(trainer.task, s) or []) for s in ("train", "eval", "test")},
        "curve": curve,
        "warnings": warned,
        "test": {k: v for k, v in test.items() if isinstance(v, int | float | str | None)},
        "outputs_before": before,
        "outputs_after": after,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "wall_seconds": time.perf_counter() - t0,
        "git_commit": git_commit(),
    }
    del trainer
    gc.collect()  # optimizer/scheduler reference cycles otherwise keep old models alive
    return record


def import_table_tasks(table: Table) -> None:
    """Import the modules or files (relative to the repository) that register the table's
    task, as ``--import`` does on the command line."""
    from teamrl.plugins import import_tasks

    import_tasks([str(ROOT / spec) if spec.endswith(".py") else spec for spec in table.imports])


def run_table(
    table: Table,
    seeds: list[int],
    out_dir: Path | None = None,
    runs_dir: Path = RUNS,
    conditions: list[str] | None = None,
    dry_run: bool = False,
    log=print,
    split: str = "test",
    tune: tuple[str, ...] = (),
) -> list[dict]:
    """Run every missing (condition, seed) of ``table``; returns all records of the table."""
    out = Path(out_dir) if out_dir else default_out(table, split, tune)
    for cond in table.conditions:
        if conditions and cond.name not in conditions:
            continue
        for seed in seeds:
            path = record_path(out, cond.name, seed)
            if path.exists():
                log(f"skip {cond.name} seed {seed}: {path.name} exists")
                continue
            if dry_run:
                from teamrl.config import load_config

                import_table_tasks(table)
                load_config(table.config, run_overrides(table, cond, seed, runs_dir, tune))
                log(f"would run {cond.name} seed {seed} -> {path}")
                continue
            record = run_one(table, cond, seed, runs_dir, split, tune)
            write_json_atomic(path, record)
            log(
                f"{cond.name} seed {seed}: "
                + ", ".join(f"{m} {record['test'].get(m)}" for m in table.metrics)
                + f" ({record['wall_seconds'] / 60:.1f} min)"
            )
    return load_records(out) if out.exists() else []


def default_out(table: Table, split: str = "test", tune: tuple[str, ...] = ()) -> Path:
    """``results/<table>`` for the table itself; validation runs (tuning) go to
    ``results/<table>/validation/<tune slug or "base">``, never among the test records."""
    if split == "test" and not tune:
        return RESULTS / table.name
    return RESULTS / table.name / "validation" / (tune_slug(tune) or "base")


# --- aggregation -------------------------------------------------------------------------------


def summarise(values: list[float], resamples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """n, mean, sample std (0 for one value), bootstrap 95 % interval, the values."""
    lo, hi = bootstrap_ci(values, resamples, seed)
    return {
        "n": len(values),
        "mean": statistics.mean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "ci95": (lo, hi),
        "values": list(values),
    }


def aggregate(table: Table, records: list[dict], resamples: int = 10_000, seed: int = 0) -> dict:
    """{condition: {metric: summarise(per-seed values)}} in the table's condition order."""
    out: dict[str, dict] = {}
    for cond in table.conditions:
        rows = sorted((r for r in records if r["condition"] == cond.name), key=lambda r: r["seed"])
        if not rows:
            continue
        out[cond.name] = {}
        for metric in table.metrics:
            vals = [r["test"][metric] for r in rows if r["test"].get(metric) is not None]
            if vals:
                out[cond.name][metric] = summarise(vals, resamples, seed)
        out[cond.name]["minutes"] = sum(r["wall_seconds"] for r in rows) / 60
    return out


def markdown(table: Table, agg: dict) -> str:
    """One row per condition: per metric 'mean ± std [ci low, ci high]', seeds, minutes."""
    head = "| condition | seeds | " + " | ".join(table.metrics) + " | minutes |"
    lines = [head, "|---|---|" + "---|" * len(table.metrics) + "---|"]
    for name, metrics in agg.items():
        cells, n = [], 0
        for m in table.metrics:
            s = metrics.get(m)
            if s is None:
                cells.append("-")
                continue
            n = max(n, s["n"])
            lo, hi = s["ci95"]
            cells.append(f"{s['mean']:.3f} ± {s['std']:.3f} [{lo:.3f}, {hi:.3f}]")
        lines.append(f"| {name} | {n} | " + " | ".join(cells) + f" | {metrics['minutes']:.1f} |")
    return "\n".join(lines)


def per_seed(table: Table, records: list[dict]) -> str:
    """The first metric of every run, one row per condition and one column per seed.

    With ``table.extra["baseline"]`` (a condition) each other condition also gets its per-seed
    change against the baseline's mean, and how many seeds rose by at least
    ``table.extra["min_rise"]`` (default 0) and how many fell.
    """
    metric = table.metrics[0]
    seeds = sorted({r["seed"] for r in records})
    value = {(r["condition"], r["seed"]): r["test"].get(metric) for r in records}
    lines = [
        f"Per seed ({metric}):\n",
        "| condition | " + " | ".join(f"seed {k}" for k in seeds) + " |",
        "|---|" + "---|" * len(seeds),
    ]
    names = [c.name for c in table.conditions if any((c.name, k) in value for k in seeds)]
    for name in names:
        cells = [value.get((name, k)) for k in seeds]
        lines.append(
            f"| {name} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in cells) + " |"
        )
    baseline = table.extra.get("baseline")
    base = [value[(baseline, k)] for k in seeds if value.get((baseline, k)) is not None]
    if not base:
        return "\n".join(lines)
    ref, min_rise = float(np.mean(base)), table.extra.get("min_rise", 0.0)
    lines.append(f"\nChange against {baseline} ({ref:.3f}):\n")
    for name in names:
        if name == baseline:
            continue
        diffs = [value[(name, k)] - ref for k in seeds if value.get((name, k)) is not None]
        rose = sum(d >= min_rise for d in diffs)
        fell = sum(d < 0 for d in diffs)
        lines.append(
            f"- {name}: "
            + ", ".join(f"{d:+.3f}" for d in diffs)
            + f"; rose by >= {min_rise} in {rose} of {len(diffs)}, fell in {fell}"
        )
    return "\n".join(lines)


def warnings_line(records: list[dict]) -> str:
    """Which runs printed a ``teamrl: warning:`` line (teamrl.run.watch) while training, and
    what it said; records written before the runner kept warnings are counted as unknown."""
    known = [r for r in records if "warnings" in r]
    warned = [r for r in known if r["warnings"]]
    head = f"Training warnings: {len(warned)} of {len(known)} runs warned"
    if len(known) < len(records):
        head += f" ({len(records) - len(known)} records older than the runner's warning log)"
    lines = [head + ("." if not warned else ":")]
    for r in sorted(warned, key=lambda r: (r["condition"], r["seed"])):
        first = r["warnings"][0]
        lines.append(
            f"- {r['condition']} seed {r['seed']}, step {first['step']}: {first['warnings'][0]}"
        )
    return "\n".join(lines)


def plot_curves(table: Table, records: list[dict], path: Path) -> list[Path]:
    """One PNG per curve metric: mean over seeds per step, a band of mean ± std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for metric in table.curve_metrics:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        drawn = False
        for cond in table.conditions:
            curves = [
                [row.get(metric) for row in r["curve"]]
                for r in records
                if r["condition"] == cond.name and r["curve"]
            ]
            curves = [c for c in curves if c and None not in c]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            y = np.array([c[:n] for c in curves], dtype=float)
            mean, sd = y.mean(axis=0), y.std(axis=0, ddof=1) if len(y) > 1 else np.zeros(n)
            x = np.arange(1, n + 1)
            ax.plot(x, mean, label=f"{cond.name} (n={len(y)})")
            ax.fill_between(x, mean - sd, mean + sd, alpha=0.2)
            drawn = True
        ax.set_xlabel("training step")
        ax.set_ylabel(f"{metric} (mean ± sd over seeds)")
        ax.set_title(table.name)
        if drawn:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        out = path.with_name(f"{path.stem}_{metric.replace('/', '_')}.png")
        fig.savefig(out, dpi=110)
        plt.close(fig)
        written.append(out)
    return written


def report(table: Table, out_dir: Path, command: str = "") -> tuple[Path, list[Path]]:
    """Write ``<out_dir>/table.md`` (+ summary.json) and the curve PNGs from the raw records."""
    out_dir = Path(out_dir)
    records = load_records(out_dir)
    agg = aggregate(table, records)
    md = markdown(table, agg)
    dates = sorted(r["date"] for r in records)
    machines = sorted({r["machine"] for r in records})
    splits = sorted({r.get("split", "test") for r in records})  # "eval" = the validation split
    tunes = sorted({" ".join(r.get("tune", [])) for r in records} - {""})
    sizes = sorted({r["test"].get("problems", table.test_problems) for r in records})
    text = (
        f"# {table.name}\n\n{table.description}\n\n{md}\n\n"
        + (f"{per_seed(table, records)}\n\n" if records else "")
        + (f"{warnings_line(records)}\n\n" if records else "")
        + f"Evaluated on the {' + '.join(splits) or 'test'} split: {'/'.join(map(str, sizes))} "
        f"problems, one greedy episode each"
        + (f" plus {table.eval_samples} sampled" if table.eval_samples else "")
        + ".\n\n"
        + (f"Tuning overrides: `{'`, `'.join(tunes)}`\n\n" if tunes else "")
        + "Cells: mean ± sd over seeds [bootstrap 95 % interval of the mean, resampling seeds, "
        "10,000 resamples, rng seed 0].\n\n"
        + (f"Command: `{command}`\n\n" if command else "")
        + (f"Runs: {dates[0]} .. {dates[-1]} on {'; '.join(machines)}\n\n" if dates else "")
        + "Splits: "
        + "; ".join(f"{k}: {v}" for k, v in table.splits.items())
        + (f"\n\n{table.notes}\n" if table.notes else "\n")
    )
    md_path = out_dir / "table.md"
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path.write_text(text)
    write_json_atomic(out_dir / "summary.json", agg)
    pngs = plot_curves(table, records, out_dir / "curve.png") if records else []
    return md_path, pngs
