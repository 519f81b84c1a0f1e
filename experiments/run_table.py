"""Run one experiment table (conditions x seeds), resuming from its raw records, and report it.

    python experiments/run_table.py TABLE [--seeds 3] [--dry-run] [--conditions A B]
    python experiments/run_table.py TABLE --tune train.learning_rate=1e-4 [...]   # choose settings

Choosing settings: ``--tune KEY=VALUE ...`` adds config overrides on top of every condition's
and evaluates on the validation split (never the test split), with records under
experiments/results/<TABLE>/validation/<overrides>/. ``--split validation`` alone evaluates
the table as it is on the validation split.

Raw records: experiments/results/<TABLE>/<condition>__seed<k>.json, one per finished run (commit
them as they complete; a rerun skips them). Then table.md, summary.json and curve PNGs are
rewritten from every record present. ``--list`` prints the tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `import experiments`


def main(argv: list[str] | None = None) -> int:
    from experiments.tables import TABLES, get_table

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("table", nargs="?", help=f"one of: {', '.join(TABLES)}")
    ap.add_argument("--seeds", type=int, default=3, help="run seeds 0..N-1")
    ap.add_argument("--first-seed", type=int, default=0, help="start the seeds here")
    ap.add_argument("--conditions", nargs="+", help="only these conditions (default: all)")
    ap.add_argument("--dry-run", action="store_true", help="validate every config, run nothing")
    ap.add_argument("--out", help="records folder (default experiments/results/TABLE)")
    ap.add_argument("--runs", help="run folders (checkpoints; default runs/experiments)")
    ap.add_argument("--list", action="store_true", help="list the tables and exit")
    ap.add_argument(
        "--tune",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides to try; evaluates on the validation split",
    )
    ap.add_argument(
        "--split",
        choices=("test", "validation"),
        help="split to evaluate (default: test; validation with --tune)",
    )
    args = ap.parse_args(argv)
    if args.list or not args.table:
        for t in TABLES.values():
            print(f"{t.name:<24} {t.description}")
        return 0
    table = get_table(args.table)
    split = args.split or ("validation" if args.tune else "test")
    if args.tune and split == "test":
        ap.error("--tune chooses settings, so it evaluates on the validation split, not test")
    bad = [t for t in args.tune if "=" not in t]
    if bad:
        ap.error(f"--tune: expected KEY=VALUE, got {bad}")
    if args.conditions:
        unknown = set(args.conditions) - {c.name for c in table.conditions}
        if unknown:
            ap.error(f"--conditions: unknown {sorted(unknown)} for table {table.name}")
    from experiments import runner
    from teamrl.team.models import quiet_hf

    quiet_hf()
    tune = tuple(args.tune)
    split_name = "eval" if split == "validation" else "test"  # the task's name for it
    out = Path(args.out) if args.out else runner.default_out(table, split_name, tune)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    runner.run_table(
        table,
        seeds,
        out_dir=out,
        runs_dir=Path(args.runs) if args.runs else runner.RUNS,
        conditions=args.conditions,
        dry_run=args.dry_run,
        split=split_name,
        tune=tune,
    )
    if args.dry_run:
        return 0
    md, pngs = runner.report(
        table, out, "python experiments/run_table.py " + " ".join(sys.argv[1:])
    )
    print(md.read_text())
    print("curves:", ", ".join(str(p) for p in pngs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
