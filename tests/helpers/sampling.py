"""Tiny models for the sampler's tests: a two-adapter LoRA model whose adapters differ, and the
completion ids of a generate call."""

from __future__ import annotations

import torch


def lora_model(**extra):
    """tiny-llama with adapters ``alice`` and ``bob`` (rank 4 on q and v, random B)."""
    from peft import LoraConfig, get_peft_model

    from teamrl.team.models import load_model

    torch.manual_seed(0)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], **extra)
    model = get_peft_model(load_model("tiny-llama"), cfg, adapter_name="alice")
    model.add_adapter("bob", cfg)
    with torch.no_grad():  # B starts at zero (adapter = base); make the adapters differ
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    return model


def tokens(gens) -> list[list[list[int]]]:
    """Completion ids of a generate call's result, per request and sample."""
    return [[g.completion_ids for g in per_req] for per_req in gens]
