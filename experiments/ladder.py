"""The learning ladder's report: per rung, untrained vs trained, and what the training curve did.

    python experiments/ladder.py [plan_path_ladder | plan_path_ladder_proposed]

Reads the raw records of a ladder table (``python experiments/run_table.py plan_path_ladder``)
and writes ``ladder.md`` next to them. Per rung and team it gives the held-out success and team
reward before and after training, and from the training curve:

* the sampled team reward, mean of the first 3 and the last 3 steps. It is the team reward of
  every candidate of the last agent to act (``reward/team/<agent>/mean``), i.e. what the policy
  samples, not AT-GRPO's ``reward/mean``, which follows the best of K at each node;
* the share of zero-variance groups over the last 4 steps (such a group carries no gradient);
* the policy entropy per token, first and last step;
* the mean number of actions in the last agent's answer on the last step (where the curve
  shows what the policy settled on).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `import experiments`
RUNGS = (
    ("bandit", "0 one-token bandit"),
    ("hint", "1 3x3, shortest path in the prompt"),
    ("board", "2 3x3 (the main table's boards)"),
)
# (untrained condition, trained condition, last agent to act), per rung and team
TEAMS = {
    "bandit": [("one agent, GRPO", "bandit_untrained", "bandit_grpo", "picker")],
    **{
        rung: [
            ("one agent, GRPO", f"{rung}_untrained_single", f"{rung}_single_grpo", "solver"),
            ("tool + plan, AT-GRPO", f"{rung}_untrained_team", f"{rung}_at_grpo", "plan"),
        ]
        for rung in ("hint", "board")
    },
}


def team_reward(record: dict, agent: str) -> float | None:
    """The held-out greedy team reward. Records written before evaluation split the team
    reward (``greedy/reward``) from AT-GRPO's mixed return (``greedy/return``) stored the
    return; for these one-turn tasks the team reward is the last agent's step reward."""
    test = record["test"]
    if "greedy/return" in test:
        return test["greedy/reward"]
    return test.get(f"components/{agent}_reward", test.get("greedy/reward"))


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def curve_summary(record: dict, agent: str) -> dict:
    curve = record.get("curve") or []
    if not curve:
        return {}
    sampled = [row.get(f"reward/team/{agent}/mean") for row in curve]
    last = curve[-1]
    return {
        "first": _mean(sampled[:3]),
        "last": _mean(sampled[-3:]),
        "zero_var": _mean([row.get("frac_zero_std_groups") for row in curve[-4:]]),
        "entropy": (curve[0].get("entropy/shared"), last.get("entropy/shared")),
        "actions": last.get(f"reward/components/{agent}_n_actions"),
    }


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ladder_markdown(records: list[dict]) -> str:
    by_name = {r["condition"]: r for r in records if r.get("seed") == 0}
    head = (
        "| rung | team | success untrained -> trained | team reward untrained -> trained | "
        "sampled team reward, first 3 -> last 3 steps | zero-variance groups, last 4 steps | "
        "entropy first -> last | actions per answer, last step |"
    )
    lines = [head, "|---" * 8 + "|"]
    for rung, title in RUNGS:
        for team, before_name, after_name, agent in TEAMS[rung]:
            before, after = by_name.get(before_name), by_name.get(after_name)
            if before is None and after is None:
                continue
            acc = [r["test"].get("greedy/accuracy") if r else None for r in (before, after)]
            rew = [team_reward(r, agent) if r else None for r in (before, after)]
            c = curve_summary(after, agent) if after else {}
            ent = c.get("entropy", (None, None))
            lines.append(
                f"| {title} | {team} | {_f(acc[0])} -> {_f(acc[1])} | {_f(rew[0])} -> "
                f"{_f(rew[1])} | {_f(c.get('first'))} -> {_f(c.get('last'))} | "
                f"{_f(c.get('zero_var'))} | {_f(ent[0])} -> {_f(ent[1])} | "
                f"{_f(c.get('actions'), 1)} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    table = args[0] if args else "plan_path_ladder"
    from experiments.runner import RESULTS, load_records

    folder = RESULTS / table
    records = load_records(folder) if folder.exists() else []
    if not records:
        raise SystemExit(f"no records in {folder}: run python experiments/run_table.py {table}")
    text = f"# {table}: the learning ladder (seed 0)\n\n{ladder_markdown(records)}\n"
    (folder / "ladder.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
