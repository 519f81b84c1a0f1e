"""``teamrl export RUN_DIR OUT``: a run's checkpoint as a team folder (one model or adapter
per agent, team.yaml naming them and their system prompts), optionally pushed to the hub."""

from __future__ import annotations

import shutil
from pathlib import Path


def export_run(
    run: Path,
    out: Path,
    step: int | None,
    imports: list[str],
    overwrite: bool,
    push_to_hub: str | None,
) -> Path:
    """Write the team of ``run``'s newest intact checkpoint (or ``step``'s) to ``out``;
    returns the folder written (and prints where it went)."""
    from teamrl.config import ConfigError, load_config
    from teamrl.plugins import ensure_task, restore_run_imports
    from teamrl.run.checkpoints import resume_checkpoint
    from teamrl.run.export import push_to_hub as push
    from teamrl.run.export import write_team_folder
    from teamrl.tasks.registry import task_from_config

    if not (run / "config.yaml").exists():
        raise ConfigError(f"{run}: not a run folder (no config.yaml)")
    check_export_folder(out, overwrite)
    ckpt = resume_checkpoint(run, step, move_aside=False)
    restore_run_imports(run, imports)
    cfg = load_config(ckpt / "config.yaml")
    ensure_task(cfg.env.name)
    roles = task_from_config(cfg.env).agents  # the task's role prompts, when no system is set
    systems = {
        a.name: a.system if a.system is not None else roles.get(a.name, "") for a in cfg.team.agents
    }
    if overwrite and out.is_dir():  # an earlier export (checked above) is replaced whole:
        for child in out.iterdir():  # no file of it left behind, nor uploaded by --push-to-hub
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    out = write_team_folder(out, cfg, systems, checkpoint=ckpt)
    print(f"exported {ckpt} to {out}")
    if push_to_hub:
        print(f"pushed to {push(out, push_to_hub)}")
    return out


def check_export_folder(out: Path, overwrite: bool) -> None:
    """``export``'s OUT: new or empty; a previous export (its team.yaml) only with
    --overwrite; anything else never, since --overwrite replaces the folder whole."""
    from teamrl.config import ConfigError

    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: a file, not a folder: name a new or empty folder to export to")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not (out / "team.yaml").is_file():
        raise ConfigError(
            f"{out}: holds files but no team.yaml (not an earlier export), which --overwrite "
            "would delete: name a new or empty folder"
        )
    if not overwrite:
        raise ConfigError(
            f"{out}: already holds an exported team (team.yaml): pass --overwrite to replace "
            "it, or name another folder"
        )
