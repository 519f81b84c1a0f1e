"""What crosses the generation seam: what a backend knows of its engine, a request for ``n``
samples and the generations back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Request:
    """One prompt to sample ``n`` completions for."""

    prompt_ids: list[int]
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64
    adapter: str | None = None  # LoRA adapter name for mixed-adapter batches
    stop: tuple[str, ...] = ()  # strings that end a completion (kept), like EOS
    # Neither EOS nor a stop string ends a completion before this many tokens (vLLM's
    # min_tokens, HF's min_new_tokens); a stop string must end after them to count.
    min_new_tokens: int = 0


@dataclass
class Generation:
    prompt_ids: list[int]
    completion_ids: list[int]  # real tokens only (through EOS), no pads
    logprobs: list[float]  # sampler log-prob of each completion token
    truncated: bool  # hit max_new_tokens without EOS or a stop string


@dataclass
class EngineSpec:
    """What a backend may know about one model object (engine)."""

    model: torch.nn.Module  # the trainer's live model (PEFT-wrapped when LoRA is used)
    tokenizer: Any
    eos_ids: list[int]
    pad_id: int
    model_path: str  # local HF folder (teamrl.team.models.resolve) or hub id of the base weights
    dtype: str  # "float32" | "bfloat16" | "float16"
    device: str  # "cpu", "cuda", "cuda:1"...
    adapters: list[str]  # LoRA adapter names living in `model` ([] when no LoRA)
    lora_r: int = 0
    lora_alpha: int = 0
    lora_target_modules: list[str] = field(default_factory=list)
    lora_compute_dtype: str = "model"  # model.lora_compute_dtype: the LoRA branch's dtype


def stop_end(text: str, stops, floor: int = 0) -> int | None:
    """Where the earliest stop string in ``text`` that ends past character ``floor`` ends
    (None: none does). Generation ends at the first token after which the text holds one, so
    this is where a stopped reply ended; ``floor`` is the text of the tokens before the
    request's ``min_new_tokens``, where a stop string does not count."""
    ends = [i + len(s) for s in stops if (i := text.find(s, max(0, floor - len(s) + 1))) >= 0]
    return min(ends) if ends else None


def stop_floor(decode, ids: list[int], min_new_tokens: int) -> int:
    """Characters of the text of the first ``min_new_tokens - 1`` tokens: a stop string must
    end past them to end the completion (0 without a minimum)."""
    return len(decode(ids[: min_new_tokens - 1])) if min_new_tokens > 1 else 0
