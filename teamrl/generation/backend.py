"""The generation seam: what a backend is told about one engine, and what it must do.

The episode builders never talk to a backend: ``Team.generate`` groups its jobs by engine (one
model object) and hands each group to that engine's backend in one call. The trainer tells
the backend when it has stepped an adapter's (or the full model's) weights, so a backend that
keeps its own copy of the weights (vLLM) can refresh it; the ``hf`` backend samples from the
live model and has nothing to do. A backend that keeps a copy also says which version of the
weights it took (``served_version``, the ``RecordsVersions`` protocol of
``teamrl.generation.versions``), which every app reply names (``teamrl.apps.provenance``).
"""

from __future__ import annotations

import importlib.util
from typing import Protocol

from teamrl.config import ConfigError, GenerationConfig
from teamrl.generation.types import EngineSpec, Generation, Request

__all__ = ["Backend", "EngineSpec", "make_backend"]  # EngineSpec: re-exported, callers use it here


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
        from teamrl.generation.hf_backend import HFBackend

        return HFBackend(
            spec,
            fast_decode=cfg.fast_decode,
            cpu_prepack=cfg.cpu_prepack,
            compile=cfg.fast_decode_compile,
            max_shapes=cfg.fast_decode_max_shapes,
            graph=cfg.fast_decode_graph,
            sampler_dtype=cfg.sampler_dtype,
        )
    if cfg.backend == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("generation.backend=vllm needs vLLM: pip install 'teamrl[vllm]'")
        from teamrl.generation.vllm import VLLMBackend  # written with the vLLM issue

        return VLLMBackend(cfg, spec)
    raise ConfigError(f"generation.backend: expected hf|vllm, got {cfg.backend!r}")
