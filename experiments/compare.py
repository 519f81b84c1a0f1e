"""Paired comparison of two conditions of a table: the per-seed difference, same seed.

    python experiments/compare.py tldr_magrpo magrpo_team independent_rewards [--metric M ...]

Two conditions run with the same seed share their data order and their first samples, so the
per-seed difference A - B removes part of the seed-to-seed spread that the table's separate
intervals carry. For each metric it prints the differences, their mean and a bootstrap 95 %
interval of the mean difference (resampling seeds, as the table does), and how many seeds A won.
Seeds that only one condition has are left out and named.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def paired(records: list[dict], a: str, b: str, metric: str) -> dict:
    """{seeds, diffs, mean, ci95, wins, missing}: A - B per seed present in both conditions."""
    from experiments.runner import bootstrap_ci

    def by_seed(name: str) -> dict[int, float]:
        return {
            r["seed"]: r["test"][metric]
            for r in records
            if r["condition"] == name and r["test"].get(metric) is not None
        }

    va, vb = by_seed(a), by_seed(b)
    seeds = sorted(set(va) & set(vb))
    if not seeds:
        raise SystemExit(f"compare: no seed has both {a!r} and {b!r} with {metric!r}")
    diffs = [va[k] - vb[k] for k in seeds]
    return {
        "seeds": seeds,
        "diffs": diffs,
        "mean": sum(diffs) / len(diffs),
        "ci95": bootstrap_ci(diffs),
        "wins": sum(d > 0 for d in diffs),
        "missing": sorted(set(va) ^ set(vb)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("table")
    ap.add_argument("a", help="condition A")
    ap.add_argument("b", help="condition B")
    ap.add_argument("--metric", nargs="+", help="default: the table's metrics")
    ap.add_argument("--records", help="records folder (default experiments/results/TABLE)")
    args = ap.parse_args(argv)
    from experiments.runner import RESULTS, load_records
    from experiments.tables import get_table

    table = get_table(args.table)
    folder = Path(args.records) if args.records else RESULTS / table.name
    records = load_records(folder)
    print(f"| {args.a} - {args.b} | seeds | per seed | mean [95 % CI] | A higher |")
    print("|---|---|---|---|---|")
    for metric in args.metric or table.metrics:
        p = paired(records, args.a, args.b, metric)
        lo, hi = p["ci95"]
        diffs = ", ".join(f"{d:+.3f}" for d in p["diffs"])
        print(
            f"| {metric} | {len(p['seeds'])} | {diffs} | {p['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}] "
            f"| {p['wins']} of {len(p['seeds'])} |"
        )
        if p["missing"]:
            print(f"(seeds in one condition only, left out: {p['missing']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
