"""Evaluation: greedy accuracy, pass@k (unbiased), avg@k, mean turns and reward components.

For each problem, ``k`` sampled single-path episodes plus one greedy episode are run. With c of
the n = k samples successful, the unbiased estimator of Chen et al. (2021) is

    pass@k' = 1 - C(n - c, k') / C(n, k')      for every k' <= n,

and avg@k = c / n (the mean success of a sample). A task's "success" comes from the env's
``Step.success``; tasks without one (writing) report rewards only.

``greedy/reward`` is what the task pays the team: the env's team reward summed over the
episode's real steps, the same quantity for every algorithm. ``greedy/return`` is what the
algorithm maximised, which differs under AT-GRPO's mixing ``alpha * team + local`` (with
alpha = 1 and an agent whose own action made the transition, local = team, so the return is
twice the reward); tables compare ``greedy/reward``.

Every evaluated episode is an independent single path (the recipe's ``eval_rollout``, not its
training rollout): never the AT-GRPO tree, whose branch selection reads the reward (the gold
answer), nor MAGRPO's early stop on a high reward. Either would be an oracle at test time.

The message ablation (``eval.message_ablation``) scores the same team again, greedily, with
every message an agent receives from a teammate replaced (``teamrl.envs.messages``): the greedy
pass records the messages, then one greedy pass per mode shows them emptied, swapped with the
next problem's, or without their unused part (the control). Its metrics are the greedy ones
under ``ablation/<mode>/``, with ``ablation/<mode>/messages`` the messages shown per problem.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from teamrl.algorithms.registry import recipe_for
from teamrl.envs.messages import MessageBank, Relays, relayed
from teamrl.errors import ConfigError


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n succeeds."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def bootstrap_ci(
    values: list[float], resamples: int = 10_000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean, resampling ``values`` (one per seed, or one
    per problem) with replacement; deterministic under ``seed``."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("bootstrap_ci: no values")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


# Resamples of the eval report's bootstrap intervals (2,000 is the usual count for a 95 %
# percentile interval): each draws one index per problem, so the memory is resamples x problems
# x 8 bytes (5,000 problems: 80 MB), where bootstrap_ci's default 10,000 would take 400 MB.
EVAL_RESAMPLES = 2_000


def summarise(greedy: list[dict], sampled: list[dict], ks: list[int]) -> dict[str, Any]:
    """Aggregate episode summaries (see RolloutResult.episodes) into one report.

    ``components/*`` are means over every evaluated episode, greedy and sampled. ``ci95``
    holds a percentile bootstrap 95 % interval over problems for each metric that is a mean
    of per-problem values (greedy accuracy and reward, sampled reward, avg@n, pass@k), when
    there are at least two problems.
    """
    report: dict[str, Any] = {"problems": len({e["problem"] for e in greedy})}
    report["episodes"] = len(greedy) + len(sampled)
    report["greedy/reward"] = float(np.mean([e["team_return"] for e in greedy]))
    report["greedy/return"] = float(np.mean([e["return"] for e in greedy]))
    report["greedy/turns"] = float(np.mean([e["turns"] for e in greedy]))
    per_problem: dict[str, list[float]] = {"greedy/reward": [e["team_return"] for e in greedy]}
    comps: dict[str, list[float]] = {}
    for e in greedy + sampled:
        for k, v in e["components"].items():
            comps.setdefault(k, []).append(v)
    for k, vs in sorted(comps.items()):
        report[f"components/{k}"] = float(np.mean(vs))
    has_success = all(e["success"] is not None for e in greedy + sampled)
    if has_success:
        report["greedy/accuracy"] = float(np.mean([e["success"] for e in greedy]))
        per_problem["greedy/accuracy"] = [float(e["success"]) for e in greedy]
    if sampled:
        by_problem: dict[int, list[dict]] = {}
        for e in sampled:
            by_problem.setdefault(e["problem"], []).append(e)
        n = min(len(v) for v in by_problem.values())
        report["samples_per_problem"] = n
        report["sampled/reward"] = float(np.mean([e["team_return"] for e in sampled]))
        report["sampled/return"] = float(np.mean([e["return"] for e in sampled]))
        report["sampled/turns"] = float(np.mean([e["turns"] for e in sampled]))
        per_problem["sampled/reward"] = [
            float(np.mean([e["team_return"] for e in v])) for v in by_problem.values()
        ]
        if has_success:
            counts = [sum(bool(e["success"]) for e in v[:n]) for v in by_problem.values()]
            report[f"avg@{n}"] = float(np.mean(counts) / n)
            per_problem[f"avg@{n}"] = [c / n for c in counts]
            for k in ks:
                if k <= n:
                    per_problem[f"pass@{k}"] = [pass_at_k(n, c, k) for c in counts]
                    report[f"pass@{k}"] = float(np.mean(per_problem[f"pass@{k}"]))
    if report["problems"] >= 2:  # one problem has no spread to resample
        report["ci95"] = {
            k: list(bootstrap_ci(v, resamples=EVAL_RESAMPLES)) for k, v in per_problem.items()
        }
    return report


# The rows of a report, in the order a reader looks for them: how well the team did (success,
# then reward), then the rest of what was measured, then how it was measured (METADATA).
HEADLINE = (
    "greedy/accuracy",
    "pass@",
    "avg@",
    "greedy/reward",
    "sampled/reward",
    "greedy/return",
    "sampled/return",
    "greedy/turns",
    "sampled/turns",
    "components/",
)
METADATA = (
    "checkpoint",
    "split",
    "problems",
    "episodes",
    "samples_per_problem",
    "num_samples",
    "ks",
    "limit",
    "model",
    "config",
)
NOT_ROWS = ("ci95",)


def ordered_keys(keys) -> list[str]:
    """A report's row keys: the headline metrics first (pass@k by k), any other metric, then
    the metadata; ``ci95`` is no row (its intervals sit in their metrics' cells)."""

    def rank(key: str) -> tuple:
        if key in METADATA:
            return (2, METADATA.index(key), 0, key)
        for i, head in enumerate(HEADLINE):
            if key == head or (head[-1] in "@/" and key.startswith(head)):
                rest = key[len(head) :]
                return (0, i, int(rest) if rest.isdigit() else 0, key)
        return (1, 0, 0, key)

    return sorted((k for k in keys if k not in NOT_ROWS), key=rank)


def markdown_table(reports: dict[str, dict[str, Any]]) -> str:
    """One column per task (or run), one row per metric: the headline metrics first, then the
    metadata (``ordered_keys``); a metric with a bootstrap interval reads ``0.500 [0.250,
    0.750]``."""
    names = list(reports)
    keys = ordered_keys({k for r in reports.values() for k in r})
    lines = ["| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for k in keys:
        cells = []
        for n in names:
            cell = _fmt(reports[n].get(k))
            ci = reports[n].get("ci95", {}).get(k)
            cells.append(f"{cell} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else cell)
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(reports: dict[str, dict[str, Any]]) -> str:
    """The table, then its notes after a blank line (a line right under a markdown table would
    be read as one more row): what ``teamrl eval`` prints and eval.md holds."""
    notes = report_notes(reports)
    return markdown_table(reports) + ("\n\n" + "\n".join(notes) if notes else "")


def report_notes(reports: dict[str, dict[str, Any]]) -> list[str]:
    """The lines printed under a report's table: what its intervals are, and which pass@k
    it could not estimate (k above the samples per problem)."""
    notes = []
    if any(r.get("ci95") for r in reports.values()):
        notes.append("[lo, hi]: a percentile bootstrap 95 % interval over the problems")
    for n in sorted({r["samples_per_problem"] for r in reports.values() if _has_pass(r)}):
        ks = sorted(
            {k for r in reports.values() if r.get("samples_per_problem") == n for k in r["ks"]}
        )
        over = [f"pass@{k}" for k in ks if k > n]
        if over:
            notes.append(
                f"note: {', '.join(over)} not reported: k exceeds the {n} samples per problem "
                f"(pass@k needs --num-samples >= k)"
            )
    return notes


def _has_pass(report: dict[str, Any]) -> bool:
    """Whether a report estimates pass@k (a task with success, sampled episodes, its ks)."""
    return (
        "samples_per_problem" in report
        and "ks" in report
        and any(k.startswith("avg@") for k in report)
    )


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    return str(v)


# Problems are evaluated in up to this many rollouts, so the progress bar moves while a long
# evaluation runs, but never fewer than EVAL_MIN_CHUNK problems per rollout: one rollout decodes
# its problems as one batch, and small batches are slow on a CPU (16 TLDR posts, 2 agents, 64
# greedy tokens on 2 cores: 42 s in one rollout, 90 s in 8 rollouts of 2). The chunks depend on
# the problem count only, never on whether a bar is shown, so the numbers are the same with or
# without one.
EVAL_CHUNKS = 10
EVAL_MIN_CHUNK = 8


def split_sizes(task: Any) -> str:
    """``train (12), eval (4)``: a task's non-empty splits and their sizes, for messages."""
    sizes = [
        f"{s} ({len(getattr(task, s))})" for s in ("train", "eval", "test") if getattr(task, s)
    ]
    return ", ".join(sizes) or "none"


def held_out_split(task: Any) -> str:
    """The split ``teamrl eval`` reports when none is named: test, else eval. A task with
    neither is refused in one line rather than scored on its training data silently."""
    for name in ("test", "eval"):
        if getattr(task, name):
            return name
    raise ConfigError(
        f"task {task.name!r} has no held-out split (test or eval) to evaluate on; its splits: "
        f"{split_sizes(task)}; pass --split train to score the training data"
    )


def evaluate_trainer(
    trainer,
    split: str = "test",
    num_samples: int = 4,
    ks: tuple[int, ...] = (1, 2, 4),
    limit: int | None = None,
    progress: bool | None = None,
    greedy_rollouts: list | None = None,
) -> dict[str, Any]:
    """Greedy and sampled single-path episodes of the trainer's team on a task split.

    The report records its settings (split, limit, num_samples, ks) next to the metrics.
    The torch seed is reset to ``cfg.seed`` first, so two models evaluated one after the
    other (a baseline and a checkpoint) draw the same random stream. ``progress``: a tqdm bar
    over the episodes, as training shows one over its steps (default: ``log.progress_bar``).
    ``greedy_rollouts``: a list that receives the greedy ``RolloutResult`` of each chunk
    (texts and per-problem episodes, for a caller that shows them). ``eval.message_ablation``
    adds one greedy pass per mode after these (``add_ablation``); the un-ablated
    numbers are the same with or without it.
    """
    import torch

    data = getattr(trainer.task, split)
    if not data:
        raise ConfigError(
            f"--split {split}: task {trainer.task.name!r} has no {split!r} split to evaluate "
            f"on; its splits: {split_sizes(trainer.task)}"
        )
    n = len(data) if limit is None else min(limit, len(data))
    examples = [(i, data[i]) for i in range(n)]
    modes = list(trainer.cfg.eval.message_ablation)
    if "swap" in modes and n < 2:
        raise ConfigError(
            f"eval.message_ablation: 'swap' shows each problem another problem's messages; "
            f"evaluate at least 2 problems (got {n})"
        )
    bank = MessageBank(examples) if modes else None
    if progress is None:
        progress = trainer.cfg.log.progress_bar
    bar = progress_bar(n * (1 + num_samples + len(modes)), f"eval {split}", progress)
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(trainer.cfg.seed)
            recorder = bank.recorder() if bank else None
            greedy = chunked_episodes(trainer, examples, 1, True, bar, greedy_rollouts, recorder)
            sampled = chunked_episodes(trainer, examples, num_samples, False, bar)
            ablated = {}
            for mode in modes:  # after the sampled pass, which they leave as it was
                relays = bank.ablation(mode)
                episodes = chunked_episodes(trainer, examples, 1, True, bar, relays=relays)
                ablated[mode] = (episodes, relays)
    finally:
        bar.close()
    report = summarise(greedy, sampled, list(ks))
    for mode, (episodes, relays) in ablated.items():
        add_ablation(report, mode, episodes, relays)
    report.update({"split": split, "limit": limit, "num_samples": num_samples, "ks": list(ks)})
    return report


def add_ablation(report: dict[str, Any], mode: str, episodes: list[dict], relays: Relays) -> None:
    """Add one ablation pass to ``report``: its greedy metrics and their intervals as
    ``ablation/<mode>/<metric>``, and ``ablation/<mode>/messages``."""
    own = summarise(episodes, [], [])
    prefix = f"ablation/{mode}/"
    for key, value in own.items():
        if key.startswith(("greedy/", "components/")):
            report[prefix + key] = value
    report[prefix + "messages"] = relays.messages_per_problem()
    if "ci95" in own:
        report.setdefault("ci95", {}).update({prefix + k: v for k, v in own["ci95"].items()})


def chunked_episodes(
    trainer,
    examples: list,
    n: int,
    greedy: bool,
    bar,
    rollouts: list | None = None,
    relays: Relays | None = None,
) -> list[dict]:
    """Single-path episodes over ``examples`` in up to ``EVAL_CHUNKS`` rollouts of at least
    ``EVAL_MIN_CHUNK`` problems each (the last may be smaller), advancing ``bar`` by each
    rollout's episodes; each ``RolloutResult`` is appended to ``rollouts`` when given.
    ``relays``: what the agents are shown of their teammates' messages (default: as written)."""
    if not n:
        return []
    recipe = recipe_for(trainer.cfg.algorithm.name)
    make_env = trainer.task.make_env if relays is None else relayed(trainer.task.make_env, relays)
    size = max(EVAL_MIN_CHUNK, math.ceil(len(examples) / EVAL_CHUNKS))
    episodes: list[dict] = []
    for start in range(0, len(examples), size):
        chunk = examples[start : start + size]
        result = recipe.eval_rollout(trainer.team, make_env, chunk, trainer.cfg, n=n, greedy=greedy)
        episodes += result.episodes
        if rollouts is not None:
            rollouts.append(result)
        bar.update(len(chunk) * n)
    return episodes


def greedy_outputs(rollouts: list) -> list[dict]:
    """What single-path rollouts wrote, per problem in problem order: ``{"problem", "reward"
    (the episode's team return), "texts" and "tokens" (completion length), the last two keyed
    "agent@turnT"}``. Reads the ``greedy_rollouts`` that ``evaluate_trainer`` fills."""
    rows: dict[int, dict] = {}
    for result in rollouts:
        for e in result.episodes:
            rows.setdefault(e["problem"], {"problem": e["problem"], "texts": {}, "tokens": {}})
            rows[e["problem"]]["reward"] = e["team_return"]
        for s in result.samples:
            problem = s.group[0] if isinstance(s.group, tuple) else s.group
            row = rows.setdefault(problem, {"problem": problem, "texts": {}, "tokens": {}})
            row["texts"][f"{s.agent}@turn{s.turn}"] = s.text
            row["tokens"][f"{s.agent}@turn{s.turn}"] = len(s.completion_ids)
    return [rows[p] for p in sorted(rows)]


def progress_bar(total: int, desc: str, enabled: bool):
    """A tqdm bar like training's (``log.progress_bar``); a disabled one shows nothing."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="episode", dynamic_ncols=True, disable=not enabled)


def write_report(reports: dict[str, dict[str, Any]], out_dir: str | Path) -> tuple[Path, Path]:
    import json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jpath, mpath = out / "eval.json", out / "eval.md"
    # columns keep their order (the baseline first); within a column the headline metrics
    # come first, then the metadata, then the intervals
    ordered = {}
    for name, r in reports.items():
        ordered[name] = {k: r[k] for k in ordered_keys(r)}
        ordered[name].update({k: r[k] for k in NOT_ROWS if k in r})
    jpath.write_text(json.dumps(ordered, indent=2) + "\n")
    mpath.write_text(render(reports) + "\n")
    return jpath, mpath
