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
    kept = dict(ignore_eos=True, keep_cache=True)  # what a compiled step does by default
    first = fast_decode.generate(model, requests(0.0), [0], 0, **kept)
    (cache,) = fast_decode._STATES[model].caches.values()
    again = fast_decode.generate(model, requests(0.0), [0], 0, **kept)
    assert list(fast_decode._STATES[model].caches.values()) == [cache]  # reset, not reallocated
    assert tokens(again) == tokens(first)
    fast_decode.release(model)
    assert model not in fast_decode._STATES


def test_an_eager_call_holds_no_cache_after_it(monkeypatch):
    """Eager (on CPU with fast_decode=on), the static cache lives as long as the call, like the growing
    cache of the reference loop: nothing is kept for the update to share memory with."""
    import gc
    import weakref

    from transformers.cache_utils import StaticCache

    model = load_model("tiny-llama")
    made = []
    real_init = StaticCache.__init__

    def spy(self, *a, **k):
        made.append(weakref.ref(self))
        real_init(self, *a, **k)

    monkeypatch.setattr(StaticCache, "__init__", spy)
    out = fast_decode.generate(model, requests(0.0), [0], 0, ignore_eos=True)
    monkeypatch.undo()
    gc.collect()
    assert made and all(ref() is None for ref in made)  # every cache made freed with the call
    assert not fast_decode._STATES[model].caches
    assert tokens(out) == tokens(
        generate(model, requests(0.0), eos_ids=[0], pad_id=0, ignore_eos=True)
    )


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
    """'on' sends a CPU engine's calls to the static-cache path; 'auto' (the default) and 'off'
    keep the reference loop there (eager, the static cache was not faster on CPU), with the same
    greedy tokens. 'auto' takes the fast path on CUDA only; another device ('meta' here)
    keeps the reference loop."""
    from teamrl.config import GenerationConfig
    from teamrl.generation import hf
    from teamrl.generation.backend import EngineSpec, make_backend

    model = load_model("tiny-llama")
    spec = EngineSpec(model, None, [0], 0, "tiny-llama", "float32", "cpu", [])
    calls = []
    real_fast, real_ref = fast_decode.generate, hf.generate
    monkeypatch.setattr(
        fast_decode, "generate", lambda *a, **k: calls.append("fast") or real_fast(*a, **k)
    )
    monkeypatch.setattr(hf, "generate", lambda *a, **k: calls.append("ref") or real_ref(*a, **k))
    got = {
        mode: tokens(
            make_backend(GenerationConfig(fast_decode=mode), spec).generate(
                requests(0.0), ignore_eos=True
            )
        )
        for mode in ("auto", "on", "off")
    }
    assert calls == ["ref", "fast", "ref"]
    assert got["auto"] == got["on"] == got["off"]
    for device, auto_fast in (("cuda", True), ("cuda:1", True), ("meta", False)):
        spec = EngineSpec(model, None, [0], 0, "tiny-llama", "float32", device, [])
        assert make_backend(GenerationConfig(), spec).fast is auto_fast, device
        assert make_backend(GenerationConfig(fast_decode="on"), spec).fast
        assert not make_backend(GenerationConfig(fast_decode="off"), spec).fast


def test_an_eager_step_decodes_its_rows_unpadded_over_the_cache_it_needs(monkeypatch):
    """Padding rows to a power of two (6 -> 8) and the cache to a length bucket (19 -> 64) only
    serve a compiled step's shape reuse: an eager step decodes its 6 rows as they are, over
    7 prompt columns (the widest prompt) + 12 new tokens (the largest budget) = 19 cache
    positions, with the reference loop's tokens."""
    model = load_model("tiny-llama")
    seen, shapes = [], []
    real, real_cache = fast_decode._decode_step, fast_decode._static_cache

    def spy(model_, ids, *rest):
        seen.append(ids.shape[0])
        return real(model_, ids, *rest)

    def cache_spy(model_, state, key, *rest):
        shapes.append(key)
        return real_cache(model_, state, key, *rest)

    monkeypatch.setattr(fast_decode, "_decode_step", spy)
    monkeypatch.setattr(fast_decode, "_static_cache", cache_spy)
    reqs = requests(0.0)  # 3 + 1 + 2 = 6 rows
    eager = fast_decode.generate(model, reqs, [0], 0, ignore_eos=True, compile=False)
    assert set(seen) == {6} and shapes == [(6, 19)]
    assert fast_decode.length_bucket(19) == 64  # what a compiled step would have used
    assert tokens(eager) == tokens(generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True))
    fast_decode.release(model)


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
