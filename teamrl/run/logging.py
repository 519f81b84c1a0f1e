"""Run outputs: metrics.jsonl (one line per step), samples.jsonl (whole groups of a few
examples per step), eval_samples.jsonl (every held-out episode of each evaluation),
resumes.jsonl (the step each resume continued from), optional TensorBoard and wandb.

Each line is appended with one write (``teamrl.run.files.append_line``), the files are fsynced
before every checkpoint, and the resume rewrite is atomic; a line torn by a crash is dropped with
a warning naming the file and line.

An append that fails (a full disk, no descriptor left) is tried once more after a garbage
collection (files and descriptors that objects nothing refers to still hold are freed), then
ends the step in one ``RunError`` line. The step's lines from the failed one on are kept in
``RunLogger.unwritten``: the trainer writes them into the step's checkpoint and a resume writes
them first, so the files end as an uninterrupted run's.
"""

from __future__ import annotations

import errno
import gc
import importlib.util
import json
import math
import os
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from teamrl.distributed import DistContext
from teamrl.run.files import (
    RunError,
    append_line,
    atomic_write_text,
    disk_full,
    free_space,
    fsync_file,
    read_jsonl,
)
from teamrl.sample import Sample
from teamrl.text import clip


class RunLogger:
    """Writes on the main rank only; on the others every method does nothing."""

    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool = False,
        wandb: bool = False,
        wandb_project: str = "teamrl",
        run_name: str = "run",
        config: dict | None = None,
        ctx: DistContext | None = None,
    ):
        self.run_dir = run_dir
        self.metrics_path = run_dir / "metrics.jsonl"
        self.samples_path = run_dir / "samples.jsonl"
        self.eval_samples_path = run_dir / "eval_samples.jsonl"
        self.resumes_path = run_dir / "resumes.jsonl"
        self._tb = self._wandb = None
        self._wandb_args: dict | None = None
        # a step's lines an append could not write: write_step's arguments (see write_step)
        self.unwritten: dict[str, Any] | None = None
        self.active = ctx is None or ctx.is_main
        if not self.active:
            return
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:
                raise ImportError("log.tensorboard=true needs: pip install tensorboard") from err
            self._tb = SummaryWriter(str(run_dir / "tensorboard"))
        if wandb:
            if importlib.util.find_spec("wandb") is None:
                raise ImportError("log.wandb=true needs: pip install wandb")
            # Started at the first log line, once truncate_after has said whether this is a
            # fresh run (a new wandb run) or a resume (the same wandb run continues).
            self._wandb_args = {
                "project": wandb_project,
                "name": run_name,
                "config": config,
                "dir": str(run_dir),
            }

    def _start_wandb(self, fresh: bool) -> None:
        import wandb as wb

        assert self._wandb_args is not None
        self._wandb = wb.init(
            **self._wandb_args, id=wandb_run_id(self.run_dir, fresh), resume="allow"
        )

    def truncate_after(self, step: int) -> None:
        """On resume, drop lines written after the checkpoint so the files match a clean run.
        ``step < 0`` is a fresh start: the run folder gets a new wandb run."""
        if not self.active:
            return
        if self._wandb_args is not None and self._wandb is None:
            self._start_wandb(fresh=step < 0)
        for path in self._line_files() + [self.resumes_path]:
            if not path.exists():
                continue
            keep = [row for row in read_jsonl(path) if row.get("step", 0) <= step]
            # temp file + os.replace: a kill during the rewrite keeps the old file whole
            atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in keep))
        if step >= 0:  # a resume: what `teamrl report` marks on the curves
            append_line(self.resumes_path, json.dumps({"step": step, "time": time.time()}))
        elif self.resumes_path.exists():
            self.resumes_path.unlink()

    def _line_files(self) -> list[Path]:
        return [self.metrics_path, self.samples_path, self.eval_samples_path]

    def sync(self) -> None:
        """fsync the line files (before a checkpoint, so no checkpoint is ahead of its log)."""
        if self.active:
            for path in self._line_files():
                fsync_file(path)

    def log(self, metrics: dict[str, Any]) -> None:
        """Append a metrics row (and send it to TensorBoard and wandb)."""
        self.write_step(metrics)

    def log_samples(self, rows: list[dict], evaluation: bool = False) -> None:
        """Append ``rows`` to samples.jsonl, or to eval_samples.jsonl for an evaluation's."""
        self.write_step(None, [] if evaluation else rows, rows if evaluation else [])

    def write_step(
        self,
        metrics: dict[str, Any] | None,
        samples: Sequence[dict] = (),
        evaluation: Sequence[dict] = (),
    ) -> None:
        """A step's lines in their order: its samples (samples.jsonl), its evaluation's episodes
        (eval_samples.jsonl), then its metrics row (metrics.jsonl, TensorBoard, wandb).

        An append that fails twice raises ``RunError`` (``_append``) and leaves in
        ``unwritten`` the arguments that write the rest: the line that failed and every one
        after it (a resume calls ``write_step(**unwritten)``)."""
        if not self.active:
            return
        clean = None if metrics is None else {k: _jsonable(v) for k, v in metrics.items()}
        todo = [(self.samples_path, r) for r in samples]
        todo += [(self.eval_samples_path, r) for r in evaluation]
        todo += [] if clean is None else [(self.metrics_path, clean)]
        for i, (path, row) in enumerate(todo):
            try:
                self._append(path, row)
            except RunError:
                rest = todo[i:]
                self.unwritten = {
                    "metrics": clean,
                    "samples": [r for p, r in rest if p == self.samples_path],
                    "evaluation": [r for p, r in rest if p == self.eval_samples_path],
                }
                raise
        if clean is not None:
            self._send(clean)

    def unwritten_lines(self) -> int:
        """How many lines ``unwritten`` holds."""
        kept = self.unwritten
        if not kept:
            return 0
        return len(kept["samples"]) + len(kept["evaluation"]) + (kept["metrics"] is not None)

    def _append(self, path: Path, row: dict) -> None:
        """One JSON line; a failed append is retried once after a garbage collection (a
        descriptor, or a deleted temp file, that an unreferenced object holds is released)."""
        line = json.dumps(row)
        try:
            append_line(path, line)
            return
        except OSError:
            gc.collect()
        try:
            append_line(path, line)
        except OSError as err:
            raise RunError(append_failed(path, err)) from err

    def _send(self, clean: dict[str, Any]) -> None:
        """A metrics row to TensorBoard and wandb."""
        step = int(clean["step"])
        for k, v in clean.items():
            if k != "step" and isinstance(v, (int, float)) and v is not None:
                if self._tb is not None:
                    self._tb.add_scalar(k, v, step)
        if self._wandb_args is not None and self._wandb is None:
            self._start_wandb(fresh=False)
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in clean.items() if k != "step"}, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def append_failed(path: Path, err: OSError) -> str:
    """What a log append that failed twice says: the file, the errno and, for a full disk the
    free space, for descriptors the limit."""
    code = err.errno
    name = errno.errorcode.get(code, "") if code is not None else ""
    why = f"{name} ({os.strerror(code)})" if name else (str(err) or type(err).__name__)
    if disk_full(err):
        why += f", {free_space(path.parent)} free"
    elif code in (errno.EMFILE, errno.ENFILE):
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        why += f", the soft limit is {soft} open files"
    return f"cannot append a line to {path}: {why}, again after freeing what the run held"


def wandb_run_id(run_dir: Path, fresh: bool) -> str:
    """The wandb run id of a run folder: made once and kept in ``run_dir/wandb_id``.

    Two folders never share an id (a run name does not make one: two runs named ``run`` would
    merge), a resume of the same folder continues the same wandb run, and a fresh start in a
    used folder (``log.overwrite=true``) gets a new one.
    """
    path = Path(run_dir) / "wandb_id"
    if not fresh and path.exists() and path.read_text().strip():
        return path.read_text().strip()
    run_id = uuid.uuid4().hex[:16]
    path.write_text(run_id + "\n")
    return run_id


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        warnings.warn(f"non-finite metric value {v}", stacklevel=3)
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


def team_reward_key(keys) -> str:
    """The metric that holds a step's mean team reward: ``reward/team/mean`` where the algorithm
    reports it apart from its return (AT-GRPO, whose ``reward/mean`` sums the chosen reward of
    every node along the path: the team reward once per agent and turn), else ``reward/mean``
    (MAGRPO, GRPO, apps: there the return is the team reward)."""
    return "reward/team/mean" if "reward/team/mean" in keys else "reward/mean"


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a teamrl run folder?")
    return read_jsonl(path)


PROMPT_CHARS = 2000  # a logged prompt keeps its head and tail, 1000 characters each
PROMPT_CUT = "\n[... {cut} characters ...]\n"


def sample_rows(
    samples: list[Sample],
    step: int,
    num_groups: int | None,
    decode: Callable[[str, list[int]], str] | None = None,
    episodes: list[dict] | None = None,
) -> list[dict]:
    """Whole groups of the step's first ``num_groups`` examples (all of them for None), for
    samples.jsonl and ``teamrl report``: every sample of every group (every agent, node and
    turn) of an example, with its prompt (``decode``: agent, token ids -> text, clipped to
    its head and tail), its place in the rollout's tree (``tree_position``) and, for an app's
    call, the weights that answered it (``weights``: agent, step, hash). An example is
    a batch slot (the group key's first two entries are problem and slot in every recipe).
    ``episodes`` (the rollout's summaries, one per slot on a single path: evaluation) adds
    each example's episode return and success to its rows."""
    slots: list[int] = []
    for s in samples:
        if s.group[1] not in slots:
            slots.append(s.group[1])
    keep = set(slots if num_groups is None else slots[:num_groups])
    prompts: dict[tuple, str] = {}  # the G samples of a node share their prompt: decode once
    rows = []
    for s in samples:
        if s.group[1] not in keep:
            continue
        key = (s.agent, tuple(s.prompt_ids))
        if decode is not None and key not in prompts:
            text = decode(s.agent, s.prompt_ids)
            prompts[key] = clip(text, PROMPT_CHARS, keep="both", marker=PROMPT_CUT)
        info = s.info
        row = {
            "step": step,
            "example": s.group[0],
            "slot": s.group[1],
            "group": list(s.group),
            "agent": s.agent,
            "turn": s.turn,
            "prompt": prompts.get(key),
            "completion": s.text,
            "length": len(s.completion_ids),
            "truncated": s.truncated,
            "reward": s.reward,
            "team_reward": info.get("team_reward", s.team_reward),
            "local_reward": info.get("local_reward", s.local_reward),
            "return": s.return_,
            "advantage": s.advantage,
            **tree_position(s),
        }
        if "weights" in info:  # an app call: which weights answered (teamrl.apps.provenance)
            row["weights"] = info["weights"]
        if episodes is not None and s.group[1] < len(episodes):
            row["episode_return"] = episodes[s.group[1]]["return"]
            row["success"] = episodes[s.group[1]]["success"]
        rows.append(row)
    return rows


def tree_position(s: Sample) -> dict:
    """A sample's place in its rollout, from what the recipe wrote in ``info``: MAGRPO's node,
    parent, completion index and joint actions (ids, team rewards r_j, returns R_j); AT-GRPO's
    candidate index and whether it continued; trajectory GRPO's episode."""
    keys = ("node", "parent", "index", "joint", "joint_team_rewards", "joint_returns")
    keys += ("candidate", "continued")
    out = {k: s.info[k] for k in keys if k in s.info}
    if s.episode is not None:
        out["episode"] = list(s.episode) if isinstance(s.episode, tuple) else s.episode
    return out
