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

Usage:  python experiments/plan_path_ablation.py [--seeds 0 1 2] [--steps 6] [--out docs]
The defaults are the setting of docs/results.md (about 40 minutes on 2 CPU cores).
Writes ``<out>/results_plan_path.md`` (means and spreads over seeds) and a curve PNG.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

CONDITIONS = {
    "untrained": None,
    "single GRPO": ("plan_path_single", "grpo", "shared"),
    "traj-GRPO shared": ("plan_path", "grpo", "shared"),
    "AT-GRPO shared": ("plan_path", "at_grpo", "shared"),
    "AT-GRPO lora": ("plan_path", "at_grpo", "lora"),
}


def overrides(task: str, algo: str, policies: str, seed: int, args) -> list[str]:
    def agent(name: str, tokens: int, prefix: str) -> str:
        # json.dumps gives a YAML double-quoted string (the tool prefix holds a newline)
        return (
            f"{{name: {name}, temperature: 1.0, max_completion_length: {tokens}, "
            f"response_prefix: {json.dumps(prefix)}}}"
        )

    if task.endswith("_single"):
        agents = f"[{agent('solver', args.plan_tokens, args.plan_prefix)}]"
    else:
        tool = agent("tool", args.tool_tokens, args.tool_prefix)
        agents = f"[{tool}, {agent('plan', args.plan_tokens, args.plan_prefix)}]"
    return [
        f"run_name=ablation-{task}-{algo}-{policies}-s{seed}",
        f"seed={seed}",
        f"log.output_dir={args.runs}",
        "log.overwrite=true",
        "log.progress_bar=false",
        "log.save_steps=0",
        f"model.name_or_path={args.model}",
        "model.use_peft=true",
        f"team.policies={policies}",
        f"team.agents={agents}",
        f"env.name={task}",
        f"env.kwargs={{size: {args.size}, n_eval: 8, n_test: {args.test_problems}}}",
        f"env.max_turns={args.turns}",
        "env.reward_workers=2",
        f"algorithm.name={algo}",
        f"algorithm.num_generations={args.k}",
        f"train.prompts_per_step={args.prompts_per_step}",
        f"train.max_steps={args.steps}",
        f"train.learning_rate={args.lr}",
        "train.lr_scheduler_type=constant",
        "eval.eval_steps=0",
    ]


def run_condition(name: str, seed: int, args) -> dict:
    from teamrl.config import load_config
    from teamrl.evaluation import evaluate_trainer
    from teamrl.trainer import Trainer

    spec = CONDITIONS[name] or ("plan_path", "at_grpo", "shared")
    cfg = load_config(None, overrides(*spec, seed, args))
    trainer = Trainer(cfg)
    t0 = time.perf_counter()
    history = [] if CONDITIONS[name] is None else trainer.train()
    report = evaluate_trainer(trainer, "test", num_samples=0, limit=args.test_problems)
    return {
        "condition": name,
        "seed": seed,
        "setup": setup(args),
        "success": report["greedy/accuracy"],
        "reward": report["greedy/reward"],
        "train_reward": [m["reward/mean"] for m in history],
        "seconds": time.perf_counter() - t0,
    }


def setup(args) -> str:
    """The arguments that define a run (a resumed experiment only reuses matching rows)."""
    keys = ("steps", "size", "turns", "k", "tool_tokens", "plan_tokens", "test_problems")
    keys += ("model", "prompts_per_step", "lr", "tool_prefix", "plan_prefix")
    return " ".join(f"{k}={getattr(args, k)}" for k in keys)


def table(results: list[dict]) -> str:
    lines = [
        "| condition | test success (mean ± sd) | per seed | greedy test reward (mean ± sd) "
        "| training reward, first -> last step | minutes |",
        "|---|---|---|---|---|---|",
    ]
    for name in CONDITIONS:
        rows = [r for r in results if r["condition"] == name]
        if not rows:
            continue
        s = [r["success"] for r in rows]
        sd = statistics.stdev(s) if len(s) > 1 else 0.0
        per_seed = ", ".join(f"{x:.2f}" for x in s)
        rewards = [r["reward"] for r in rows]
        r_sd = statistics.stdev(rewards) if len(rewards) > 1 else 0.0
        curves = [r["train_reward"] for r in rows if r["train_reward"]]
        trend = (
            f"{statistics.mean(c[0] for c in curves):.2f} -> "
            f"{statistics.mean(c[-1] for c in curves):.2f}"
            if curves
            else "-"
        )
        minutes = sum(r["seconds"] for r in rows) / 60
        lines.append(
            f"| {name} | {statistics.mean(s):.3f} ± {sd:.3f} | {per_seed} | "
            f"{statistics.mean(rewards):.2f} ± {r_sd:.2f} | {trend} | {minutes:.1f} |"
        )
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name in CONDITIONS:
        curves = [
            r["train_reward"] for r in results if r["condition"] == name and r["train_reward"]
        ]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        mean = [statistics.mean(c[i] for c in curves) for i in range(n)]
        ax.plot(range(1, n + 1), mean, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("training reward (mean over seeds)")
    ax.set_title("Plan-Path, SmolLM2-135M, CPU")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--size", type=int, default=3, help="grid size")
    ap.add_argument("--turns", type=int, default=1)
    ap.add_argument("--k", type=int, default=4, help="branches / episodes per group")
    ap.add_argument("--tool-tokens", type=int, default=24)
    ap.add_argument("--plan-tokens", type=int, default=16)
    ap.add_argument("--test-problems", type=int, default=16)
    ap.add_argument(
        "--tool-prefix",
        default="```python\nprint([",
        help="the tool agent's response_prefix (a prefill that pins a 135M model to the format)",
    )
    ap.add_argument(
        "--plan-prefix", default="#### [", help="the plan (and single) agent's response_prefix"
    )
    ap.add_argument("--conditions", nargs="+", default=list(CONDITIONS))
    ap.add_argument("--runs", default="runs")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts-per-step", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-3, help="LoRA learning rate")
    ap.add_argument("--out", default="docs")
    return ap


def main() -> int:
    args = parser().parse_args()
    from teamrl.cli import _quiet_hf

    _quiet_hf()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "results_plan_path.jsonl"
    # Runs already in the raw log are kept (an interrupted experiment resumes where it stopped).
    results = [json.loads(ln) for ln in raw.read_text().splitlines()] if raw.exists() else []
    results = [r for r in results if r.get("setup") == setup(args)]
    done = {(r["condition"], r["seed"]) for r in results}
    for name in args.conditions:
        for seed in args.seeds:
            if (name, seed) in done:
                continue
            r = run_condition(name, seed, args)
            gc.collect()  # optimizer/scheduler reference cycles otherwise keep old models alive
            results.append(r)
            with raw.open("a") as f:
                f.write(json.dumps(r) + "\n")
            print(
                f"{name:<18} seed {seed}: success {r['success']:.2f}  "
                f"({r['seconds'] / 60:.1f} min)",
                flush=True,
            )
    md = table(results)
    plot(results, out / "results_plan_path.png")
    cmd = "python experiments/plan_path_ablation.py " + " ".join(sys.argv[1:])
    minutes = sum(r["seconds"] for r in results) / 60
    (out / "results_plan_path.md").write_text(
        f"{md}\n\nCommand: `{cmd.strip()}` ({minutes:.0f} min of runs)\n"
    )
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
