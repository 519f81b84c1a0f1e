"""Command line: ``teamrl train | eval | export | envs | play | plot | report``.

A user mistake (a bad config value, a missing file, a missing optional package) ends with one
line, ``teamrl: error: ...``, and exit code 2; every check that needs no model runs before the
model loads (``teamrl.preflight``). A training step that fails, whatever ends it (the user's
code, ``sys.exit`` in it, a log line the disk cannot take), is one line too, exit code 2,
naming the step, the cause, the checkpoint written and the resume command. Any other exception
is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings
from pathlib import Path


def _prepare(args: argparse.Namespace):
    """Config, task and run folder of ``train``/``eval``, every check that needs no model done.

    --import modules run first (their @register_task), then the config is read and validated,
    the task is built (from an entry point if it comes from an installed package), and the
    preflight checks run.
    """
    from teamrl.config import load_config
    from teamrl.plugins import ensure_task, import_tasks
    from teamrl.preflight import preflight
    from teamrl.run.seeding import set_seed
    from teamrl.tasks.registry import bind_task, task_from_config

    import_tasks(args.imports)
    cfg = load_config(args.config, args.overrides)
    ensure_task(cfg.env.name)
    set_seed(cfg.seed)  # as the Trainer does before it builds a task itself
    task = task_from_config(cfg.env)
    bind_task(cfg, task, list(task.make_env().agents))  # an empty team.agents: the task's
    # --dry-run and --print-config make train's checks, the model's resolution included: a
    # model train would refuse (a hub id not cached while offline) is refused here too
    preflight(cfg, task, check_memory=(args.command == "train"))
    run_dir = Path(args.run_dir) if args.run_dir else Path(cfg.log.output_dir) / cfg.run_name
    return cfg, task, run_dir


def check_run_folder(cfg, run_dir: Path, resume: bool) -> None:
    """Before the model loads: a used folder without --resume and a resume of a run that is
    already finished each get their one line."""
    from teamrl.config import ConfigError
    from teamrl.run.files import check_unlocked

    check_unlocked(run_dir)  # another trainer on this folder: one line, before the model loads
    if not resume:
        if (run_dir / "metrics.jsonl").exists() and not cfg.log.overwrite:
            raise ConfigError(
                f"{run_dir} already holds a run: pass --resume to continue it, "
                "log.overwrite=true to start afresh, or another run_name"
            )
        return
    from teamrl.run.checkpoints import checkpoint_folders

    # No checkpoint yet (a preempted job that passes --resume every time): the trainer starts
    # from step 0 and says so. Empty or partial step-N folders are no checkpoints.
    steps = [int(p.name.split("-", 1)[1]) for p in checkpoint_folders(run_dir)]
    if steps and max(steps) >= cfg.train.max_steps:
        raise ConfigError(
            f"--resume: the run in {run_dir} is already at step {max(steps)} and "
            f"train.max_steps={cfg.train.max_steps}; raise train.max_steps to continue it"
        )


def cmd_train(args: argparse.Namespace) -> int:
    from teamrl.run.checkpoints import latest_checkpoint
    from teamrl.run.interrupt import TrainingInterrupted, aborted_message
    from teamrl.run.logging import team_reward_key
    from teamrl.scale.group import WorkerDiedError
    from teamrl.trainer import Trainer

    if args.print_config:
        return cmd_print_config(args)
    if args.dry_run:
        return _dry_run(args)

    train_run_folder(args)
    cfg, task, run_dir = _prepare(args)
    check_run_folder(cfg, run_dir, args.resume)
    try:
        trainer = Trainer(cfg, task=task, run_dir=run_dir, preflight=False)
        history = trainer.train(resume=args.resume)
    except TrainingInterrupted as stop:  # SIGTERM / Ctrl-C: checkpoint written, one line
        print(f"teamrl: {stop}", file=sys.stderr)  # its resume command works when pasted
        return 128 + stop.signum
    except WorkerDiedError as died:  # a Ray worker or its node lost: the step in flight only
        print(f"teamrl: error: {worker_died_line(died, run_dir)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as abort:  # a second signal: the checkpoint there is, if any
        print(
            f"teamrl: {aborted_message(abort, latest_checkpoint(run_dir), run_dir)}",
            file=sys.stderr,
        )
        return 130
    if history:
        first, last = history[0], history[-1]
        key = team_reward_key(last)  # the team reward, not AT-GRPO's per-node sum
        print(
            f"{key}: step {first['step']} {first[key]:.3f} -> step {last['step']} {last[key]:.3f}"
        )
    return 0  # the trainer's closing line named the run folder


def worker_died_line(died, run_dir: Path) -> str:
    """A dead Ray worker as one line: which worker and node, the last checkpoint (the step in
    flight is lost, nothing before it) and the command that continues from it."""
    from teamrl.run.checkpoints import checkpoint_folders
    from teamrl.run.interrupt import resume_command

    done = checkpoint_folders(run_dir)
    last = f"last checkpoint: {done[-1]}" if done else "no checkpoint yet"
    death = died.death.replace("\r", " ").replace("\n", " ")
    return f"{death}; {last}; resume with: {resume_command(run_dir)}"


def cmd_eval(args: argparse.Namespace) -> int:
    from teamrl.config import ConfigError
    from teamrl.evaluation import evaluate_trainer, held_out_split, render, write_report
    from teamrl.trainer import Trainer

    from_run_folder(args)
    cfg, task, run_dir = _prepare(args)
    if args.checkpoint and not Path(args.checkpoint).is_dir():
        raise ConfigError(f"--checkpoint {args.checkpoint}: no such folder")
    trainer = Trainer(cfg, task=task, run_dir=run_dir, preflight=False)
    if args.split is None:
        args.split = held_out_split(trainer.task)
    meta = {"config": str(args.config), "model": cfg.model.name_or_path}

    reports = {}

    def add_column(label: str) -> None:
        report = evaluate_trainer(trainer, args.split, args.num_samples, args.ks, args.limit)
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
    print(render(reports))
    print(f"\nreport: {jpath}  {mpath}")
    return 0


def use_run_folder(args: argparse.Namespace, run: Path) -> None:
    """Point ``train``/``eval`` at run folder ``run``: its config.yaml (extra overrides still
    apply), the folder itself, and what the run imported (run.json), imported now."""
    from teamrl.config import ConfigError
    from teamrl.plugins import restore_run_imports

    if not (run / "config.yaml").exists():
        raise ConfigError(f"{run}: not a run folder (no config.yaml)")
    restore_run_imports(run, args.imports)
    args.imports = []  # imported just now
    args.config = str(run / "config.yaml")
    args.run_dir = args.run_dir or str(run)


def train_run_folder(args: argparse.Namespace) -> None:
    """``teamrl train RUN_DIR --resume [key=value ...]``."""
    from teamrl.config import ConfigError

    run = Path(args.config)
    if not run.is_dir():
        return
    if (run / "config.yaml").exists() and not args.resume:
        raise ConfigError(f"{run}: a run folder: pass --resume to continue it")
    use_run_folder(args, run)


def cmd_print_config(args: argparse.Namespace) -> int:
    """``train --print-config``: the resolved YAML (the config file, the overrides, and what the
    task fills in: its name and agents), every field, then exit."""
    import yaml

    from teamrl.config import to_dict

    cfg, _, _ = _prepare(args)
    print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
    return 0


def from_run_folder(args: argparse.Namespace) -> None:
    """``teamrl eval RUN_DIR [--step N]``: the run's config.yaml (extra overrides still apply)
    and its newest intact checkpoint (or step N); ``eval CONFIG --checkpoint DIR`` as before."""
    from teamrl.config import ConfigError
    from teamrl.run.checkpoints import resume_checkpoint

    run = Path(args.config)
    if not run.is_dir():
        if args.step is not None:
            raise ConfigError(f"--step {args.step}: needs a run folder, got the file {run}")
        return
    use_run_folder(args, run)
    if not args.checkpoint:
        args.checkpoint = str(resume_checkpoint(run, args.step, move_aside=False))


def cmd_export(args: argparse.Namespace) -> int:
    from teamrl.commands.export import export_run

    export_run(
        Path(args.run_dir), Path(args.out), args.step, args.imports, args.overwrite,
        args.push_to_hub,
    )  # fmt: skip
    return 0


def cmd_envs(args: argparse.Namespace) -> int:
    from teamrl.plugins import import_tasks, load_entry_point_tasks
    from teamrl.tasks.registry import registered_tasks

    import_tasks(args.imports)
    for line in load_entry_point_tasks(strict=False):  # list the others; name the broken ones
        print(f"teamrl: warning: {line}", file=sys.stderr)
    tasks = registered_tasks()
    width = max(len(n) for n in tasks)
    for name, desc in tasks.items():
        print(f"{name:<{width}}  {desc}")
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    from teamrl.commands.play import format_episode, load_run, play_episode
    from teamrl.config import ConfigError

    if args.step is not None and args.step < 0:
        raise ConfigError(f"--step: expected a checkpoint step >= 0, got {args.step}")
    trainer, ckpt = load_run(args.run_dir, args.step, args.imports)
    episode = play_episode(
        trainer,
        args.example,
        args.split,
        greedy=not args.sample,
        prompt=args.prompt,
        checkpoint=ckpt,
    )
    print(format_episode(episode, args.max_prompt_chars or None))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from teamrl.commands.plot import plot_run

    print(plot_run(args.run_dir, args.output, smooth=args.smooth))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from teamrl.commands.report import write_report

    page = write_report(args.run_dir, args.output)
    print(f"wrote {page}: open it in a browser (one file; it loads nothing from the network)")
    return 0


class HelpConfig(argparse.Action):
    """``--help-config [SECTION]``: print every config field (per-agent ones too), or one
    section's, and exit, like --help; an unknown section is one line listing the sections."""

    def __init__(self, option_strings, dest, **kwargs):
        kwargs.update(nargs="?", metavar="SECTION", default=argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from teamrl.config import ConfigError
        from teamrl.config.reference import describe, describe_section

        # `train --help-config CONFIG key=value`: what follows the flag is no section name
        if values is not None and _names_a_config(values):
            values = None
        try:
            print("\n".join(describe() if values is None else describe_section(values)))
        except ConfigError as err:
            parser.exit(2, f"teamrl: error: {err}\n")
        parser.exit(0)


def _names_a_config(text: str) -> bool:
    """Whether ``text`` is an override, a YAML file or a shipped config's name."""
    from teamrl.config import BUILTIN_CONFIGS

    if "=" in text or text.endswith((".yaml", ".yml")) or Path(text).is_file():
        return True
    return (BUILTIN_CONFIGS / f"{text}.yaml").is_file()


def _ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(k) for k in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"expected ints >= 1, got {text!r}")
    return ks


def _add_traceback(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--traceback",
        action="store_true",
        help="On an error in the task's own code (its env, reward or prompt), show the whole "
        "stack instead of one line (also TEAMRL_TRACEBACK=1).",
    )


def _add_help_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--help-config",
        action=HelpConfig,
        help="List every config field (or one SECTION's, e.g. algorithm) and exit.",
    )


def _add_common(p: argparse.ArgumentParser) -> None:
    _add_help_config(p)
    _add_traceback(p)
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE_OR_FILE",
        help="Import a module (name or .py path) that registers tasks; repeatable.",
    )


def _dry_run(args: argparse.Namespace) -> int:
    """``train --dry-run``: every check ``train`` makes before its model loads (the config, the
    task and its rows, the agents, the prompts, the reward once on a dummy joint action, the
    model's shape and memory where its config is at hand), the resolved setting in a few
    lines, and the placement plan. No model, no Ray."""
    from teamrl.scale.placement import format_plan, parse_cluster

    cluster = parse_cluster(args.cluster) if args.cluster else None  # a bad --cluster first
    cfg, task, _ = _prepare(args)
    from teamrl.preflight import describe_setting

    for line in describe_setting(cfg, task):
        print(line)
    print(format_plan(cfg, cluster))
    if cfg.distributed.gpu_memory_gb is not None:  # each worker against one GPU (no model)
        from teamrl import preflight

        models = {name: preflight.meta_model_of(cfg, name) for name in preflight.model_names(cfg)}
        for line in preflight.check_placement(cfg, models, preflight.PROMPT_BUDGET):
            print(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="teamrl", description=__doc__.split("\n")[0])
    _add_help_config(p)
    _add_traceback(p)
    sub = p.add_subparsers(dest="command")

    t = sub.add_parser("train", help="Train a team: teamrl train CONFIG.yaml [key=value ...]")
    t.add_argument("config", help="YAML config, or the name of a shipped one (teamrl/configs/).")
    t.add_argument("overrides", nargs="*", help="Dotted overrides, e.g. train.max_steps=10")
    t.add_argument(
        "--resume", action="store_true", help="Continue from the latest checkpoint (anywhere)."
    )
    t.add_argument("--run-dir", default=None, help="Run folder (default log.output_dir/run_name).")
    t.add_argument(
        "--dry-run",
        action="store_true",
        help="Run every check that needs no model (the task, its rows, the prompts, the reward "
        "once on a dummy joint action), print the resolved setting and the placement plan, and "
        "exit: no Ray, no model.",
    )
    t.add_argument(
        "--print-config",
        action="store_true",
        help="Print the resolved config (YAML, the task's name and agents filled in) and exit.",
    )
    t.add_argument(
        "--cluster",
        default=None,
        help="With --dry-run: NODESxGPUS[xCPUS], e.g. 2x8, to show the node of every worker.",
    )
    _add_common(t)
    t.set_defaults(fn=cmd_train)

    e = sub.add_parser(
        "eval", help="Greedy accuracy, pass@k, avg@k, turns and reward components on a split."
    )
    e.add_argument("config", help="A run folder (its config.yaml and checkpoint), or a config.")
    e.add_argument("overrides", nargs="*")
    e.add_argument(
        "--step",
        type=int,
        default=None,
        help="With a run folder: checkpoint step-N (default: the newest intact).",
    )
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
    e.add_argument(
        "--split",
        default=None,
        choices=["test", "eval", "train"],
        help="Split to evaluate (default: test, else eval: the held-out ones; train only when "
        "asked).",
    )
    e.add_argument("--num-samples", type=int, default=4, help="Sampled episodes per problem.")
    e.add_argument("--ks", type=_ks, default=(1, 2, 4), help="Comma-separated k for pass@k.")
    e.add_argument("--limit", type=int, default=None, help="Evaluate the first N problems only.")
    e.add_argument("--output-dir", default=None, help="Where eval.json and eval.md go.")
    e.add_argument("--run-dir", default=None)
    _add_common(e)
    e.set_defaults(fn=cmd_eval)

    x = sub.add_parser("export", help="Write a run's team as standard weights + team.yaml.")
    x.add_argument("run_dir", help="The run folder.")
    x.add_argument("out", help="Output folder: one weights folder per policy and team.yaml.")
    x.add_argument("--step", type=int, default=None, help="Checkpoint step (default: newest).")
    x.add_argument("--push-to-hub", default=None, metavar="REPO", help="Upload OUT to this repo.")
    x.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace OUT when it holds an earlier export (its team.yaml); without it such a "
        "folder is refused.",
    )
    _add_common(x)
    x.set_defaults(fn=cmd_export)

    en = sub.add_parser("envs", help="List registered tasks (builtin, --import, entry points).")
    _add_common(en)
    en.set_defaults(fn=cmd_envs)

    pp = sub.add_parser(
        "play", help="Print one episode of a trained team, turn by turn: teamrl play RUN_DIR"
    )
    pp.add_argument("run_dir", help="A run folder (its config.yaml and checkpoints/).")
    pp.add_argument(
        "--step",
        type=int,
        default=None,
        help="Checkpoint step-N (default: the latest; 0: untrained).",
    )
    pp.add_argument("--example", type=int, default=0, help="Index of the example in the split.")
    pp.add_argument(
        "--split",
        default=None,
        choices=["test", "eval", "train"],
        help="Split to take the example from (default: test, else eval, else train).",
    )
    pp.add_argument(
        "--prompt", default=None, help="Replace the first observation every agent sees."
    )
    pp.add_argument("--sample", action="store_true", help="Sample instead of greedy decoding.")
    pp.add_argument(
        "--max-prompt-chars",
        type=int,
        default=600,
        help="Clip each shown prompt to its head and tail (0: show it whole).",
    )
    _add_common(pp)
    pp.set_defaults(fn=cmd_play)

    pl = sub.add_parser("plot", help="Write learning curves (PNG) for a run folder.")
    pl.add_argument("run_dir")
    pl.add_argument("--output", default=None)
    pl.add_argument(
        "--smooth",
        type=float,
        default=0.0,
        metavar="W",
        help="Draw each training curve as its EMA with weight W in [0, 1) (0: raw values).",
    )
    _add_traceback(pl)
    pl.set_defaults(fn=cmd_plot)

    rp = sub.add_parser(
        "report",
        help="Write one self-contained HTML page of a run: curves, samples, rollout trees, "
        "before/after evaluation outputs (reads the run folder's files only).",
    )
    rp.add_argument("run_dir", help="The run folder (its metrics.jsonl, samples.jsonl, ...).")
    rp.add_argument("--output", default=None, help="Where the page goes (RUN_DIR/report.html).")
    _add_traceback(rp)
    rp.set_defaults(fn=cmd_report)
    p.set_defaults(commands={"train": t, "eval": e})
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Options may sit anywhere among the overrides (``train X --resume a=1 b=2``):
    ``train``/``eval`` are parsed intermixed, which argparse cannot do through subparsers."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = parser.get_default("commands")
    if argv and argv[0] in commands:
        args = commands[argv[0]].parse_intermixed_args(argv[1:])
        args.command = argv[0]
        return args
    args = parser.parse_args(argv)
    if not getattr(args, "fn", None):
        parser.print_help(sys.stderr)
        parser.exit(2)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from teamrl.run.origin import set_command

    set_command(list(sys.argv[1:] if argv is None else argv))  # what run.json records
    # a warning is one line, as an error is (Python's default adds the source line under it)
    from teamrl.errors import one_line_warning

    warnings.formatwarning = one_line_warning
    from teamrl.team.models import quiet_hf  # here: `teamrl --help` loads no torch

    quiet_hf()
    from teamrl.config import ConfigError
    from teamrl.errors import UserCodeError

    full = args.traceback or os.environ.get("TEAMRL_TRACEBACK", "") not in ("", "0")
    try:
        return args.fn(args)
    except KeyboardInterrupt:  # before a run folder is used (a train names its checkpoint)
        print("teamrl: aborted", file=sys.stderr)
        return 130
    except SystemExit as escaped:  # commands return their status, so the user's code raised
        # this one (a task's make_env, a module --import ran): its error, never a clean exit
        from teamrl.errors import user_frame

        if full:
            traceback.print_exception(escaped)
        print(
            f"teamrl: error: {user_frame(escaped)}: sys.exit in the user's code is an error, "
            "not a clean exit (--traceback or TEAMRL_TRACEBACK=1 shows the stack)",
            file=sys.stderr,
        )
        return 2
    except (ConfigError, FileExistsError, FileNotFoundError, UserCodeError) as err:
        if full and isinstance(err, UserCodeError):
            raise  # --traceback: the whole stack, the user's frames included
        message = str(err).replace("\r", " ").replace("\n", " ")  # one line, always
        if isinstance(err, UserCodeError):
            message += " (--traceback or TEAMRL_TRACEBACK=1 shows the stack)"
        print(f"teamrl: error: {message}", file=sys.stderr)
        return 2
    finally:
        set_command(None)


if __name__ == "__main__":
    sys.exit(main())
