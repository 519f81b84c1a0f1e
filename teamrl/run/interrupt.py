"""SIGTERM (a preemption, ``kill``) and SIGINT (Ctrl-C) during training.

The first signal only sets a flag: the current step finishes (an update is never left half
applied), the trainer writes a checkpoint at that step boundary and raises
``TrainingInterrupted``, which the CLI prints as one line. A second signal aborts at once
(``SecondSignal``, a ``KeyboardInterrupt``); the last complete checkpoint is still intact, since
every checkpoint is written to a temp folder and renamed into place.

Anything else that ends a step (an error of the user's code, ``sys.exit`` or a
``KeyboardInterrupt`` raised by it, a log line that cannot be written) is a failed step: the
trainer writes the checkpoint of the last completed step and ends with one of the lines below,
naming the step, the cause, that checkpoint and the resume command.
"""

from __future__ import annotations

import os
import shlex
import signal
import threading
from pathlib import Path

from teamrl.errors import UserCodeError
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


class SecondSignal(KeyboardInterrupt):
    """The second SIGINT/SIGTERM of a run: abort at once. The one interrupt no failed-step
    handler catches (a ``KeyboardInterrupt`` that user code raises is a failure of that code)."""


class StepFailed(UserCodeError):
    """A step ended by something that is not one of teamrl's one-line errors: ``sys.exit`` or a
    ``KeyboardInterrupt`` raised in the user's code, a task's ``make_env`` that raised, any other
    exception. Its message is the failed step's one line; the exception that ended the step is
    its ``__cause__`` (``--traceback`` shows its stack)."""


def resume_command(run_dir: Path) -> str:
    """The command that continues a run, ready to paste from any folder: the run folder alone
    is enough (its run.json and config.yaml), named by its absolute path."""
    return f"teamrl train {shlex.quote(os.path.abspath(run_dir))} --resume"


def failed_step_message(
    message: str, step: int, checkpoint: Path | str | None, run_dir: Path
) -> str:
    """The one line a step that failed before its update ends with: the step (1-based), the
    cause (a teamrl error's own message names the example, turn, agents and the user's frame),
    the checkpoint of the step before it and the resume command. ``checkpoint``: the folder
    written, None when no step had completed, or why it could not be written (``unsaved``)."""
    if isinstance(checkpoint, Path):
        saved = f"checkpoint of step {step - 1} written to {checkpoint}"
    elif checkpoint is None:
        saved = "no step had completed, so no checkpoint"
    else:
        saved = f"the checkpoint of step {step - 1} {checkpoint}"
    return (
        f"step {step} failed and was not applied: {message}; {saved}; after fixing it, "
        f"resume with: {resume_command(run_dir)}"
    )


def failed_after_update_message(
    message: str, step: int, checkpoint: Path | str, unwritten: int, run_dir: Path
) -> str:
    """The one line of a step whose update was applied when what followed it failed (writing
    its log lines): the step is complete, so its own checkpoint is written, holding the
    ``unwritten`` log lines a resume writes first."""
    if isinstance(checkpoint, Path):
        kept = f", with the {unwritten} log line(s) not written (a resume writes them)"
        saved = f"checkpoint of step {step} written to {checkpoint}" + (kept if unwritten else "")
    else:
        saved = f"the checkpoint of step {step} {checkpoint}"
    return (
        f"step {step} was applied, then failed: {message}; {saved}; after fixing it, "
        f"resume with: {resume_command(run_dir)}"
    )


def failed_update_message(message: str, step: int, last: Path | None, run_dir: Path) -> str:
    """The one line of a step that failed while its update was being applied: the weights are
    those of no step, so nothing is written; a resume goes back to the last checkpoint."""
    return (
        f"step {step} failed while its update was being applied: {message}; its weights match "
        f"no step, so nothing was written; {_back_to(last)}; resume with: "
        f"{resume_command(run_dir)}"
    )


def _back_to(last: Path | None) -> str:
    """Where a resume goes back to when the last completed step has no checkpoint."""
    if last is None:
        return "no checkpoint was written (a resume starts from step 0)"
    return f"the last checkpoint is {last} (a resume trains the steps after it again)"


def failed_save_message(message: str, step: int, last: Path | None, run_dir: Path) -> str:
    """The one line of a step that completed but whose checkpoint could not be written (the
    partial one is removed): a resume goes back to the last checkpoint there is."""
    return (
        f"step {step} completed, but its checkpoint could not be written: {message}; "
        f"{_back_to(last)}; after fixing it, resume with: {resume_command(run_dir)}"
    )


def failed_eval_message(message: str, step: int, checkpoint: Path | str, run_dir: Path) -> str:
    """The one line an evaluation that failed ends with. The step it followed was complete (its
    update applied, its metrics logged), so the checkpoint holds that step and a resume
    continues after it; only that evaluation's scores are missing. Before any step (the
    evaluation of step 0) there is nothing to write."""
    if step == 0:
        return (
            f"the evaluation before step 1 failed: {message}; no step had completed, so no "
            f"checkpoint; after fixing it, resume with: {resume_command(run_dir)}"
        )
    if isinstance(checkpoint, Path):
        saved = f"step {step} itself completed and its checkpoint is {checkpoint}"
    else:
        saved = f"step {step} itself completed, but its checkpoint {checkpoint}"
    return (
        f"the evaluation after step {step} failed: {message}; {saved} (this evaluation's "
        f"scores are not in metrics.jsonl); after fixing it, resume with: "
        f"{resume_command(run_dir)}"
    )


def unsaved(err: BaseException, last: Path | None) -> str:
    """Why a failed step's checkpoint is missing, and the newest one there is (the tail of the
    phrases above: ``the checkpoint of step N could not be written (...); ...``)."""
    cause = str(err).replace("\r", " ").replace("\n", " ") or type(err).__name__
    newest = f"the last checkpoint is {last}" if last else "no checkpoint was written"
    return f"could not be written ({cause}); {newest}"


def aborted_message(abort: BaseException, last: Path | None, run_dir: Path) -> str:
    """The one line of a run aborted at once (a second signal): the newest checkpoint there is,
    never a claim of one that is not."""
    what = str(abort).replace("\r", " ").replace("\n", " ") or "aborted"
    if last is None:
        return f"{what}; no checkpoint was written"
    return f"{what}; the last complete checkpoint is {last}; resume with: {resume_command(run_dir)}"


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
            raise SecondSignal(f"second {name}: aborted without a final checkpoint")
        self.signum = signum
        log_line(
            f"{name} received: finishing the current step, then writing a checkpoint "
            "(send it again to abort at once)"
        )
