"""Run outputs: metrics.jsonl (one line per step), samples.jsonl, optional TensorBoard and wandb."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any


class RunLogger:
    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool = False,
        wandb: bool = False,
        wandb_project: str = "teamrl",
        run_name: str = "run",
        config: dict | None = None,
    ):
        self.run_dir = run_dir
        self.metrics_path = run_dir / "metrics.jsonl"
        self.samples_path = run_dir / "samples.jsonl"
        self._tb = self._wandb = None
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
