"""Synchronous vs asynchronous training (``algorithm.max_staleness``), in interleaved rounds.

    python benchmarks/async_overlap.py                      # SmolLM2-135M, 5 rounds
    python benchmarks/async_overlap.py --model tiny-llama --rounds 1 --steps-per-turn 2  # smoke

Four contenders, each a ``Trainer`` built once in this process:

- ``sync`` and ``async``: the same run at staleness 0 and 1 (two LoRA agents, ``--policies``),
  real generation. On a CPU the generator thread and the learner share the same cores, so the
  overlap may buy nothing: this is what it measures, not what it hopes for.
- ``sync-fake`` and ``async-fake``: the generator's rollout replaced by a **fake engine** that
  returns a recorded rollout after sleeping as long as the learner's last update took (an
  engine on other hardware, costing no CPU here). Synchronous, a step costs generation +
  update; asynchronous about the larger of the two: the overlap itself.

A contender's turn in a round is ``--steps-per-turn`` consecutive training steps, timed end to
end; after its turn the asynchronous generator is stopped (batches it sampled ahead are
dropped and their examples drawn again), so no contender works during another's turn and every
turn starts cold: the first step of a turn waits for its rollout, the later ones may overlap.
Turns rotate their order every round (``rounds.round_order``); the report gives each
contender's median seconds per step, and the median over rounds of the per-round speed-up of
each asynchronous contender over its synchronous twin. Output: ``results/async_overlap.md`` and
``.json`` with the date, the machine and the load.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rounds import per_round_ratios, provenance, report, round_order  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


class Turns:
    """One contender: a Trainer (staleness 0 or 1), optionally on the fake engine."""

    def __init__(self, args, staleness: int, fake: bool):
        from teamrl.config import load_config
        from teamrl.trainer import Trainer

        n = args.new_tokens
        overrides = [
            f"model.name_or_path={args.model}",
            f"model.device={args.device}",
            f"model.dtype={args.dtype}",
            f"team.policies={args.policies}",
            "team.ignore_eos=true",  # every completion runs to its budget: equal work
            "env.name=tldr",
            "env.kwargs={source: offline}",
            f"team.agents=[{{name: concise, max_completion_length: {n}}}, "
            f"{{name: detailed, max_completion_length: {n}}}]",
            f"algorithm.num_generations={args.num_generations}",
            f"algorithm.max_staleness={staleness}",
            "algorithm.scale_rewards=batch",
            "train.learning_rate=1e-5",
            f"train.max_steps={10**6}",
            "log.progress_bar=false",
        ]
        self.args, self.fake = args, fake
        self.trainer = Trainer(load_config(None, overrides), run_dir=tempfile.mkdtemp())
        self.update_s = 0.0
        if fake:  # record one real rollout; the fake engine replays it
            ex = self.trainer.execution
            real = ex.rollout
            recorded = real(ex.team, self.trainer.data.next(1), 0)

            def fake_rollout(team, examples, step):
                time.sleep(self.update_s)  # as long as the learner's last update took
                return copy.deepcopy(recorded)

            ex.rollout = fake_rollout

    def turn(self) -> dict[str, float]:
        t0 = time.perf_counter()
        staleness, waits = [], []
        for _ in range(self.args.steps_per_turn):
            m = self.trainer.train_step()
            self.update_s = m["time/update"]
            staleness.append(m.get("async/staleness", 0.0))
            waits.append(m.get("async/learner_wait_s", 0.0))
        wall = time.perf_counter() - t0
        self.trainer.execution.stop()  # nothing runs during another contender's turn
        return {
            "step_s": wall / self.args.steps_per_turn,
            "update_s": self.update_s,
            "staleness": statistics.mean(staleness),
            "learner_wait_s": statistics.mean(waits),
        }


def _gpu_name() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def markdown(result: dict) -> str:
    a, m = result["args"], result["machine"]
    where = f"{m['gpu']} ({a['dtype']}), host " if m.get("gpu") else ""
    lines = [
        "# Synchronous vs asynchronous training (interleaved rounds)",
        "",
        f"`python benchmarks/async_overlap.py {' '.join(result['argv'])}`",
        "",
        f"{result['date']} on {where}{m['cpu']} ({m['cores']} cores), torch {m['torch']}; load "
        f"{result['load_start']} at start, {result['load_end']} at the end.",
        f"{a['model']}, two agents ({a['policies']}), G = {a['num_generations']}, "
        f"{a['new_tokens']} new tokens each; {result['rounds_done']} of {a['rounds']} rounds "
        f"done, {a['steps_per_turn']} "
        "steps per contender turn.",
        "",
        "| contender | s/step median [min, max] | update s | staleness | learner wait s | "
        "speed-up vs its synchronous twin, median of rounds [per round] |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in result["report"].items():
        s = row["step_s"]
        steps = result["steps"][name]
        twin = result["ratios"].get(name)
        speed = (
            f"{twin['median']:.2f}x [{', '.join(f'{r:.2f}' for r in twin['rounds'])}]"
            if twin
            else "-"
        )
        lines.append(
            f"| {name} | {s['median']:.2f} [{s['min']:.2f}, {s['max']:.2f}] | "
            f"{statistics.median(t['update_s'] for t in steps):.2f} | "
            f"{statistics.mean(t['staleness'] for t in steps):.2f} | "
            f"{statistics.mean(t['learner_wait_s'] for t in steps):.2f} | {speed} |"
        )
    return "\n".join(lines) + "\n"


def write(argv, args, load_start: float, names: list[str], steps: dict, done: int) -> str:
    """The result of the rounds done so far: results/<out>.json and .md; returns the markdown."""
    ratios = {}
    for name in names:
        twin = name.replace("async", "sync")
        if name.startswith("async") and twin in steps:
            per = per_round_ratios(
                [t["step_s"] for t in steps[twin]], [t["step_s"] for t in steps[name]]
            )
            ratios[name] = {"median": statistics.median(per), "rounds": per}
    result = {
        **provenance(argv, args, load_start),
        "rounds_done": done,
        "steps": steps,
        "report": report(steps, reference=None),
        "ratios": ratios,
    }
    result["machine"]["gpu"] = _gpu_name()
    stem = RESULTS / args.out  # an absolute --out (gpu-check's folder) replaces RESULTS
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_name(stem.name + ".json").write_text(json.dumps(result, indent=1))
    md = markdown(result)
    stem.with_name(stem.name + ".md").write_text(md)
    return md


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--policies", default="lora")
    ap.add_argument("--num-generations", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps-per-turn", type=int, default=4)
    ap.add_argument("--contenders", default="sync,async,sync-fake,async-fake")
    ap.add_argument("--device", default="auto", help="model.device (auto, cpu, cuda)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument(
        "--out", default="async_overlap", help="results/<OUT>.md and .json (a path: there)"
    )
    args = ap.parse_args(argv)
    from teamrl.team.models import quiet_hf

    quiet_hf()
    kinds = {
        "sync": (0, False),
        "async": (1, False),
        "sync-fake": (0, True),
        "async-fake": (1, True),
    }
    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    bad = [n for n in names if n not in kinds]
    if bad:
        ap.error(f"--contenders: unknown {bad}; choose from {', '.join(kinds)}")
    load_start = os.getloadavg()[0]
    contenders = {n: Turns(args, *kinds[n]) for n in names}
    for _ in range(args.warmup):
        for n in names:
            contenders[n].turn()
    steps: dict[str, list[dict]] = {n: [] for n in names}
    md = ""
    for r in range(args.rounds):
        for n in round_order(names, r):
            steps[n].append(contenders[n].turn())
            print(f"round {r} {n}: {steps[n][-1]['step_s']:.2f} s/step", file=sys.stderr)
        # Written after every round, so a run stopped at its time limit (gpu-check's budget)
        # still leaves the rounds it finished, and says how many.
        md = write(argv, args, load_start, names, steps, done=r + 1)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
