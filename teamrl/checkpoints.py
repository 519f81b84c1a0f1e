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
    changed = schedule_changes(saved, cfg)
    if changed:
        warnings.warn(
            f"resuming from {path}: applying the new optimizer/schedule settings "
            f"({'; '.join(changed)}) from the checkpoint's step on; the LR at each later step "
            "is the new schedule's",
            stacklevel=3,
        )
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


SCHEDULE_FIELDS = (
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "min_lr_ratio",
    "max_steps",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
)


def schedule_changes(saved: Config, cfg: Config) -> list[str]:
    """'train.<field>: old -> new' for every optimizer/schedule field (and per-agent LR) that
    differs between the checkpoint's config and this run's."""
    out = [
        f"train.{f}: {getattr(saved.train, f)!r} -> {getattr(cfg.train, f)!r}"
        for f in SCHEDULE_FIELDS
        if getattr(saved.train, f) != getattr(cfg.train, f)
    ]
    old_lr = {ag.name: ag.learning_rate for ag in saved.team.agents}
    for ag in cfg.team.agents:
        if ag.name in old_lr and old_lr[ag.name] != ag.learning_rate:
            out.append(
                f"team.agents[{ag.name}].learning_rate: {old_lr[ag.name]!r} -> {ag.learning_rate!r}"
            )
    return out


def apply_schedule(pol, lr: float, lr_lambda, cfg: Config | None = None) -> None:
    """After loading a checkpoint, make the policy's optimizer follow *this* run's config.

    The scheduler's and optimizer's state dicts carry the old base LR (and betas, weight
    decay); the LR lambda is not saved (a function) and reads the current config, so the LR
    at step n is lr * lambda(n) exactly as in a run started with this config: extending
    ``max_steps`` gives the longer schedule's LR at every later step.
    """
    sched = pol.scheduler
    sched.base_lrs = [lr for _ in sched.base_lrs]
    sched.lr_lambdas = [lr_lambda for _ in sched.lr_lambdas]
    for group in pol.optimizer.param_groups:
        group["initial_lr"] = lr
        group["lr"] = lr * lr_lambda(sched.last_epoch)
        if cfg is not None:
            group["betas"] = (cfg.train.adam_beta1, cfg.train.adam_beta2)
            group["weight_decay"] = cfg.train.weight_decay
    sched._last_lr = [g["lr"] for g in pol.optimizer.param_groups]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    ckpts = _sorted(Path(run_dir, "checkpoints"))
    return ckpts[-1] if ckpts else None


def _sorted(root: Path) -> list[Path]:
    return sorted(root.glob("step-*"), key=lambda p: int(p.name.split("-")[1]))


def _yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())
