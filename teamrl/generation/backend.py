"""The generation seam: what a backend is told about one engine, and what it must do.

The episode builders never talk to a backend: ``Team.generate`` groups its jobs by engine (one
model object) and hands each group to that engine's backend in one call. The trainer tells
the backend when it has stepped an adapter's (or the full model's) weights, so a backend that
keeps its own copy of the weights (vLLM) can refresh it; the ``hf`` backend samples from the
live model and has nothing to do.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from teamrl.config import ConfigError, GenerationConfig
from teamrl.generation.types import Generation, Request


@dataclass
class EngineSpec:
    """What a backend may know about one model object (engine)."""

    model: torch.nn.Module  # the trainer's live model (PEFT-wrapped when LoRA is used)
    tokenizer: Any
    eos_ids: list[int]
    pad_id: int
    model_path: str  # local HF folder (teamrl.models.resolve) or hub id of the base weights
    dtype: str  # "float32" | "bfloat16" | "float16"
    device: str  # "cpu", "cuda", "cuda:1"...
    adapters: list[str]  # LoRA adapter names living in `model` ([] when no LoRA)
    lora_r: int = 0
    lora_alpha: int = 0
    lora_target_modules: list[str] = field(default_factory=list)


class Backend(Protocol):
    name: str

    def generate(self, requests: list[Request], ignore_eos: bool = False) -> list[list[Generation]]:
        """One batched call: for each request, its n generations (completion ids through EOS,
        the sampler's log-prob of each chosen token, truncated flag)."""
        ...

    def weights_changed(self, adapter: str | None) -> None:
        """The trainer just stepped the weights of LoRA adapter ``adapter`` (None: the full
        model) inside spec.model; the backend must generate from the new weights next time."""
        ...


def make_backend(cfg: GenerationConfig, spec: EngineSpec) -> Backend:
    """The backend ``cfg.backend`` names, built for one engine."""
    if cfg.backend == "hf":
        from teamrl.generation.hf import HFBackend

        return HFBackend(spec, fast_decode=cfg.fast_decode, cpu_prepack=cfg.cpu_prepack)
    if cfg.backend == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("generation.backend=vllm needs vLLM: pip install 'teamrl[vllm]'")
        from teamrl.generation.vllm import VLLMBackend  # written with the vLLM issue

        return VLLMBackend(cfg, spec)
    raise ConfigError(f"generation.backend: expected hf|vllm, got {cfg.backend!r}")
