"""Run outputs: metrics.jsonl (one line per step), samples.jsonl, optional TensorBoard and wandb."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

from teamrl.distributed import DistContext
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
        self.active = ctx is None or ctx.is_main
        if not self.active:
            return
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError as err:
                raise ImportError("log.tensorboard=true needs: pip install tensorboard") from err
        if wandb:
            try:
                import wandb as wb
            except ImportError as err:
                raise ImportError("log.wandb=true needs: pip install wandb") from err
            self._wandb = wb.init(
                project=wandb_project,
                name=run_name,
                config=config,
                dir=str(run_dir),
                resume="allow",
                id=run_name,
            )

    def truncate_after(self, step: int) -> None:
        """On resume, drop lines written after the checkpoint so the files match a clean run."""
        if not self.active:
            return
        for path in (self.metrics_path, self.samples_path):
            if not path.exists():
                continue
            keep = [
                ln
                for ln in path.read_text().splitlines()
                if ln.strip() and json.loads(ln).get("step", 0) <= step
            ]
            path.write_text("".join(ln + "\n" for ln in keep))

    def log(self, metrics: dict[str, Any]) -> None:
        if not self.active:
            return
        clean = {k: _jsonable(v) for k, v in metrics.items()}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(clean) + "\n")
        step = int(metrics["step"])
        for k, v in clean.items():
            if k != "step" and isinstance(v, (int, float)) and v is not None:
                if self._tb is not None:
                    self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in clean.items() if k != "step"}, step=step)

    def log_samples(self, rows: list[dict]) -> None:
        if not self.active:
            return
        with self.samples_path.open("a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


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
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


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
