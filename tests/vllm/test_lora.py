"""Two LoRA adapters in one vLLM engine: routing per row, and adapter sync after a step."""

from __future__ import annotations

import pytest
import torch
from vllm_helpers import (
    chat_prompt,
    engine_spec,
    hf_greedy,
    reference_logprobs,
    small_engine_config,
)

from teamrl.generation.types import Request

TARGETS = ["q_proj", "v_proj"]
TOL = 2e-3  # fp32 on both sides; measured differences are ~1e-4


def _randomise(model, adapter: str, seed: int, scale: float = 0.2) -> None:
    # PEFT initialises B = 0 (adapter == base); random B makes the two adapters differ enough
    # that a misrouted row is obvious (mean gap >> TOL).
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if f"lora_B.{adapter}." in name:
                p.copy_(torch.randn(p.shape, generator=gen) * scale)


@pytest.fixture(scope="module")
def lora_engine():
    from peft import LoraConfig, get_peft_model

    from teamrl.generation.vllm import VLLMBackend
    from teamrl.team import models

    model = models.load_model("smollm2-135m")
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0)
    peft_model = get_peft_model(model, lora, adapter_name="alice")
    peft_model.add_adapter("bob", lora)
    _randomise(peft_model, "alice", seed=1)
    _randomise(peft_model, "bob", seed=2)
    peft_model.eval()
    spec = engine_spec(peft_model, ["alice", "bob"], lora_r=8, targets=TARGETS)
    backend = VLLMBackend(small_engine_config(), spec)
    yield backend, peft_model
    backend.close()


def _under(peft_model, adapter, prompt, completion):
    peft_model.set_adapter(adapter)
    return reference_logprobs(peft_model, prompt, completion)


def test_mixed_adapters_in_one_call_route_each_row(lora_engine):
    backend, peft_model = lora_engine
    prompt = chat_prompt("Name a colour.")
    out = backend.generate(
        [
            Request(prompt, n=2, max_new_tokens=12, adapter="alice"),
            Request(prompt, n=2, max_new_tokens=12, adapter="bob"),
        ]
    )
    assert [len(g) for g in out] == [2, 2]
    for adapter, other, gens in (("alice", "bob", out[0]), ("bob", "alice", out[1])):
        for g in gens:
            assert g.completion_ids and len(g.logprobs) == len(g.completion_ids)
            mine = _under(peft_model, adapter, prompt, g.completion_ids)
            theirs = _under(peft_model, other, prompt, g.completion_ids)
            got = torch.tensor(g.logprobs)
            assert (got - mine).abs().max() < TOL, (adapter, got, mine)
            assert (got - theirs).abs().mean() > 20 * TOL, (adapter, got, theirs)


def test_adapter_sync_after_a_step_changes_the_next_generation(lora_engine):
    backend, peft_model = lora_engine
    prompt = chat_prompt("Count to three.")
    ask = [Request(prompt, n=1, temperature=0.0, max_new_tokens=10, adapter="alice")]
    before = backend.generate(ask)[0][0].completion_ids
    old = _under(peft_model, "alice", prompt, before)
    # A (fake) optimizer step on alice only.
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B.alice." in name:
                p.add_(torch.randn_like(p) * 0.3)
    stale = backend.generate(ask)[0][0].completion_ids
    assert stale == before  # the engine has its own copy until told
    backend.weights_changed("alice")
    new = _under(peft_model, "alice", prompt, before)
    assert (new - old).abs().mean() > 20 * TOL  # the step matters for these tokens
    # Sampled tokens now score as under the new alice, and bob is untouched.
    out = backend.generate(
        [
            Request(prompt, n=2, max_new_tokens=10, adapter="alice"),
            Request(prompt, n=1, max_new_tokens=10, adapter="bob"),
        ]
    )
    for adapter, gens in (("alice", out[0]), ("bob", out[1])):
        for g in gens:
            ref = _under(peft_model, adapter, prompt, g.completion_ids)
            assert (torch.tensor(g.logprobs) - ref).abs().max() < TOL, adapter
    peft_model.set_adapter("alice")
    hf = hf_greedy(peft_model, prompt, 10, backend.spec.eos_ids)
    after = backend.generate(ask)[0][0].completion_ids
    assert after == hf


def test_greedy_rows_repeat_and_score_zero(lora_engine):
    backend, _ = lora_engine
    prompt = chat_prompt("Say yes.")
    (gens,) = backend.generate([Request(prompt, n=3, temperature=0, max_new_tokens=6)])
    assert len(gens) == 3 and gens[0].completion_ids == gens[2].completion_ids
    assert gens[0].logprobs == [0.0] * len(gens[0].completion_ids)
