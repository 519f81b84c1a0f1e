"""Plain helpers the tests/vllm modules share (the base_model fixture is in conftest.py; not
named helpers.py, which would clash with tests/helpers on sys.path): the engine's config and
spec on SmolLM2-135M, a chat prompt, and the trainer-side references (log-probs, HF greedy)."""

from __future__ import annotations

import torch

MODEL = "smollm2-135m"


def small_engine_config(**extra):
    from teamrl.config import GenerationConfig

    # A 1 GiB KV cache at 1024 tokens keeps several engines within this machine's memory.
    return GenerationConfig(
        backend="vllm", vllm_max_model_length=1024, vllm_kv_cache_gb=0.5, **extra
    )


def engine_spec(model, adapters=(), lora_r=0, targets=()):
    from teamrl.generation.backend import EngineSpec
    from teamrl.team import models

    tok = models.load_tokenizer(MODEL)
    return EngineSpec(
        model=model,
        tokenizer=tok,
        eos_ids=[tok.eos_token_id],
        pad_id=tok.pad_token_id,
        model_path=models.resolve(MODEL),
        dtype="float32",
        device="cpu",
        adapters=list(adapters),
        lora_r=lora_r,
        lora_alpha=2 * lora_r,
        lora_target_modules=list(targets),
    )


def chat_prompt(text: str) -> list[int]:
    from teamrl.team import models

    tok = models.load_tokenizer(MODEL)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
    )
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def reference_logprobs(model, prompt, completion, temperature=1.0, top_p=1.0):
    """The trainer-side log-prob of each completion token: a forward of prompt + completion,
    logits / T, and (top_p < 1) the sampler's nucleus rule: drop a token when the mass of the
    tokens strictly more probable than it already reaches top_p."""
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    if top_p < 1:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = sorted_logits.softmax(-1)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    logp = logits.log_softmax(-1)
    return logp.gather(-1, torch.tensor(completion)[:, None])[:, 0]


def hf_greedy(model, prompt, max_new_tokens, eos_ids) -> list[int]:
    """HF ``generate``'s greedy completion of ``prompt`` (the reference for vLLM's greedy)."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_ids,
        )
    return out[0, len(prompt) :].tolist()
