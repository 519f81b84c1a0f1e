"""Command line: ``teamrl train | eval | envs | plot``."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path


def _quiet_hf() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    # PEFT still calls a transformers property that transformers 5 renamed; harmless.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")


def cmd_train(args: argparse.Namespace) -> int:
    from teamrl.config import load_config
    from teamrl.trainer import Trainer

    cfg = load_config(args.config, args.overrides)
    if args.dry_run:  # the placement plan only: no Ray, no model
        from teamrl.scale.placement import format_plan, parse_cluster

        print(format_plan(cfg, parse_cluster(args.cluster) if args.cluster else None))
        return 0
    trainer = Trainer(cfg, run_dir=args.run_dir)
    history = trainer.train(resume=args.resume)
    if history:
        first, last = history[0], history[-1]
        print(
            f"reward/mean: step {first['step']} {first['reward/mean']:.3f} -> "
            f"step {last['step']} {last['reward/mean']:.3f}"
        )
    print(f"run folder: {trainer.run_dir}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from teamrl.config import load_config
    from teamrl.evaluation import evaluate_trainer, markdown_table, write_report
    from teamrl.trainer import Trainer

    cfg = load_config(args.config, args.overrides)
    trainer = Trainer(cfg, run_dir=args.run_dir)
    ks = tuple(int(k) for k in args.ks.split(","))
    meta = {"config": str(args.config), "model": cfg.model.name_or_path}

    reports = {}

    def add_column(label: str) -> None:
        report = evaluate_trainer(trainer, args.split, args.num_samples, ks, args.limit)
        reports[f"{trainer.task.name} ({label})"] = report | meta | {"checkpoint": label}

    # The untrained model first (the baseline column), then the checkpoint loaded into the
    # same trainer: both columns see the same problems and the same random stream.
    label = Path(args.checkpoint).name if args.checkpoint else "untrained"
    if not args.checkpoint or not args.no_baseline:
        add_column("untrained")
    if args.checkpoint:
        trainer.load_checkpoint(args.checkpoint)
        add_column(label)
    out_dir = args.output_dir or (trainer.run_dir / "eval" / label)
    jpath, mpath = write_report(reports, out_dir)
    print(markdown_table(reports))
    print(f"\nreport: {jpath}  {mpath}")
    return 0


def cmd_envs(args: argparse.Namespace) -> int:
    from teamrl.envs.base import registered_tasks

    tasks = registered_tasks()
    width = max(len(n) for n in tasks)
    for name, desc in tasks.items():
        print(f"{name:<{width}}  {desc}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from teamrl.plot import plot_run

    print(plot_run(args.run_dir, args.output))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="teamrl", description=__doc__)
    p.add_argument("--help-config", action="store_true", help="List every config field and exit.")
    sub = p.add_subparsers(dest="command")

    t = sub.add_parser("train", help="Train a team: teamrl train CONFIG.yaml [key=value ...]")
    t.add_argument("config", help="YAML config (see configs/).")
    t.add_argument("overrides", nargs="*", help="Dotted overrides, e.g. train.max_steps=10")
    t.add_argument("--resume", action="store_true", help="Continue from the latest checkpoint.")
    t.add_argument("--run-dir", default=None, help="Run folder (default log.output_dir/run_name).")
    t.add_argument(
        "--dry-run",
        action="store_true",
        help="Print the placement plan (worker groups, resources) and exit: no Ray, no model.",
    )
    t.add_argument(
        "--cluster",
        default=None,
        help="With --dry-run: NODESxGPUS[xCPUS], e.g. 2x8, to show the node of every worker.",
    )
    t.set_defaults(fn=cmd_train)

    e = sub.add_parser(
        "eval", help="Greedy accuracy, pass@k, avg@k, turns and reward components on a split."
    )
    e.add_argument("config")
    e.add_argument("overrides", nargs="*")
    e.add_argument(
        "--checkpoint",
        default=None,
        help="checkpoints/step-N folder; reported next to the untrained model (the baseline).",
    )
    e.add_argument(
        "--no-baseline",
        action="store_true",
        help="With --checkpoint: skip the untrained model's column.",
    )
    e.add_argument("--split", default="test", choices=["test", "eval", "train"])
    e.add_argument("--num-samples", type=int, default=4, help="Sampled episodes per problem.")
    e.add_argument("--ks", default="1,2,4", help="Comma-separated k for pass@k.")
    e.add_argument("--limit", type=int, default=None, help="Evaluate the first N problems only.")
    e.add_argument("--output-dir", default=None, help="Where eval.json and eval.md go.")
    e.add_argument("--run-dir", default=None)
    e.set_defaults(fn=cmd_eval)

    sub.add_parser("envs", help="List registered tasks.").set_defaults(fn=cmd_envs)

    pl = sub.add_parser("plot", help="Write learning curves (PNG) for a run folder.")
    pl.add_argument("run_dir")
    pl.add_argument("--output", default=None)
    pl.set_defaults(fn=cmd_plot)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.help_config:
        from teamrl.config import describe

        print("\n".join(describe()))
        return 0
    if not getattr(args, "fn", None):
        parser.print_help()
        return 2
    _quiet_hf()
    from teamrl.config import ConfigError

    try:
        return args.fn(args)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    except (FileExistsError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
