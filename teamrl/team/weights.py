"""A policy's weights in the format its ecosystem loads, and the fingerprint of its base model.

- A LoRA policy is a PEFT adapter folder: ``adapter_config.json`` + ``adapter_model.safetensors``
  (keys without the adapter name), so ``PeftModel.from_pretrained(base, folder)`` loads it.
- A full policy is a ``save_pretrained`` folder (``config.json`` + ``model.safetensors``).
- Either way the tokenizer is saved beside the weights.
- A Ray policy (``teamrl.scale``) has rank 0 write the same files with this same code.

safetensors stores the exact bits, so a resume from these files is exact.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import torch

from teamrl.config.policy_map import base_of

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
FULL_FILES = ("config.json", "model.safetensors")


def save_policy(pol, folder: Path, tokenizer: bool = True) -> None:
    """Write ``pol``'s trainable weights (and its tokenizer) into ``folder``: the policy writes
    its own (a Ray policy's rank 0 writes them with ``save_local_weights``)."""
    folder.mkdir(parents=True, exist_ok=True)
    pol.save_weights(folder)
    if tokenizer:
        pol.engine.tokenizer.save_pretrained(str(folder))


def save_local_weights(pol, folder: Path) -> None:
    """A policy in this process: its adapter (PEFT's files) or its whole model."""
    from safetensors.torch import save_file

    if pol.adapter is not None:
        state = {k: v.detach().cpu().contiguous() for k, v in pol.state_dict().items()}
        save_file(state, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
        config = copy.copy(pol.model.peft_config[pol.adapter])
        # PEFT records the base only for the first adapter; every folder names it
        config.base_model_name_or_path = config.base_model_name_or_path or pol.engine.model_path
        config.save_pretrained(str(folder))
    else:
        # one file (no shards): the manifest and the loader below read exactly these names
        pol.model.save_pretrained(str(folder), max_shard_size="10000GB")


def load_policy(pol, folder: Path) -> None:
    """Load weights written by ``save_policy`` (or a legacy ``weights.pt``) into ``pol``."""
    if (folder / "weights.pt").exists():  # checkpoints written before the standard formats
        pol.load_state_dict(torch.load(folder / "weights.pt", weights_only=True))
        return
    pol.load_weights(folder)  # a Ray policy: every rank loads these files


def load_local_weights(pol, folder: Path) -> None:
    """Into a policy in this process: what ``save_local_weights`` wrote."""
    from safetensors.torch import load_file

    if pol.adapter is not None:
        pol.load_state_dict(load_file(str(folder / "adapter_model.safetensors")))
        return
    state = load_file(str(folder / "model.safetensors"))
    missing, unexpected = pol.model.load_state_dict(state, strict=False)
    tied = _tied_names(pol.model)
    if unexpected or set(missing) - tied:
        raise ValueError(
            f"{folder / 'model.safetensors'}: does not fit the model "
            f"(missing {sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]})"
        )


def _tied_names(model: torch.nn.Module) -> set[str]:
    """Names of parameters that share storage with an earlier one (save_pretrained drops them)."""
    seen: dict[int, str] = {}
    tied = set()
    for name, t in model.state_dict(keep_vars=True).items():
        key = t.data_ptr()
        if key in seen:
            tied.add(name)
        else:
            seen[key] = name
    return tied


def base_fingerprint(model: torch.nn.Module, tensors: int = 4, max_bytes: int = 1 << 20) -> str:
    """sha256 over the base model's sorted parameter names and shapes, and the leading bytes of a
    few tensors (the first and last ``tensors // 2`` names), LoRA weights excluded.

    Names are taken without PEFT's wrappers (``base_model.model.``, ``.base_layer``), so the
    fingerprint of a base is the same with or without adapters. Values are hashed as bfloat16,
    so the same base loaded in float32 or bfloat16 has the same fingerprint.
    """
    named = {}
    for name, p in model.state_dict().items():
        if any(part.startswith("lora_") for part in name.split(".")):
            continue
        named[name.replace("base_model.model.", "", 1).replace(".base_layer", "")] = p
    names = sorted(named)
    h = hashlib.sha256()
    for name in names:
        h.update(f"{name}:{tuple(named[name].shape)};".encode())
    half = max(1, tensors // 2)
    for name in dict.fromkeys(names[:half] + names[-half:]):
        flat = named[name].detach().flatten()[: max_bytes // 2].to(torch.bfloat16).contiguous()
        h.update(flat.view(torch.int16).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def base_record(team, cfg) -> dict:
    """``{policy: {"name": base model name, "fingerprint": ...}}`` for base_model.json."""
    out = {}
    for name, pol in team.policies.items():
        agent = cfg.team.agents[[a.name for a in cfg.team.agents].index(pol.agents[0])]
        out[name] = {"name": base_of(cfg, agent), "fingerprint": fingerprint_of(pol.engine)}
    return out


def fingerprint_of(engine) -> str:
    """The engine's base fingerprint, computed once (before training changes a full model) and
    kept on the engine itself."""
    if "_base_fingerprint" not in vars(engine):
        # under Ray the controller holds no weights: ray_team stores the workers' fingerprint
        # here; an engine with neither records none ("")
        model = getattr(engine, "model", None)
        engine._base_fingerprint = "" if model is None else base_fingerprint(model)
    return engine._base_fingerprint


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())
