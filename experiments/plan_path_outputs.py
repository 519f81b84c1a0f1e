"""What the Plan-Path agents wrote on the test boards, replayed: a look for sweeps and copying.

Success alone does not say how a board was solved. Wall bumps cost little and leave the walker
in place, and moves after the goal are free, so a board-independent list that bumps along the
walls until it happens on the goal (a *sweep*) solves some boards without planning. Each record's
``outputs_after`` (every test board's replies, ``Table.test_outputs``) is replayed through the
task's own env (the tool's program in the real sandbox), and per condition this reports:

- ``solved``: the team's success (as the record's ``greedy/accuracy``);
- ``optimal``: solved in a shortest number of moves, none invalid, none spare;
- ``sweep``: solved with at least one invalid or spare move;
- ``moves`` and ``invalid``: the final (plan or solver) list's length and its invalid moves;
- ``tool_ran`` and ``tool_solves``: the tool's program ran, and its list solved the board;
- ``copied``: the plan agent's list is the tool's list (on boards where the tool printed one).

    python experiments/plan_path_outputs.py experiments/results/plan_path_main [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MEASURES = ("solved", "optimal", "sweep", "moves", "invalid", "tool_ran", "tool_solves", "copied")


def replay(env, example: dict, texts: dict[str, str]) -> dict[str, float]:
    """One board's measures: reset ``env`` on ``example`` and step it through ``texts`` (the
    record's ``agent@turn0`` replies; one turn)."""
    env.reset(example)
    need = env.state.shortest_path_length
    row: dict[str, float] = {}
    final = None
    if "tool@turn0" in texts:
        tool = env.step({"tool": texts["tool@turn0"]}).reward_components
        row["tool_ran"] = tool["tool_exec_ok"]
        row["tool_solves"] = tool["tool_solved"]
        tool_list = env.tool["actions"]
        final = env.step({"plan": texts.get("plan@turn0", "")})
        if tool_list is not None:
            row["copied"] = float(final.infos["actions"] == tool_list)
        prefix = "plan_"
    else:
        final = env.step({"solver": texts.get("solver@turn0", "")})
        prefix = "solver_"
    comps = final.reward_components
    solved = bool(final.success)
    moves, invalid = comps[f"{prefix}n_actions"], comps[f"{prefix}n_invalid"]
    spare = moves > need  # more moves than a shortest path: detours, bumps or unused moves
    row.update(
        solved=float(solved),
        optimal=float(solved and moves == need and invalid == 0),
        sweep=float(solved and (invalid > 0 or spare)),
        moves=moves,
        invalid=invalid,
    )
    return row


def look(records: list[dict]) -> dict[str, dict[str, float]]:
    """Per condition: each measure's mean over every replayed board of every seed."""
    from teamrl.config import Config, from_dict
    from teamrl.envs.base import task_from_config

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
