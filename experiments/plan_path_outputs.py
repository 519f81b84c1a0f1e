"""What the Plan-Path agents wrote on the test boards, replayed: a look for sweeps and copying.

Success alone does not say how a board was solved. Wall bumps cost little and leave the walker
in place, and moves after the goal are free, so a board-independent list that bumps along the
walls until it happens on the goal (a *sweep*) solves some boards without planning. Each record's
``outputs_after`` (every test board's replies, ``Table.test_outputs``) is replayed through the
task's own env (the tool's program in the real sandbox), and per condition this reports:

- ``solved``: the team's success (as the record's ``greedy/accuracy``);
- ``optimal``: solved in a shortest number of moves, none invalid, none spare;
- ``bumped``: solved with at least one invalid move on the way (a sweep bumps into walls);
- ``padded``: solved with spare moves after the goal (free under the rules: never tried);
- ``moves``, ``invalid``: the final (plan or solver) list's length and its invalid moves;
- ``tool_ran``, ``tool_solves``: the tool's program ran, and its list solved the board;
- ``copied``: the plan agent's list is the tool's list, and ``starts_with_tool``: it begins with
  it (a copy with spare moves after it), both on boards where the tool printed a list.

    python experiments/plan_path_outputs.py experiments/results/plan_path_main [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MEASURES = (
    "solved",
    "optimal",
    "bumped",
    "padded",
    "moves",
    "invalid",
    "tool_ran",
    "tool_solves",
    "copied",
    "starts_with_tool",
)


def replay(env, example: dict, texts: dict[str, str]) -> dict[str, float]:
    """One board's measures: reset ``env`` on ``example`` and step it through ``texts`` (the
    record's ``agent@turn0`` replies; one turn)."""
    env.reset(example)
    need = env.state.shortest_path_length
    row: dict[str, float] = {}
    tool_list = None
    if "tool@turn0" in texts:
        tool = env.step({"tool": texts["tool@turn0"]}).reward_components
        row["tool_ran"] = tool["tool_exec_ok"]
        row["tool_solves"] = tool["tool_solved"]
        tool_list = env.tool["actions"]
        agent, text = "plan", texts.get("plan@turn0", "")
    else:
        agent, text = "solver", texts.get("solver@turn0", "")
    start = env.state.copy()  # the board the final list is applied to
    final = env.step({agent: text})
    actions = final.infos["actions"]
    _, _, info = start.apply(actions) if actions is not None else (None, None, None)
    invalid = info["n_invalid"] if info else 0
    unused = info["n_unused"] if info else 0
    solved = bool(final.success)
    if tool_list is not None:
        plan = actions or []
        row["copied"] = float(plan == tool_list)
        row["starts_with_tool"] = float(plan[: len(tool_list)] == tool_list)
    row.update(
        solved=float(solved),
        optimal=float(solved and len(actions) == need and invalid == 0),
        bumped=float(solved and invalid > 0),
        padded=float(solved and unused > 0),
        moves=float(len(actions or [])),
        invalid=float(invalid),
    )
    return row


def look(records: list[dict]) -> dict[str, dict[str, float]]:
    """Per condition: each measure's mean over every replayed board of every seed."""
    from teamrl.config import Config, from_dict
    from teamrl.tasks.registry import task_from_config

    rows: dict[str, list[dict]] = {}
    for rec in records:
        if not rec.get("outputs_after"):
            continue
        task = task_from_config(from_dict(Config, rec["config"]).env)
        split = task.eval if rec["split"] == "eval" else task.test
        env = task.make_env()
        for out in rec["outputs_after"]:
            rows.setdefault(rec["condition"], []).append(
                replay(env, split[out["problem"]], out["texts"])
            )
    return {
        cond: {
            m: statistics.fmean(r[m] for r in rs if m in r)
            for m in MEASURES
            if any(m in r for r in rs)
        }
        | {"boards": float(len(rs))}
        for cond, rs in rows.items()
    }


def to_markdown(table: dict[str, dict[str, float]]) -> str:
    lines = [
        "| condition | boards | " + " | ".join(MEASURES) + " |",
        "|---|---|" + "---|" * len(MEASURES),
    ]
    for cond, m in table.items():
        cells = [f"{m[k]:.2f}" if k in m else "-" for k in MEASURES]
        lines.append(f"| {cond} | {int(m['boards'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a table's records folder")
    ap.add_argument("--out", type=Path, help="also write the markdown table here")
    args = ap.parse_args(argv)
    records = [json.loads(p.read_text()) for p in sorted(args.folder.glob("*__seed*.json"))]
    md = to_markdown(look(records))
    print(md, end="")
    if args.out:
        args.out.write_text(md)


if __name__ == "__main__":
    main()
