"""SIGTERM (a preemption, ``kill``) and SIGINT (Ctrl-C) during training.

The first signal only sets a flag: the current step finishes (an update is never left half
applied), the trainer writes a checkpoint at that step boundary and raises
``TrainingInterrupted``, which the CLI prints as one line. A second signal aborts at once
(``KeyboardInterrupt``); the last complete checkpoint is still intact, since every checkpoint is
written to a temp folder and renamed into place.
"""

from __future__ import annotations

import shlex
import signal
import threading
from pathlib import Path

from teamrl.run.files import log_line

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(Exception):
    """Training stopped on a signal after writing a checkpoint."""

    def __init__(
        self, step: int, checkpoint: Path | None, signum: int, run_dir: Path | None = None
    ):
        self.step, self.checkpoint, self.signum = step, checkpoint, signum
        where = f"checkpoint written to {checkpoint}" if checkpoint else "no checkpoint written"
        resume = f"; resume with: {resume_command(run_dir)}" if run_dir else ""
        super().__init__(f"interrupted at step {step}; {where}{resume}")


def resume_command(run_dir: Path) -> str:
    """The command that continues a run, ready to paste: the run folder alone is enough (its
    run.json and config.yaml)."""
    return f"teamrl train {shlex.quote(str(run_dir))} --resume"


def failed_step_message(message: str, step: int, checkpoint: Path | None, run_dir: Path) -> str:
    """The one line a step that failed in the user's code ends with: the step (1-based), the
    error's own message (it names the example, turn, agents and the user's frame), the
    checkpoint of the step before it and the resume command."""
    saved = (
        f"checkpoint of step {step - 1} written to {checkpoint}"
        if checkpoint
        else "no step had completed, so no checkpoint"
    )
    return (
        f"step {step} failed and was not applied: {message}; {saved}; after fixing it, "
        f"resume with: {resume_command(run_dir)}"
    )


def failed_eval_message(message: str, step: int, checkpoint: Path, run_dir: Path) -> str:
    """The one line an evaluation that failed in the user's code ends with. The step it
    followed was complete (its update applied, its metrics logged), so the checkpoint holds that
    step and a resume continues after it; only that evaluation's scores are missing."""
    return (
        f"the evaluation after step {step} failed: {message}; step {step} itself completed "
        f"and its checkpoint is {checkpoint} (this evaluation's scores are not in "
        f"metrics.jsonl); after fixing it, resume with: {resume_command(run_dir)}"
    )


class StopRequest:
    """``with StopRequest() as stop:`` handles SIGINT/SIGTERM by setting ``stop.signum``.

    Outside the main thread (signal handlers can only be set there) it does nothing, and a
    signal that is ignored when it starts (``nohup``, a shell's background job) stays ignored.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            # a signal the parent set to be ignored (SIGINT in a background job) stays ignored
            mine = [s for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]
            self._old = {s: signal.signal(s, self._handle) for s in mine}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
        self._old = {}

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            raise KeyboardInterrupt(f"second {name}: aborted without a final checkpoint")
        self.signum = signum
        log_line(
            f"{name} received: finishing the current step, then writing a checkpoint "
            "(send it again to abort at once)"
        )
