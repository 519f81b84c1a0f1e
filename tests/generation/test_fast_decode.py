"""The static-cache fast path gives what the reference sampling loop gives."""

from __future__ import annotations

import pytest
import torch
from helpers.sampling import lora_model as _lora_model
from helpers.sampling import tokens

from teamrl.generation import fast_decode
from teamrl.generation.hf import generate
from teamrl.generation.types import Request
from teamrl.team.models import load_model

PROMPTS = [[5, 9, 14, 3], [7, 21], [30, 2, 8, 11, 19, 4, 6]]  # different widths: left padding


def requests(temperature: float, budgets=(12, 7, 12), **kw) -> list[Request]:
    return [
        Request(prompt_ids=p, n=n, temperature=temperature, max_new_tokens=b, **kw)
        for p, n, b in zip(PROMPTS, (3, 1, 2), budgets)
    ]


def assert_same(ref, fast, atol=1e-5):
    assert tokens(fast) == tokens(ref)
    for per_ref, per_fast in zip(ref, fast):
        for a, b in zip(per_ref, per_fast):
            assert a.truncated == b.truncated
            assert a.prompt_ids == b.prompt_ids
            torch.testing.assert_close(
                torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=atol, rtol=0
            )


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_greedy_gives_the_reference_tokens_and_stops_at_the_same_eos(name):
    model = load_model(name)
    assert fast_decode.supported(model, requests(0.0))
    ref = generate(model, requests(0.0), eos_ids=[0], pad_id=0, ignore_eos=True)
    assert tokens(fast_decode.generate(model, requests(0.0), [0], 0, ignore_eos=True)) == tokens(
        ref
    )
    assert [len(g.completion_ids) for per in ref for g in per] == [12, 12, 12, 7, 12, 12]
    # Make a token the first row emits at position 4 the EOS: that row must stop there (5
    # tokens, not truncated) in both loops, the others run on, and a finished row's slot keeps
    # being fed pads in the batch without changing anyone's tokens.
    eos = ref[0][0].completion_ids[4]
    ref = generate(model, requests(0.0), eos_ids=[eos], pad_id=0)
    fast = fast_decode.generate(model, requests(0.0), eos_ids=[eos], pad_id=0)
    assert_same(ref, fast)
    first = ref[0][0]
    assert len(first.completion_ids) <= 5 and not first.truncated
    assert first.completion_ids[-1] == eos


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_sampling_with_a_seed_gives_the_reference_tokens_and_logprobs(name):
    model = load_model(name)
    reqs = requests(1.0) + [Request(PROMPTS[0], n=2, temperature=0.7, top_p=0.9, top_k=20)]
    torch.manual_seed(123)
    ref = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
    after_ref = torch.rand(1)
    torch.manual_seed(123)
    fast = fast_decode.generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
    # The same RNG draws: the same tokens, and the stream continues from the same state.
    assert torch.equal(torch.rand(1), after_ref)
    assert_same(ref, fast)
    assert any(lp < -0.1 for per in fast for g in per for lp in g.logprobs)  # really sampled


def test_the_cache_is_reused_across_calls_of_the_same_shape():
    model = load_model("tiny-llama")
    first = fast_decode.generate(model, requests(0.0), [0], 0, ignore_eos=True)
    (cache,) = fast_decode._STATES[model].caches.values()
    again = fast_decode.generate(model, requests(0.0), [0], 0, ignore_eos=True)
    assert list(fast_decode._STATES[model].caches.values()) == [cache]  # reset, not reallocated
    assert tokens(again) == tokens(first)
    fast_decode.release(model)
    assert model not in fast_decode._STATES


def test_mixed_lora_rows_give_the_reference_tokens():
    model = _lora_model()
    reqs = [
        Request(PROMPTS[0], n=2, temperature=0.0, max_new_tokens=10, adapter="alice"),
        Request(PROMPTS[0], n=2, temperature=0.0, max_new_tokens=10, adapter="bob"),
        Request(PROMPTS[2], n=1, temperature=0.0, max_new_tokens=10, adapter=None),
    ]
    assert fast_decode.supported(model, reqs)
    ref = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
    assert ref[0][0].completion_ids != ref[1][0].completion_ids  # the adapters really differ
    assert_same(ref, fast_decode.generate(model, reqs, [0], 0, ignore_eos=True))


def test_declines_what_it_cannot_serve_and_falls_back_to_the_reference():
    biased = _lora_model(lora_bias=True)  # the grouped forward has no bias on B: PEFT's route
    reqs = [Request(PROMPTS[0], n=2, temperature=0.0, max_new_tokens=6, adapter="alice")]
    assert "grouped multi-LoRA" in fast_decode.decline_reason(biased, reqs)
    ref = generate(biased, reqs, eos_ids=[0], pad_id=0)
    assert tokens(fast_decode.generate(biased, reqs, [0], 0)) == tokens(ref)

    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        use_sliding_window=True,
        sliding_window=8,
        max_window_layers=1,
    )
    sliding = Qwen2ForCausalLM(cfg)
    plain = [Request(PROMPTS[1], temperature=0.0, max_new_tokens=4)]
    assert "cache layout" in fast_decode.decline_reason(sliding, plain)
    assert tokens(fast_decode.generate(sliding, plain, [0], 0)) == tokens(
        generate(sliding, plain, eos_ids=[0], pad_id=0)
    )


def test_config_switch_routes_the_hf_backend_through_the_fast_path(monkeypatch):
    """generation.fast_decode=on sends the hf backend's calls to the fast path (same tokens);
    'auto' keeps the eager loop on a CPU engine."""
    from teamrl.config import GenerationConfig
    from teamrl.generation.backend import EngineSpec, make_backend

    model = load_model("tiny-llama")
    spec = EngineSpec(model, None, [0], 0, "tiny-llama", "float32", "cpu", [])
    calls = []
    real = fast_decode.generate
    monkeypatch.setattr(fast_decode, "generate", lambda *a, **k: calls.append(1) or real(*a, **k))
    on = make_backend(GenerationConfig(fast_decode="on"), spec)
    auto = make_backend(GenerationConfig(fast_decode="auto"), spec)
    assert tokens(on.generate(requests(0.0), ignore_eos=True)) == tokens(
        auto.generate(requests(0.0), ignore_eos=True)
    )
    assert calls == [1]  # only the 'on' backend used the fast path


MIXED = [("alice", 2), ("bob", 2), (None, 1)]  # (adapter, rows) of the mixed-LoRA calls


def mixed_requests(order=MIXED) -> list[Request]:
    return [
        Request(PROMPTS[k % 2], n=n, temperature=0.0, max_new_tokens=8, adapter=a)
        for k, (a, n) in enumerate(order)
    ]


def test_grouped_lora_keeps_its_forwards_and_reads_the_current_weights():
    """The same shape installs the same functions over the same tensors on every call (what a
    compiled step needs), refilled from the adapters as they are now: a weight changed in place
    (as a fused optimizer step does) and a new assignment of rows to adapters both show."""
    from peft.tuners.lora.layer import Linear as LoraLinear

    from teamrl.generation import multi_lora

    model = _lora_model()
    x = torch.randint(1, 64, (3, 5))
    layer = next(m for m in model.modules() if isinstance(m, LoraLinear))

    def grouped(rows):
        with multi_lora.grouped_lora(model, rows):
            forward = layer.forward
            return model(input_ids=x).logits, forward

    def per_row(rows):  # PEFT's own forward, one adapter at a time
        out = []
        for i, a in enumerate(rows):
            if a is None:
                with model.disable_adapter():
                    out.append(model(input_ids=x[i : i + 1]).logits)
            else:
                model.set_adapter(a)
                out.append(model(input_ids=x[i : i + 1]).logits)
        return torch.cat(out)

    with torch.no_grad():
        rows = ["alice", "bob", None]
        first, f1 = grouped(rows)
        torch.testing.assert_close(first, per_row(rows))
        for name, p in model.named_parameters():  # an in-place "optimizer step" on bob
            if "lora_B.bob" in name:
                p.mul_(-2.0)
        second, f2 = grouped(rows)
        assert f2 is f1  # the same function object (and so the same stacked tensors)
        assert "forward" not in vars(layer)  # unpatched outside the block
        assert not torch.allclose(second, first)
        torch.testing.assert_close(second, per_row(rows))
        swapped = ["bob", None, "alice"]
        third, f3 = grouped(swapped)
        assert f3 is f1
        torch.testing.assert_close(third, per_row(swapped))
        # one adapter only, fewer rows: still the same forwards (every adapter is stacked)
        fewer, f4 = grouped(["bob"] * 2 + [None])
        assert f4 is f1
        torch.testing.assert_close(fewer, per_row(["bob", "bob", None]))
        with pytest.raises(ValueError, match="unknown adapter"):
            grouped(["carol", None, None])
    fast_decode.release(model)
    assert model not in multi_lora._GROUPED


def test_the_compiled_step_replays_with_lora_rows_and_follows_the_weights(monkeypatch):
    """compile=True with LoRA rows (it ran eagerly before): dynamo traces the grouped forward
    once per shape, a second call compiles nothing new, and after an in-place change of an
    adapter the compiled step samples from the new weights. A counting backend stands in for
    inductor (the tracing and its guards are dynamo's either way; CUDA graphs are tested in
    tests/test_cuda.py)."""
    import torch._dynamo

    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real_compile(fn, backend=counting))
    torch._dynamo.reset()
    model = _lora_model()
    reqs = mixed_requests()
    ref = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
    assert_same(ref, fast_decode.generate(model, reqs, [0], 0, ignore_eos=True, compile=True))
    compiled = len(graphs)
    assert compiled >= 1  # the LoRA rows went through the compiled step
    again = fast_decode.generate(model, reqs, [0], 0, ignore_eos=True, compile=True)
    assert tokens(again) == tokens(ref) and len(graphs) == compiled  # replayed, not recompiled
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B.alice" in name:
                p.mul_(-3.0)
    new_ref = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
    assert tokens(new_ref)[0] != tokens(ref)[0]  # the change moves alice's tokens
    assert_same(new_ref, fast_decode.generate(model, reqs, [0], 0, ignore_eos=True, compile=True))
    assert len(graphs) == compiled  # new weights, same graph
    fast_decode.release(model)
    torch._dynamo.reset()
