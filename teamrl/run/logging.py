"""Run outputs: metrics.jsonl (one line per step), samples.jsonl, optional TensorBoard and wandb.

Each line is appended with one write (``teamrl.run.files.append_line``), the files are fsynced
before every checkpoint, and the resume rewrite is atomic; a line torn by a crash is dropped with
a warning naming the file and line.
"""

from __future__ import annotations

import importlib.util
import json
import math
import uuid
import warnings
from pathlib import Path
from typing import Any

from teamrl.distributed import DistContext
from teamrl.run.files import append_line, atomic_write_text, fsync_file, read_jsonl
from teamrl.sample import Sample


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
        self._tb = self._wandb = None
        self._wandb_args: dict | None = None
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
        for path in (self.metrics_path, self.samples_path):
            if not path.exists():
                continue
            keep = [row for row in read_jsonl(path) if row.get("step", 0) <= step]
            # temp file + os.replace: a kill during the rewrite keeps the old file whole
            atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in keep))

    def sync(self) -> None:
        """fsync the line files (before a checkpoint, so no checkpoint is ahead of its log)."""
        if self.active:
            fsync_file(self.metrics_path)
            fsync_file(self.samples_path)

    def log(self, metrics: dict[str, Any]) -> None:
        if not self.active:
            return
        clean = {k: _jsonable(v) for k, v in metrics.items()}
        append_line(self.metrics_path, json.dumps(clean))
        step = int(metrics["step"])
        for k, v in clean.items():
            if k != "step" and isinstance(v, (int, float)) and v is not None:
                if self._tb is not None:
                    self._tb.add_scalar(k, v, step)
        if self._wandb_args is not None and self._wandb is None:
            self._start_wandb(fresh=False)
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in clean.items() if k != "step"}, step=step)

    def log_samples(self, rows: list[dict]) -> None:
        if not self.active:
            return
        for row in rows:
            append_line(self.samples_path, json.dumps(row))

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


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


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a teamrl run folder?")
    return read_jsonl(path)


def sample_rows(samples: list[Sample], step: int, k: int) -> list[dict]:
    """A few completions of the step's first problem, for reading in samples.jsonl."""
    if not samples:
        return []
    first = samples[0].group[0]
    rows = []
    per_group: dict = {}
    for s in samples:
        if s.group[0] != first or per_group.get(s.group, 0) >= k:
            continue
        per_group[s.group] = per_group.get(s.group, 0) + 1
        rows.append(
            {
                "step": step,
                "group": list(s.group),
                "agent": s.agent,
                "turn": s.turn,
                "reward": s.reward,
                "return": s.return_,
                "advantage": s.advantage,
                "completion": s.text,
            }
        )
    return rows
