"""Checkpoints: ``run_dir/checkpoints/step-N`` with each policy's weights, optimizer and
scheduler, the RNG states, the trainer state and the config. Written atomically (a temp
folder renamed into place) and by the main rank only."""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from teamrl.config import Config, dump_config, from_dict, to_dict
from teamrl.distributed import DistContext
from teamrl.team import Team


def save_checkpoint(
    run_dir: Path,
    cfg: Config,
    team: Team,
    state: dict,
    ctx: DistContext | None = None,
) -> Path:
    """Write ``checkpoints/step-<state["step"]>`` and prune old ones; return its path."""
    root = run_dir / "checkpoints"
    final = root / f"step-{state['step']}"
    if ctx is not None and not ctx.is_main:
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".step-{state['step']}-", dir=root))
    try:
        for name, pol in team.policies.items():
            d = tmp / "policies" / name
            d.mkdir(parents=True)
            torch.save(pol.state_dict(), d / "weights.pt")
            torch.save(pol.optimizer.state_dict(), d / "optimizer.pt")
            torch.save(pol.scheduler.state_dict(), d / "scheduler.pt")
        torch.save(
            {
                "python": random.getstate(),
                "numpy": np.random.get_state(),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
            tmp / "rng.pt",
        )
        (tmp / "trainer_state.json").write_text(json.dumps(state))
        dump_config(cfg, tmp / "config.yaml")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    prune_checkpoints(root, cfg.log.save_total_limit)
    return final


def prune_checkpoints(root: Path, limit: int | None) -> None:
    """Keep the ``limit`` latest checkpoints (all when None)."""
    if limit is None:
        return
    for old in _sorted(root)[:-limit]:
        shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(path: str | Path, cfg: Config, team: Team) -> dict:
    """Restore the policies and the RNG states from ``path``; return its trainer state."""
    path = Path(path)
    saved = from_dict(Config, _yaml(path / "config.yaml"))
    if to_dict(saved)["algorithm"] != to_dict(cfg)["algorithm"]:
        warnings.warn(f"resuming from {path} with a different algorithm config", stacklevel=3)
    for name, pol in team.policies.items():
        d = path / "policies" / name
        pol.load_state_dict(torch.load(d / "weights.pt", weights_only=True))
        pol.optimizer.load_state_dict(torch.load(d / "optimizer.pt", weights_only=True))
        pol.scheduler.load_state_dict(torch.load(d / "scheduler.pt", weights_only=True))
        if pol.engine.backend is not None:
            pol.engine.backend.weights_changed(pol.adapter)
    rng = torch.load(path / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"]:
        torch.cuda.set_rng_state_all(rng["cuda"])
    return json.loads((path / "trainer_state.json").read_text())


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    ckpts = _sorted(Path(run_dir, "checkpoints"))
    return ckpts[-1] if ckpts else None


def _sorted(root: Path) -> list[Path]:
    return sorted(root.glob("step-*"), key=lambda p: int(p.name.split("-")[1]))


def _yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())
