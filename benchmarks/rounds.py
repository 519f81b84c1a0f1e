"""Interleaved timing rounds: the scheduler, the statistics, and the worker-process protocol.

Plain Python (no torch), so the benchmark's parent process, its workers in other venvs and the
tests can all import it.

Why rounds: on a shared machine the load changes from minute to minute. Timing contender A for
five minutes and then contender B compares two machines, not two programs. Here every contender
is built once (a long-lived object or process), then each round times ONE step of every
contender back to back, so the steps of a round run within a minute of each other under nearly
the same load. The per-round ratio (reference s / contender s) cancels most of a slow round, and
the median over rounds discards the odd disturbed one.

Worker protocol (one JSON object per line): the worker prints ``{"ready": true, ...}`` once
built; then for each ``step`` line on its stdin it runs one step and prints
``{"step_s": .., "generate_s": .., "update_s": ..}``; ``quit`` makes it print its final
``{"peak_rss_gib": ..}`` and exit. A worker prints nothing else on stdout (``protocol_stdout``
sends stray prints to stderr).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

TIMINGS = ("step_s", "generate_s", "update_s")


class Contender(Protocol):
    def step(self) -> dict[str, float]:
        """Run one timed step; return at least ``step_s`` (and the generate/update split)."""


def round_order(names: list[str], r: int, order: str = "rotate") -> list[str]:
    """The order of round ``r``: fixed (A B C every round) or rotated (A B C, B C A, C A B...).

    Rotation spreads any position effect (the first step after an idle pause, caches warmed by
    the previous contender) evenly over the contenders.
    """
    if order == "fixed" or not names:
        return list(names)
    if order != "rotate":
        raise ValueError(f"--order: expected 'rotate' or 'fixed', got {order!r}")
    k = r % len(names)
    return names[k:] + names[:k]


def run_rounds(
    contenders: dict[str, Contender],
    rounds: int,
    warmup: int = 1,
    order: str = "rotate",
    on_step: Callable[[int, str, dict], None] | None = None,
    on_round: Callable[[int, list[str]], None] | None = None,
    keep_going: Callable[[int], bool] | None = None,
    on_round_end: Callable[[dict], None] | None = None,
) -> dict:
    """``warmup`` untimed rounds, then ``rounds`` timed rounds of one step per contender.

    Returns {"orders": [[name, ...] per timed round], "steps": {name: [timings per round]},
    "dropped": {name: why}}. A contender whose worker fails (killed for memory, an error) is
    dropped with its reason and the others go on: an hour of rounds is not lost to one worker.
    ``on_step(round, name, timings)`` is called after each step (round < 0: warm-up);
    ``on_round(round, order)`` before each timed round. ``keep_going(round)``, asked before
    each timed round, ends the run early when False (a time budget); ``on_round_end(partial)``
    gets the result so far after each timed round (written at once, so that a run cut short
    keeps its completed rounds).
    """
    names = list(contenders)
    dropped: dict[str, str] = {}

    def step(name: str, r: int) -> dict | None:
        try:
            timings = contenders[name].step()
        except RuntimeError as err:
            dropped[name] = why_dropped(err)
            names.remove(name)
            return None
        if on_step:
            on_step(r, name, timings)
        return timings

    for w in range(warmup):
        for name in list(names):
            step(name, w - warmup)
    steps: dict[str, list[dict]] = {name: [] for name in names}
    orders = []
    for r in range(rounds):
        if keep_going is not None and not keep_going(r):
            break
        this = round_order(names, r, order)
        orders.append(this)
        if on_round:
            on_round(r, this)
        for name in this:
            timings = step(name, r)
            if timings is not None:
                steps[name].append(timings)
        if on_round_end is not None:
            on_round_end(_finish(orders, steps, dropped))
    return _finish(orders, steps, dropped)


def why_dropped(err: Exception) -> str:
    """A dropped worker's reason in one line: the error's first line and, when the error
    carries the worker's log, that log's last line (the exception the worker died of)."""
    lines = [ln for ln in str(err).splitlines() if ln.strip()]
    if not lines:
        return type(err).__name__
    last = f" ... {lines[-1].strip()}" if len(lines) > 1 else ""
    return (lines[0] + last)[:400]


def _finish(orders: list, steps: dict, dropped: dict) -> dict:
    steps = {name: list(series) for name, series in steps.items()}  # a snapshot
    for name in dropped:  # a partial series is not comparable round by round
        steps.pop(name, None)
    orders = [[n for n in order if n not in dropped] for order in orders]
    return {"orders": orders, "steps": steps, "dropped": dict(dropped)}


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(Q1, median, Q3) by linear interpolation between order statistics (numpy's default).

    The p-quantile of sorted x_0..x_{n-1} sits at position h = p (n - 1):
    x_floor(h) + (h - floor(h)) (x_ceil(h) - x_floor(h)).
    """
    xs = sorted(values)
    if not xs:
        raise ValueError("quartiles of an empty list")

    def at(p: float) -> float:
        h = p * (len(xs) - 1)
        lo = int(h)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (h - lo) * (xs[hi] - xs[lo])

    return at(0.25), at(0.5), at(0.75)


def summarize(values: list[float]) -> dict[str, float]:
    """Median with its spread: min, max, Q1, Q3 and IQR = Q3 - Q1."""
    q1, med, q3 = quartiles(values)
    return {
        "median": med,
        "min": min(values),
        "max": max(values),
        "q1": q1,
        "q3": q3,
        "iqr": q3 - q1,
        "n": len(values),
    }


def per_round_ratios(reference: list[float], contender: list[float]) -> list[float]:
    """Speed-up of the contender in each round: reference s/step / contender s/step."""
    if len(reference) != len(contender):
        raise ValueError(f"rounds differ: {len(reference)} vs {len(contender)}")
    return [ref / c for ref, c in zip(reference, contender)]


def ab(a: list[dict], b: list[dict], key: str) -> str:
    """Table cells of B against A on ``key`` (each a list of per-round timings, round r of one
    stepped in the same round as round r of the other): the ratio of their medians, and in how
    many paired rounds B was the faster (a tie is not), e.g. '0.80 | 2 of 3'."""
    ratio = statistics.median(t[key] for t in b) / statistics.median(t[key] for t in a)
    wins = sum(tb[key] < ta[key] for ta, tb in zip(a, b))
    return f"{ratio:.2f} | {wins} of {min(len(a), len(b))}"


def report(steps: dict[str, list[dict]], reference: str | None) -> dict[str, dict]:
    """Per contender: step/generate/update summaries and the per-round ratios to ``reference``.

    ``ratio_vs_reference`` is the median of the per-round ratios (not the ratio of medians):
    each ratio compares two steps taken under the same load.
    """
    out = {}
    ref = [t["step_s"] for t in steps[reference]] if reference in steps else None
    for name, timings in steps.items():
        row = {
            key: summarize([t[key] for t in timings])
            for key in TIMINGS
            if timings and all(key in t for t in timings)
        }
        if ref is not None and name != reference:
            ratios = per_round_ratios(ref, [t["step_s"] for t in timings])
            row["ratios"] = ratios
            row["ratio_vs_reference"] = statistics.median(ratios)
        out[name] = row
    return out


def protocol_stdout():
    """The worker's protocol channel: the real stdout; fd 1 is pointed at stderr for the rest.

    Libraries that print (progress bars, warnings) then cannot corrupt the JSON lines.
    """
    sys.stdout.flush()
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return channel


def send(channel, obj: dict) -> None:
    channel.write(json.dumps(obj) + "\n")
    channel.flush()


class WorkerProcess:
    """A contender that lives in its own process (any interpreter) and speaks the protocol."""

    def __init__(
        self, name: str, cmd: list[str], log: Path, env: dict | None = None, wait: bool = True
    ):
        """Start the worker; with ``wait`` (the default) block until it is built.

        ``wait=False`` returns at once: call ``wait_ready()`` later, so that several workers
        load (and a GPU's kernels compile) at the same time."""
        self.name, self.log = name, log
        self._log = open(log, "w")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
            bufsize=1,
        )
        self.ready: dict = {}
        self.final: dict = {}
        if wait:
            self.wait_ready()

    def wait_ready(self) -> dict:
        """Block until the worker is built (or raise with its log's tail)."""
        if not self.ready:
            self.ready = self._read()
        return self.ready

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise RuntimeError(
                f"{self.name}: worker exited ({self.proc.returncode}); last log lines:\n"
                + tail(self.log)
            )
        return json.loads(line)

    def step(self) -> dict[str, float]:
        self.send_step()
        return self._read()

    def send_step(self) -> None:
        """Ask for one step without waiting (untimed warm-ups of several workers at once)."""
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()

    def read(self) -> dict:
        """The answer to ``send_step``."""
        return self._read()

    def close(self) -> dict:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.final = self._read()
            except (BrokenPipeError, RuntimeError, json.JSONDecodeError):
                pass
            self.proc.wait(timeout=120)
        self._log.close()
        return self.final


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def provenance(argv: list[str] | None, args, load_start: float) -> dict:
    """What every committed benchmark result carries: the command, the date (UTC), the machine
    and the load at start and end."""
    import datetime as dt
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {
        "argv": argv if argv is not None else sys.argv[1:],
        "args": vars(args),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__},
        "load_start": round(load_start, 2),
        "load_end": round(os.getloadavg()[0], 2),
    }


def header(result: dict, title: str, script: str) -> list[str]:
    """The markdown head of a result: title, command, date, machine and load."""
    m = result["machine"]
    return [
        f"# {title}",
        "",
        f"`python benchmarks/{script} {' '.join(result['argv'])}`",
        "",
        f"{result['date']} on {m['cpu']} ({m['cores']} cores), torch {m['torch']}; load "
        f"{result['load_start']} at start, {result['load_end']} at the end.",
    ]
