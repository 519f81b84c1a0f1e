"""Plan-Path shaping check: the expected reward of cheap policies against a shortest path.

Every answer goes through the env itself (``plan_path_single``: parse the text after '####',
apply the list to the board), on the first ``--boards`` test boards of each size, one turn.

    nothing     '#### []'                      an empty action list (since issue 22 the
                                               no-action case, like "no list")
    no list     'I do not know.'               no action list at all (no_action_penalty)
    garbage     '#### [jump, jump]'            a list of tokens that are not moves
    walls 2d    2d moves into a wall or the edge from the start (all invalid; '[]' if none)
    random L    L uniform moves from U/D/L/R   (Monte Carlo, --draws lists per board), with
                L = the board's shortest-path length d, and L = 2d
    partial     the first half of a shortest path (ceil(d / 2) moves toward the goal)
    shortest    a shortest path

If "nothing" beats the random lists (the only cheap policies with any chance of a win), a
policy that starts out near random is pushed toward answering nothing: GRPO's group baseline
ranks the empty list above the typical sampled list, and wins are too rare to outweigh it.
(Until issue 22 the empty list scored as zero moves, 0: that was the case. It now costs
``no_action_penalty``, as a reply with no list does.)

Usage:  python experiments/shaping_check.py [--sizes 3 10] [--boards 20] [--draws 400]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys

from teamrl.tasks.games.plan_path import PAPER_REWARDS, PROPOSED_REWARDS, plan_path_single_task

CONSTANTS = {
    "teamrl default": None,
    "paper (reference)": PAPER_REWARDS,
    "proposed (paper, gamma 1)": PROPOSED_REWARDS,
}


def answer_reward(env, text: str) -> float:
    """The reward of one answer on a fresh copy of the reset env (the board is built once)."""
    return env.clone().step({"solver": text}).reward


def answer_solves(env, text: str) -> float:
    return float(env.clone().step({"solver": text}).success)


def _bump(env, n: int) -> str:
    """n moves that are all invalid from the start (into the edge or an obstacle), if any."""
    for move in "UDLR":
        _, _, info = env.state.apply([move])
        if info["n_invalid"]:
            return moves_text([move] * n)
    return "#### []"


def moves_text(moves: list[str]) -> str:
    return "#### [" + ", ".join(f"'{m}'" for m in moves) + "]"


def policy_rewards(size: int, rewards: dict | None, boards: int, draws: int) -> dict[str, float]:
    """Mean reward of each policy over the first ``boards`` test boards of ``size``."""
    task = plan_path_single_task(
        size=size, n_train=1, n_eval=1, n_test=boards, max_turns=1, rewards=rewards
    )
    env = task.make_env()
    rng = random.Random(0)
    out: dict[str, list[float]] = {}
    for example in task.test:
        env.reset(example)
        path = env.state.shortest_path()
        d = len(path)
        answers = {
            "nothing": ["#### []"],
            "no list": ["I do not know."],
            "garbage": ["#### [jump, jump]"],
            "walls 2d": [_bump(env, 2 * d)],
            "random L=d": [moves_text(rng.choices("UDLR", k=d)) for _ in range(draws)],
            "random L=2d": [moves_text(rng.choices("UDLR", k=2 * d)) for _ in range(draws)],
            "partial": [moves_text(path[: (d + 1) // 2])],
            "shortest": [moves_text(path)],
        }
        for name, texts in answers.items():
            mean = statistics.mean(answer_reward(env, t) for t in texts)
            out.setdefault(name, []).append(mean)
        out.setdefault("random L=d win rate", []).append(
            statistics.mean(
                answer_solves(env, moves_text(rng.choices("UDLR", k=d))) for _ in range(draws)
            )
        )
    return {name: statistics.mean(v) for name, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[3, 10])
    ap.add_argument("--boards", type=int, default=20)
    ap.add_argument("--draws", type=int, default=400)
    args = ap.parse_args()
    rows = []
    for label, rewards in CONSTANTS.items():
        for size in args.sizes:
            rows.append((label, size, policy_rewards(size, rewards, args.boards, args.draws)))
    names = list(rows[0][2])
    print("| constants | grid | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for label, size, r in rows:
        print(f"| {label} | {size}x{size} | " + " | ".join(f"{r[n]:.3f}" for n in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
