"""Checkpoints: ``run_dir/checkpoints/step-N``, written by the main rank only.

    step-N/
      policies/<policy>/   adapter_config.json + adapter_model.safetensors (LoRA; PEFT loads it)
                           or config.json + model.safetensors (full), the tokenizer,
                           optimizer.pt (optimizer/: FSDP shards, torch.distributed.checkpoint),
                           scheduler.pt
      rng.pt  trainer_state.json  config.yaml  base_model.json (base name + weights fingerprint)
      critics.pt           the critics' value heads and optimizer states (algorithm.critic)
      manifest.json        every other file's size and sha256, written last

Written into a temp folder ``.step-N-*`` that is renamed into place, so ``step-N`` exists only
complete. A checkpoint is verified against its manifest before a resume; a corrupt one is moved
aside (``corrupt-step-N``) with a warning naming the bad file and the newest intact one is used.
A full disk ends with one line naming the folder and the free space; the previous checkpoint is
untouched and the temp folder removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch

from teamrl.config import Config, dump_config, from_dict, to_dict
from teamrl.distributed import DistContext
from teamrl.run.files import RunError, disk_full, free_space, log_line
from teamrl.run.seeding import rng_state, set_rng_state
from teamrl.team.policies import Team
from teamrl.team.weights import base_record, load_policy, save_policy

MANIFEST = "manifest.json"
REQUIRED = ("config.yaml", "trainer_state.json")  # in every checkpoint, since the first


def save_checkpoint(
    run_dir: Path,
    cfg: Config,
    team: Team,
    state: dict,
    ctx: DistContext | None = None,
    critics: dict | None = None,
) -> Path:
    """Write ``checkpoints/step-<state["step"]>`` and prune old ones; return its path.
    ``critics``: the critics' state (``teamrl.credit.critics.critic_state``), if the run has any."""
    root = run_dir / "checkpoints"
    final = root / f"step-{state['step']}"
    if ctx is not None and not ctx.is_main:
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".step-{state['step']}-", dir=root))
    try:
        write_checkpoint_files(tmp, cfg, team, state, critics)
        write_manifest(tmp)  # last: a folder with a manifest was written completely
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if disk_full(err):
            prev = latest_checkpoint(run_dir)
            raise RunError(
                f"disk full while writing checkpoint {final} ({free_space(root)} free in "
                f"{root}); removed the partial checkpoint; "
                + (f"the previous checkpoint {prev.name} is intact" if prev else "no checkpoint")
            ) from err
        raise
    prune_checkpoints(root, cfg.log.save_total_limit)
    return final


def write_checkpoint_files(
    folder: Path, cfg: Config, team: Team, state: dict, critics: dict | None = None
) -> None:
    for name, pol in team.policies.items():
        d = folder / "policies" / name
        save_policy(pol, d)
        if pol.sharded:  # FSDP: each worker writes its own shards (torch.distributed.checkpoint)
            pol.optimizer.save_sharded(d / "optimizer")
        else:
            torch.save(pol.optimizer.state_dict(), d / "optimizer.pt")
        torch.save(pol.scheduler.state_dict(), d / "scheduler.pt")
    torch.save(rng_state(), folder / "rng.pt")
    if critics:
        torch.save(critics, folder / "critics.pt")
    (folder / "trainer_state.json").write_text(json.dumps(state))
    (folder / "base_model.json").write_text(json.dumps(base_record(team, cfg), indent=1))
    dump_config(cfg, folder / "config.yaml")


def prune_checkpoints(root: Path, limit: int | None) -> None:
    """Keep the ``limit`` latest checkpoints (all when None; never fewer than the newest)."""
    if limit is None:
        return
    for old in _sorted(root)[: -max(1, limit)]:
        shutil.rmtree(old, ignore_errors=True)


# --- the manifest -----------------------------------------------------------------------------


def write_manifest(folder: Path) -> None:
    """``manifest.json``: every file's size and sha256; each file is fsynced on the way."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        with path.open("rb") as f:
            os.fsync(f.fileno())
        files[path.relative_to(folder).as_posix()] = {
            "size": path.stat().st_size,
            "sha256": _sha256(path),
        }
    with (folder / MANIFEST).open("w") as f:
        json.dump({"files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def verify_checkpoint(folder: Path) -> str | None:
    """None if every file matches the manifest, else what is wrong, naming the file. A folder
    with no manifest (written by teamrl before manifests) is accepted unverified."""
    mpath = folder / MANIFEST
    if not mpath.exists():
        return None
    try:
        files = json.loads(mpath.read_text())["files"]
        entries = [(str(k), int(v["size"]), str(v["sha256"])) for k, v in files.items()]
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        return f"{mpath}: unreadable manifest ({type(err).__name__})"
    for rel, size, digest in entries:
        path = folder / rel
        if not path.is_file():
            return f"{path}: missing"
        actual = path.stat().st_size
        if actual != size:
            return f"{path}: {actual} bytes, the manifest says {size} (truncated or overwritten)"
        if _sha256(path) != digest:
            return f"{path}: its sha256 differs from the manifest (the file was altered)"
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def resume_checkpoint(
    run_dir: str | Path, step: int | None = None, move_aside: bool = True, missing_ok: bool = False
) -> Path | None:
    """The newest intact checkpoint (or ``step-<step>``).

    A folder that is no checkpoint at all (empty, or without the files every checkpoint holds:
    a copy cut short, a sync tool's placeholder) is skipped, and the one the run falls back to
    is named in one log line. A corrupt one gets a warning naming the bad file. Both are
    renamed aside when ``move_aside`` (a resume), so the run's later saves, prunes and resumes
    never see them. None in the folder at all: None with ``missing_ok`` (a run stopped before
    its first checkpoint starts afresh), else a one-line error; none intact: a one-line error.
    """
    root = Path(run_dir, "checkpoints")
    candidates = [root / f"step-{step}"] if step is not None else _sorted(root)[::-1]
    if step is not None:
        have = ", ".join(p.name for p in checkpoint_folders(run_dir)) or "none"
        if not candidates[0].is_dir():
            raise RunError(f"--step {step}: no {candidates[0]} (checkpoints: {have})")
        gap = incomplete(candidates[0])
        if gap is not None:
            raise RunError(f"--step {step}: {candidates[0]} is {gap} (checkpoints: {have})")
    bad, skipped = [], []
    for ckpt in candidates:
        gap = incomplete(ckpt)
        if gap is not None:
            skipped.append(f"{ckpt.name} is {gap}" + _set_aside(ckpt, "incomplete", move_aside))
            continue
        problem = verify_checkpoint(ckpt)
        if problem is None:
            if skipped:
                log_line(f"checkpoint {'; '.join(skipped)}: using {ckpt.name}, the newest intact")
            return ckpt
        bad.append(problem)
        if step is None:
            problem += _set_aside(ckpt, "corrupt", move_aside)
        warnings.warn(f"checkpoint {ckpt.name} is corrupt: {problem}", stacklevel=2)
    if skipped:
        log_line(f"checkpoint {'; '.join(skipped)}: no intact checkpoint before it")
    if bad:
        raise RunError(f"no intact checkpoint in {root}: {bad[0]}")
    if missing_ok:
        return None
    # teamrl eval RUN_DIR and export end here (a resume passes missing_ok): no --resume named
    raise RunError(f"no checkpoint in {root} yet")


def incomplete(folder: Path) -> str | None:
    """Why ``folder`` is no checkpoint at all ("empty", "without config.yaml"), else None.
    Cheap (no hashing). ``save_checkpoint`` renames a folder into place only once it is
    complete, so such a folder came from outside the trainer."""
    if not any(folder.iterdir()):
        return "empty"
    for name in REQUIRED:
        if not (folder / name).is_file():
            return f"without {name}"
    return None


def _set_aside(ckpt: Path, why: str, move: bool) -> str:
    """Rename ``ckpt`` to ``<why>-step-N`` (kept for inspection) when ``move``; the words
    that say so."""
    if not move:
        return ""
    aside = ckpt.with_name(f"{why}-{ckpt.name}")
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(ckpt, aside)
    return f"; moved it aside to {aside.name}"


# --- loading ----------------------------------------------------------------------------------


def check_compatible(path: Path, saved: Config, cfg: Config, team: Team) -> None:
    """One-line errors for a checkpoint that cannot go into this team: other policies, other
    LoRA target modules or rank, or another base model (by the weights fingerprint)."""
    mine, theirs = (
        sorted(team.policies),
        sorted(p.name for p in (path / "policies").iterdir() if p.is_dir()),
    )
    if mine != theirs:
        raise RunError(f"checkpoint {path} holds policies {theirs}, this run has {mine}")
    lora = any(pol.adapter for pol in team.policies.values())
    saved_lora = (path / "policies" / theirs[0] / "adapter_config.json").exists()
    if lora != saved_lora and not (path / "policies" / theirs[0] / "weights.pt").exists():
        kinds = {True: "LoRA adapters", False: "full weights"}
        raise RunError(
            f"checkpoint {path} holds {kinds[saved_lora]}, this run trains {kinds[lora]}"
        )
    sm, m = saved.model, cfg.model
    if lora and (sorted(sm.lora_target_modules), sm.lora_r) != (
        sorted(m.lora_target_modules),
        m.lora_r,
    ):
        raise RunError(
            f"checkpoint {path} was trained with model.lora_target_modules="
            f"{list(sm.lora_target_modules)} and model.lora_r={sm.lora_r}; this run has "
            f"{list(m.lora_target_modules)} and {m.lora_r}: set them as in its config.yaml"
        )
    record = path / "base_model.json"
    if not record.exists():
        return
    saved_base = json.loads(record.read_text())
    for name, now in base_record(team, cfg).items():
        was = saved_base.get(name)
        if (
            was
            and was["fingerprint"]
            and now["fingerprint"]
            and was["fingerprint"] != now["fingerprint"]
        ):
            raise RunError(
                f"checkpoint {path} was trained on base model {was['name']!r} (fingerprint "
                f"{was['fingerprint']}), this run loads {now['name']!r} (fingerprint "
                f"{now['fingerprint']}): refusing to load it into a different base"
            )


def load_checkpoint(path: str | Path, cfg: Config, team: Team) -> dict:
    """Restore the policies and the RNG states from ``path``; return its trainer state."""
    path = Path(path)
    saved = from_dict(Config, _yaml(path / "config.yaml"))
    check_compatible(path, saved, cfg, team)
    other = setting_changes(saved, cfg)
    if other:
        warnings.warn(
            f"resuming from {path} with changed training settings ({'; '.join(other)}): they "
            "apply from the checkpoint's step on; the steps before it were trained with the "
            "old values (the checkpoint's config.yaml)",
            stacklevel=3,
        )
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
        load_policy(pol, d)
        load_optimizer_state(pol, d)
        pol.scheduler.load_state_dict(torch.load(d / "scheduler.pt", weights_only=True))
        if pol.engine.backend is not None:
            pol.engine.backend.weights_changed(pol.adapter)
    set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    return json.loads((path / "trainer_state.json").read_text())


def load_optimizer_state(pol, folder: Path) -> None:
    """``optimizer.pt`` (one replica's state), or ``optimizer/`` (FSDP shards written with
    torch.distributed.checkpoint), into any policy: a sharded group re-cuts the shards to its
    own worker count, one process loads them whole."""
    if (folder / "optimizer").is_dir():
        if pol.on_workers:  # a Ray group, any size: its workers re-cut the shards
            pol.optimizer.load_sharded(folder / "optimizer")
        else:
            load_optimizer(pol.model, pol.optimizer, str(folder / "optimizer"))
        return
    if pol.sharded:
        raise RunError(
            f"{folder / 'optimizer.pt'}: a replicated optimizer state cannot go into a "
            "sharded policy; resume this checkpoint with distributed.sharding=none"
        )
    pol.optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=True))


def save_optimizer(model: torch.nn.Module, optimizer, folder: str) -> None:
    """The optimizer's state with ``torch.distributed.checkpoint``: under a process group each
    rank writes its own shards (a collective), in one process the whole state. The files load
    into any number of ranks, sharded or not (``load_optimizer``)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    dcp.save({"optimizer": get_optimizer_state_dict(model, optimizer)}, checkpoint_id=folder)


def load_optimizer(model: torch.nn.Module, optimizer, folder: str) -> None:
    """``save_optimizer``'s files into this rank's optimizer, re-cut to its own shards."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    dcp.load(state, checkpoint_id=folder)
    set_optimizer_state_dict(model, optimizer, state["optimizer"])


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


# What a resume may change without changing the training maths: where and how the run executes
# (devices, workers, backends, micro-batching: the same sums, cut otherwise; the app endpoint's
# limits under load), what it logs and how it evaluates. Every other setting is compared, so a field added later is compared too.
NOT_THE_MATHS = (
    "run_name",
    "log.",
    "eval.",
    "generation.",
    "distributed.",
    "endpoint.",
    "model.device",
    "model.gradient_checkpointing",
    "env.reward_workers",
    "env.sandbox_isolation",
    "train.micro_batch_size",
    "train.max_tokens_per_micro_batch",
    "train.fused_lora",
)


def setting_changes(saved: Config, cfg: Config) -> list[str]:
    """'<field>: old -> new' for every setting that changes the training maths and differs
    between the checkpoint's config and this run's: the algorithm, the training settings, the
    task's settings, the seed, and each agent's entry field by field
    (``team.agents[alice].num_iterations: None -> 2``, agents matched by name). The optimizer
    and schedule fields are ``schedule_changes``'s; ``NOT_THE_MATHS`` are not compared."""
    old, new = _flat(to_dict(saved)), _flat(to_dict(cfg))
    skip = {f"train.{f}" for f in SCHEDULE_FIELDS} | {"team.agents"}
    out = [
        f"{key}: {old.get(key)!r} -> {new.get(key)!r}"
        for key in sorted(set(old) | set(new))
        if key not in skip and not key.startswith(NOT_THE_MATHS) and old.get(key) != new.get(key)
    ]
    was = {a.name: to_dict(a) for a in saved.team.agents}
    now = {a.name: to_dict(a) for a in cfg.team.agents}
    if list(was) != list(now):
        out.append(f"team.agents: {list(was)} -> {list(now)}")
    for name in (n for n in now if n in was):
        out += [
            f"team.agents[{name}].{f}: {was[name].get(f)!r} -> {now[name].get(f)!r}"
            for f in sorted(set(was[name]) | set(now[name]))
            if f != "learning_rate" and was[name].get(f) != now[name].get(f)
        ]
    return out


def _flat(tree: dict, prefix: str = "") -> dict:
    """A nested config dict as ``{"section.field": value}`` (lists stay whole)."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):  # an empty one adds no key: {} -> {a: 1} is one change
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
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
    """The newest checkpoint folder that is complete (``incomplete``); not hashed."""
    ckpts = checkpoint_folders(run_dir)
    return ckpts[-1] if ckpts else None


def checkpoint_folders(run_dir: str | Path) -> list[Path]:
    """``checkpoints/step-N`` folders that are checkpoints (not empty, not partial), by step."""
    return [p for p in _sorted(Path(run_dir, "checkpoints")) if incomplete(p) is None]


def _sorted(root: Path) -> list[Path]:
    """``step-N`` folders by N (a file or a ``step-x`` named by hand is no checkpoint)."""
    steps = [p for p in root.glob("step-*") if p.name[5:].isdigit() and p.is_dir()]
    return sorted(steps, key=lambda p: int(p.name[5:]))


def _yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())
