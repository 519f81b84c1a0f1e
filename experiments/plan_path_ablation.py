"""CPU reproduction of the *direction* of AT-GRPO's Plan-Path ablation with SmolLM2-135M.

Conditions (each trained from the same base, then evaluated greedily on fixed test seeds):

    untrained          the two-agent team (tool + plan) with the base model
    single GRPO        one agent, trajectory-level GRPO (L0)
    traj-GRPO shared   two agents, one shared policy, groups = (problem)
    AT-GRPO shared     two agents, one shared policy, groups = (problem, turn, agent)  (L1)
    AT-GRPO lora       two agents, one LoRA adapter each                              (L2)

Every trained condition trains LoRA adapters on the same frozen base (one shared adapter for
"shared" and the single agent, one per agent for "lora"), so the conditions differ only in
grouping and specialisation, not in full fine-tuning versus adapters.

This script is the table ``plan_path_ablation_cpu`` of experiments/tables.py with its settings
as flags; it runs through experiments/runner.py (one raw record per run in
experiments/results/plan_path_ablation_cpu/, resumed on rerun). With the default flags it is
the same as ``python experiments/run_table.py plan_path_ablation_cpu``.

    python experiments/plan_path_ablation.py [--seeds 0 1 2] [--steps 6]
    python experiments/plan_path_ablation.py --convert docs/results_plan_path.jsonl

``--convert`` turns the first version's JSON-lines log (docs/results_plan_path.jsonl) into raw
records (marked ``legacy``) so that the runner reads and aggregates them like its own.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `import experiments`

from experiments.tables import (  # noqa: E402
    ABLATION_CONDITIONS,
    ABLATION_DEFAULTS,
    ABLATION_IDS,
    ablation_overrides,
    ablation_table,
)

CONDITIONS = ABLATION_CONDITIONS
overrides = ablation_overrides  # (task, algo, policies, seed, args) -> config overrides


def parser() -> argparse.ArgumentParser:
    d = ABLATION_DEFAULTS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=d["steps"])
    ap.add_argument("--size", type=int, default=d["size"], help="grid size")
    ap.add_argument("--turns", type=int, default=d["turns"])
    ap.add_argument("--k", type=int, default=d["k"], help="branches / episodes per group")
    ap.add_argument("--tool-tokens", type=int, default=d["tool_tokens"])
    ap.add_argument("--plan-tokens", type=int, default=d["plan_tokens"])
    ap.add_argument("--test-problems", type=int, default=d["test_problems"])
    ap.add_argument(
        "--tool-prefix",
        default=d["tool_prefix"],
        help="the tool agent's response_prefix (a prefill that pins a 135M model to the format)",
    )
    ap.add_argument(
        "--plan-prefix", default=d["plan_prefix"], help="the plan (and single) agent's prefix"
    )
    ap.add_argument("--conditions", nargs="+", default=list(CONDITIONS))
    ap.add_argument("--runs", default=d["runs"])
    ap.add_argument("--model", default=d["model"])
    ap.add_argument("--prompts-per-step", type=int, default=d["prompts_per_step"])
    ap.add_argument("--lr", type=float, default=d["lr"], help="LoRA learning rate")
    ap.add_argument("--out", default="experiments/results/plan_path_ablation_cpu")
    ap.add_argument("--convert", help="a legacy results_plan_path.jsonl to convert, then exit")
    return ap


LEGACY_MACHINE = "2-core CPU machine (AMD EPYC, torch 2.13.0+cpu), per docs/results.md"


def convert_legacy(jsonl: Path, out_dir: Path) -> list[Path]:
    """One raw record per line of the first version's log (never overwrites a record)."""
    from experiments.runner import record_path, write_json_atomic

    written = []
    for line in Path(jsonl).read_text().splitlines():
        row = json.loads(line)
        path = record_path(out_dir, ABLATION_IDS[row["condition"]], row["seed"])
        if path.exists():
            continue
        record = {
            "table": "plan_path_ablation_cpu",
            "condition": ABLATION_IDS[row["condition"]],
            "seed": row["seed"],
            "legacy": True,
            "legacy_setup": row["setup"],
            "config": None,
            "trained": row["condition"] != "untrained",
            "swap": None,
            "curve": [{"step": i + 1, "reward/mean": r} for i, r in enumerate(row["train_reward"])],
            "test": {"greedy/accuracy": row["success"], "greedy/reward": row["reward"]},
            "outputs_before": [],
            "outputs_after": [],
            "date": "2026-11-23",
            "machine": LEGACY_MACHINE,
            "wall_seconds": row["seconds"],
            "git_commit": "legacy (experiments/plan_path_ablation.py before the runner)",
        }
        write_json_atomic(path, record)
        written.append(path)
    return written


def main() -> int:
    args = parser().parse_args()
    from experiments import runner

    out = Path(args.out)
    if args.convert:
        paths = convert_legacy(Path(args.convert), out)
        print(f"wrote {len(paths)} records to {out}")
    else:
        from teamrl.team.models import quiet_hf

        quiet_hf()
        table = ablation_table(args, args.conditions)
        runner.run_table(table, args.seeds, out_dir=out, runs_dir=Path(args.runs))
    table = ablation_table(args)
    md, pngs = runner.report(table, out, "python experiments/plan_path_ablation.py")
    print(md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
