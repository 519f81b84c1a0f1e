"""Soak test: kill -9 a tiny training run at a random moment, resume it, and check that it ends
exactly where an uninterrupted run ends (every step's metrics and the final weights).

    python benchmarks/soak_resume.py --trials 20

One uninterrupted reference run first, then per trial: a fresh run in a forked process, ``kill -9``
at a random moment, then ``--resume`` (or a fresh start if no checkpoint was written yet) until
it finishes. The child widens the windows a kill can land in: each metrics/samples line is
written in two halves with a pause between, and the checkpoint writer and the metrics rewrite
pause half-way (``--write-delay``), so kills land inside checkpoint and metrics writes, not only
between them. A trial is an exact continuation when the resumed run's metrics (every key but
timings) and final weights equal the reference's. The report goes to
``benchmarks/results/soak_resume.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = [
    "model.name_or_path=tiny-llama",
    "team.policies=shared",
    "env.name=digits",
    "team.agents=[{name: alice, max_completion_length: 8}, {name: bob, max_completion_length: 8}]",
    "train.learning_rate=0.01",
    "train.lr_scheduler_type=constant",
    "train.prompts_per_step=2",
    "algorithm.num_generations=4",
    "log.progress_bar=false",
    "log.save_steps=1",
    "log.save_total_limit=2",
]


def child(argv: list[str], delay: float) -> int:
    """The trainer, with pauses inside its writes (the kill windows)."""
    if delay:
        from teamrl.run import checkpoints, logging
        from teamrl.run import files as run_files

        _, real_policy, real_write = (
            run_files.append_line,
            checkpoints.save_policy,
            run_files.write_all,
        )

        def slow_append(path, line):  # a torn line is what a kill here leaves
            data = line.rstrip("\n") + "\n"
            with open(path, "a") as f:
                f.write(data[: len(data) // 2])
                f.flush()
                time.sleep(delay)
                f.write(data[len(data) // 2 :])

        def slow_policy(pol, folder, **kw):
            real_policy(pol, folder, **kw)
            time.sleep(delay)  # a half-written temp checkpoint folder

        def slow_write(f, text):
            real_write(f, text[: len(text) // 2])
            f.flush()
            time.sleep(delay)
            real_write(f, text[len(text) // 2 :])

        logging.append_line = slow_append
        checkpoints.save_policy = slow_policy
        run_files.write_all = slow_write
    from teamrl.cli import main

    return main(argv)


class Child:
    """A trainer in a forked copy of this process: teamrl, torch and the tiny model's files
    are already loaded, so a trial costs its training steps, not a Python start-up."""

    def __init__(self, config: Path, run_dir: Path, steps: int, delay: float, extra=()):
        argv = ["train", str(config), *OVERRIDES, f"train.max_steps={steps}"]
        argv += ["--run-dir", str(run_dir), *extra]
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log = run_dir.parent / f"{run_dir.name}.stderr"
        self.returncode: int | None = None
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns
            rc = 1
            try:
                fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(fd, 2)
                os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
                rc = child(argv, delay)
            finally:
                os._exit(rc)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(0.02)
        return self.returncode

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)

    def stderr(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


def outcome(run_dir: Path, steps: int) -> dict:
    """Every step's metrics (timings dropped) and a hash of the final weights."""
    rows = []
    for ln in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(ln)
        rows.append({k: v for k, v in row.items() if not k.startswith(("time/", "tokens_per"))})
    from safetensors.torch import load_file

    final = run_dir / "checkpoints" / f"step-{steps}" / "policies" / "shared" / "model.safetensors"
    h = hashlib.sha256()
    for name, t in sorted(load_file(str(final)).items()):
        h.update(name.encode() + t.numpy().tobytes())
    return {"rows": rows, "weights": h.hexdigest()}


def finish(config: Path, run_dir: Path, steps: int, delay: float) -> tuple[int, str]:
    if (run_dir / "checkpoints" / f"step-{steps}").is_dir():
        return 0, ""  # killed after its last checkpoint: the run is complete
    has_ckpt = any((run_dir / "checkpoints").glob("step-*"))
    extra = ["--resume"] if has_ckpt else ["log.overwrite=true"]
    proc = Child(config, run_dir, steps, delay, extra)
    return proc.wait(), proc.stderr()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--write-delay", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "soak_resume"))
    args = p.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="teamrl-soak-"))
    os.environ.setdefault("TEAMRL_CACHE", str(work / "cache"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    config = work / "soak.yaml"
    config.write_text("run_name: soak\n")

    t0 = time.time()
    import torch

    torch.set_num_threads(1)
    import teamrl.cli  # noqa: F401  (loaded once, before the forks)

    ref = Child(config, work / "ref", args.steps, args.write_delay)
    first_line = None
    while ref.poll() is None:
        if first_line is None and (work / "ref" / "metrics.jsonl").exists():
            first_line = time.time() - t0
        time.sleep(0.05)
    assert ref.returncode == 0, ref.stderr()
    total = time.time() - t0
    first_line = first_line or total
    reference = outcome(work / "ref", args.steps)
    print(f"reference: {total:.1f} s, first metrics line at {first_line:.1f} s", flush=True)

    trials = []
    for i in range(args.trials):
        run_dir = work / f"trial-{i}"
        # mostly during training (steps, checkpoint and metrics writes), sometimes at start-up;
        # timed from the first metrics line, since start-up time varies with the machine's load
        at_start = rng.random() < 0.15
        at = rng.uniform(0.5, first_line) if at_start else rng.uniform(0, total - first_line)
        proc = Child(config, run_dir, args.steps, args.write_delay)
        metrics = run_dir / "metrics.jsonl"
        while not at_start and proc.poll() is None and not metrics.exists():
            time.sleep(0.01)
        start = time.time()
        while proc.poll() is None and time.time() - start < at:
            time.sleep(0.01)
        killed = proc.poll() is None
        if killed:
            proc.kill()
        proc.wait()
        ckdir = run_dir / "checkpoints"
        left = {
            "temp_folder": bool(list(ckdir.glob(".step-*"))) if ckdir.exists() else False,
            "torn_line": _torn(run_dir / "metrics.jsonl") or _torn(run_dir / "samples.jsonl"),
            "metrics_lines": _lines(run_dir / "metrics.jsonl"),
            "checkpoints": sorted(p.name for p in ckdir.glob("step-*")) if ckdir.exists() else [],
        }
        if killed:
            rc, err = finish(config, run_dir, args.steps, args.write_delay)
        else:
            rc, err = proc.returncode, proc.stderr()
        exact = rc == 0 and outcome(run_dir, args.steps) == reference
        trials.append(
            {
                "trial": i,
                "kill_at_s": round(at, 2),
                "from": "start" if at_start else "first line",
                "killed": killed,
                **left,
                "resume_rc": rc,
                "exact": exact,
                "error": err.strip()[-300:] if rc else "",
            }
        )
        print(json.dumps(trials[-1]), flush=True)
        write_report(args, trials, args.trials)  # a report survives an early stop too

    exact = write_report(args, trials, args.trials)
    print(f"{exact}/{len(trials)} exact continuations; report: {args.out}.md")
    return 0 if exact == len(trials) else 1


def write_report(args, trials: list[dict], planned: int) -> int:
    """Write the .json and .md report of the trials so far; return the exact count."""
    exact = sum(t["exact"] for t in trials)
    summary = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "trials": len(trials),
        "exact_continuations": exact,
        "killed": sum(t["killed"] for t in trials),
        "kills_leaving_a_temp_checkpoint": sum(t["temp_folder"] for t in trials),
        "kills_leaving_a_torn_line": sum(t["torn_line"] for t in trials),
        "steps": args.steps,
        "write_delay_s": args.write_delay,
        "load_average": os.getloadavg(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({**summary, "per_trial": trials}, indent=1))
    md = [
        "# kill -9 / resume soak",
        "",
        f"`python benchmarks/soak_resume.py --trials {args.trials}` ({summary['date_utc']} UTC, "
        f"{len(trials)} of {planned} trials done,",
        f"tiny-llama, {args.steps} steps, a checkpoint every step, write delay "
        f"{args.write_delay} s, load average {summary['load_average'][0]:.1f}).",
        "",
        f"**{exact} of {len(trials)} killed runs resumed to exactly the uninterrupted run's "
        "metrics and weights.**",
        "",
        f"- killed before finishing: {summary['killed']} of {len(trials)}",
        f"- kills that left a half-written temp checkpoint: "
        f"{summary['kills_leaving_a_temp_checkpoint']}",
        f"- kills that left a torn metrics/samples line: {summary['kills_leaving_a_torn_line']}",
        "",
        "| trial | kill at (s after) | lines at kill | checkpoints at kill | temp left | torn line "
        "| exact |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in trials:
        md.append(
            f"| {t['trial']} | {t['kill_at_s']} ({t['from']}) | {t['metrics_lines']} | "
            f"{', '.join(t['checkpoints']) or '-'} | {t['temp_folder']} | {t['torn_line']} | "
            f"{t['exact']} |"
        )
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    return exact


def _torn(path: Path) -> bool:
    return path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


if __name__ == "__main__":
    sys.exit(main())
