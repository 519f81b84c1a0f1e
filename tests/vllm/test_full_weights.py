"""One vLLM engine on full weights: greedy parity with HF, log-probs against the trainer's
(T = 1, and the documented top-p behaviour), and the in-memory weight sync."""

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

TOL = 2e-3


@pytest.fixture(scope="module")
def full_engine():
    from teamrl.generation.vllm import VLLMBackend
    from teamrl.team import models

    model = models.load_model("smollm2-135m").eval()
    backend = VLLMBackend(small_engine_config(), engine_spec(model))
    yield backend, model
    backend.close()


PROMPTS = ["What is 2 + 3?", "Write one word about the sea.", "Name a fruit."]


def test_greedy_matches_hf_generate(full_engine):
    backend, model = full_engine
    prompts = [chat_prompt(p) for p in PROMPTS]
    out = backend.generate([Request(p, n=1, temperature=0, max_new_tokens=16) for p in prompts])
    for prompt, (g,) in zip(prompts, out):
        hf = hf_greedy(model, prompt, 16, backend.spec.eos_ids)
        assert g.completion_ids == hf
        assert g.truncated == (hf[-1] not in backend.spec.eos_ids)


def test_ignore_eos_runs_to_the_budget(full_engine):
    backend, _ = full_engine
    (gens,) = backend.generate([Request(chat_prompt("Hi"), n=2, max_new_tokens=9)], True)
    assert [len(g.completion_ids) for g in gens] == [9, 9]
    assert all(g.truncated for g in gens)


def test_logprobs_match_the_trainer_at_t1_and_the_truncated_sampler_under_top_p(full_engine):
    backend, model = full_engine
    prompt = chat_prompt("Tell me about cats.")
    plain, nucleus = backend.generate(
        [
            Request(prompt, n=2, temperature=1.0, top_p=1.0, max_new_tokens=16),
            Request(prompt, n=2, temperature=0.7, top_p=0.9, max_new_tokens=16),
        ]
    )
    for g in plain:  # T=1, top_p=1: exactly the trainer's log-softmax
        ref = reference_logprobs(model, prompt, g.completion_ids)
        assert (torch.tensor(g.logprobs) - ref).abs().max() < TOL
    # T=0.7, top_p=0.9: vLLM returns log q, the truncated (renormalised) distribution it drew
    # from, like teamrl's own sampler; the trainer's tempered full softmax (log pi) is lower by
    # log of the kept mass, >= 0 per token. This gap is what importance sampling corrects.
    gaps = []
    for g in nucleus:
        q = reference_logprobs(model, prompt, g.completion_ids, temperature=0.7, top_p=0.9)
        pi = reference_logprobs(model, prompt, g.completion_ids, temperature=0.7)
        got = torch.tensor(g.logprobs)
        assert (got - q).abs().max() < TOL
        assert bool((got >= pi - TOL).all())
        gaps.append(got - pi)
    assert torch.cat(gaps).max() > 1e-3  # the truncation did bite somewhere


def _load(model, state):
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(state[n])


def test_full_weight_sync_moves_the_engine_to_the_new_weights(full_engine):
    backend, model = full_engine
    prompt = chat_prompt("Name a fruit.")
    saved = {n: p.detach().clone() for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(0)
    stepped = {n: p + torch.randn(p.shape, generator=gen) * 0.02 for n, p in saved.items()}
    try:
        _load(model, stepped)  # a (fake) optimizer step on every parameter
        backend.weights_changed(None)
        (gens,) = backend.generate([Request(prompt, n=2, max_new_tokens=12)])
        new = [reference_logprobs(model, prompt, g.completion_ids) for g in gens]
        _load(model, saved)
        old = [reference_logprobs(model, prompt, g.completion_ids) for g in gens]
        for g, n, o in zip(gens, new, old):
            got = torch.tensor(g.logprobs)
            assert (got - n).abs().max() < TOL
            assert (got - o).abs().mean() > 20 * TOL  # the step matters for these tokens
    finally:
        _load(model, saved)
        backend.weights_changed(None)
    # And back: the engine follows the restored weights too.
    (g,) = backend.generate([Request(prompt, n=1, max_new_tokens=8)])[0]
    ref = reference_logprobs(model, prompt, g.completion_ids)
    assert (torch.tensor(g.logprobs) - ref).abs().max() < TOL
