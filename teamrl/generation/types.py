"""What crosses the generation seam: a request for ``n`` samples and the generations back."""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass
class Generation:
    prompt_ids: list[int]
    completion_ids: list[int]  # real tokens only (through EOS), no pads
    logprobs: list[float]  # sampler log-prob of each completion token
    truncated: bool  # hit max_new_tokens without EOS or a stop string
