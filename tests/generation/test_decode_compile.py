"""The compiled decode step, proved on the CPU: one graph with no break (shared rows and
mixed-adapter LoRA rows), at most one compile per shape bucket over calls with different adapter
mixes, prompt widths and budgets, the eager loop's greedy tokens, and a loud fallback.

Dynamo's tracing, guards and recompiles are the same whichever backend compiles its graph, so a
counting backend that runs the graph eagerly stands in for inductor (CUDA graphs are tested in
tests/test_cuda.py; one test below runs inductor's CPU code on a tiny model)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo
from helpers.sampling import lora_model as _lora_model
from helpers.sampling import tokens
from torch._dynamo.testing import CompileCounterWithBackend

from teamrl.generation import fast_decode
from teamrl.generation.fast_decode import DecodeFallbackWarning, length_bucket, row_bucket
from teamrl.generation.hf import generate
from teamrl.generation.types import Request
from teamrl.team.models import load_model


@pytest.fixture
def counter(monkeypatch):
    """Every model's compiled step goes through one counting backend (graphs run eagerly)."""
    count = CompileCounterWithBackend("eager")
    real = torch.compile

    def counted(fn, **kw):
        return real(fn, backend=count, fullgraph=kw["fullgraph"])

    monkeypatch.setattr(torch, "compile", counted)
    torch._dynamo.reset()
    yield count
    torch._dynamo.reset()


def req(prompt, n, adapter=None, budget=8):
    return Request(prompt, n=n, temperature=0.0, max_new_tokens=budget, adapter=adapter)


def test_buckets_by_hand():
    assert [row_bucket(n) for n in (1, 2, 3, 5, 8, 9, 200, 256)] == [1, 2, 4, 8, 8, 16, 256, 256]
    assert [length_bucket(n) for n in (1, 64, 65, 96, 97, 129, 192, 193, 3000, 4096)] == [
        64,
        64,
        96,
        96,
        128,
        192,
        192,
        256,
        3072,
        4096,
    ]
    # 1..256 rows: 9 buckets; 1..4096 positions: 13 lengths
    assert len({row_bucket(n) for n in range(1, 257)}) == 9
    assert len({length_bucket(n) for n in range(1, 4097)}) == 13


def _step_args(model, reqs, monkeypatch):
    """The arguments of the first decode step of ``fast_decode.generate(model, reqs)``, with
    the grouped LoRA forwards still installed when the explanation runs."""
    seen = {}
    real = fast_decode._decode_step

    def spy(*args):
        seen.setdefault("args", args)
        if "explain" not in seen:
            seen["explain"] = torch._dynamo.explain(real)(*args)
        return real(*args)

    monkeypatch.setattr(fast_decode, "_decode_step", spy)
    fast_decode.generate(model, reqs, [0], 0, ignore_eos=True, compile=False)
    return seen["explain"]


@pytest.mark.parametrize("kind", ["shared", "lora"])
def test_dynamo_sees_one_graph_and_no_break_in_the_decode_step(kind, monkeypatch):
    torch._dynamo.reset()
    if kind == "shared":
        model = load_model("tiny-llama")
        reqs = [req([5, 9, 14, 3], 2), req([7, 21], 1)]
    else:  # mixed adapters in one batch, and a base row
        model = _lora_model()
        reqs = [req([5, 9, 14, 3], 2, "alice"), req([7, 21], 2, "bob"), req([30, 2], 1)]
    explanation = _step_args(model, reqs, monkeypatch)
    assert explanation.graph_count == 1
    assert explanation.graph_break_count == 0, explanation.break_reasons
    fast_decode.release(model)
    torch._dynamo.reset()


def test_calls_with_new_mixes_widths_and_budgets_compile_once_per_bucket(counter):
    """Six calls on one LoRA model, three shape buckets: at most three compiles (dynamo may
    make a changed size symbolic and compile fewer), with the eager loop's greedy tokens in
    every call. Row counts 5 and 6 share the bucket of 8, a call with bob's
    rows alone or alice's reuses the grouped forward of every adapter, and widths and budgets
    whose sums stay under 64 share one cache length."""
    model = _lora_model()
    calls = [  # (requests, (rows, cache length, LoRA rows)) worked out by hand
        ([req([5, 9, 14, 3], 2, "alice"), req([7, 21], 2, "bob"), req([30, 2], 1)], (8, 64)),
        ([req([7, 21, 4], 3, "bob", budget=10)], (4, 64)),
        ([req([5, 9], 4, "alice", budget=5), req([30, 2, 8, 11, 19, 4, 6], 2, "bob")], (8, 64)),
        ([req([5, 9, 14, 3], 4, "bob", budget=61)], (4, 96)),  # width 4 + 61 = 65 -> 96
        ([req([1, 2, 3], 1, "alice"), req([4], 2, "bob"), req([5, 6], 2, "alice")], (8, 64)),
        ([req([8, 8, 8], 2, "alice"), req([9, 9], 1, "bob")], (4, 64)),
    ]
    for reqs, _ in calls:
        ref = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error", DecodeFallbackWarning)
            fast = fast_decode.generate(model, reqs, [0], 0, ignore_eos=True, compile=True)
        assert tokens(fast) == tokens(ref)
    buckets = {(*shape, True) for _, shape in calls}
    assert len(buckets) == 3
    assert 1 <= counter.frame_count <= 3
    assert sorted(fast_decode._STATES[model].shapes) == sorted(buckets)
    assert fast_decode.stats(model)["shapes"] == 3
    assert fast_decode.stats(model)["eager_calls"] == 0
    fast_decode.release(model)


def test_switching_the_active_adapter_between_calls_does_not_recompile(counter):
    """The update makes each agent's adapter active in turn, so every rollout starts with another
    one active. Under the grouped forward each row takes its own adapter: the active one must
    not be part of the compiled step (a guard on its name recompiled the step at the second
    rollout, about a minute at 1.5B on a GPU)."""
    model = _lora_model()
    reqs = [req([5, 9, 14, 3], 2, "alice"), req([7, 21], 2, "bob")]
    ref = tokens(generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True))
    for active in ("alice", "bob", "alice", "bob"):
        model.set_adapter(active)
        with warnings.catch_warnings():
            warnings.simplefilter("error", DecodeFallbackWarning)
            fast = fast_decode.generate(model, reqs, [0], 0, ignore_eos=True, compile=True)
        assert tokens(fast) == ref
        assert model.active_adapter == active  # the caller's choice is left as it was
    assert counter.frame_count == 1
    fast_decode.release(model)


def test_shared_rows_compile_once_and_give_the_eager_tokens(counter):
    model = load_model("tiny-qwen2")
    for n, budget in ((3, 12), (4, 9), (2, 12)):  # rows 3 and 4: bucket 4; 2: bucket 2
        reqs = [req([5, 9, 14, 3], n, budget=budget), req([7, 21], 1, budget=7)]
        ref = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
        assert tokens(fast_decode.generate(model, reqs, [0], 0, True, compile=True)) == tokens(ref)
    assert 1 <= counter.frame_count <= 2
    fast_decode.release(model)


def test_separate_models_compile_their_own_steps_without_sharing_a_budget(counter):
    """Separate policies: two models of the same shape, each with max_shapes=1, both compiled
    (one code object per model: dynamo's limit counts per model, not across them)."""
    models = [load_model("tiny-llama"), load_model("tiny-llama")]
    with torch.no_grad():
        models[1].lm_head.weight.mul_(-1.0)  # the two policies differ
    reqs = [req([5, 9, 14, 3], 3), req([7, 21], 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DecodeFallbackWarning)
        for model in models + models:
            fast = fast_decode.generate(model, reqs, [0], 0, True, compile=True, max_shapes=1)
            ref = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
            assert tokens(fast) == tokens(ref)
    assert counter.frame_count == 2
    for model in models:
        fast_decode.release(model)


def test_a_shape_beyond_the_budget_runs_eagerly_with_one_warning(counter):
    model = load_model("tiny-llama")
    first = [req([5, 9, 14, 3], 2)]
    fast_decode.generate(model, first, [0], 0, True, compile=True, max_shapes=1)
    bigger = [req([5, 9, 14, 3], 3)]  # 3 rows: bucket 4, a second shape
    ref = generate(model, bigger, eos_ids=[0], pad_id=0, ignore_eos=True)
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fast = fast_decode.generate(model, bigger, [0], 0, True, compile=True, max_shapes=1)
        assert tokens(fast) == tokens(ref)
        messages = [str(w.message) for w in caught if w.category is DecodeFallbackWarning]
        if _ == 0:  # once, naming the shape and the knob
            assert len(messages) == 1
            assert "4 rows x 64 cache positions" in messages[0]
            assert "generation.fast_decode_max_shapes=1" in messages[0]
        else:
            assert messages == []
    assert counter.frame_count == 1
    assert fast_decode.stats(model) == {
        "shapes": 1.0,
        "compile_s": fast_decode.stats(model)["compile_s"],
        "eager_calls": 2.0,
        "captures": 0.0,
        "capture_s": 0.0,
    }
    fast_decode.release(model)


def test_dynamos_recompile_limit_is_detected_and_warned_not_silent(counter):
    """A recompile dynamo makes on its own, for a shape already compiled (here: the model's
    attention implementation switched, which its guards check), would hit its limit and
    quietly run eagerly; here it warns, naming the knob, and the tokens stay right. (Rebuilt
    grouped LoRA forwards, by contrast, recompile nothing: same code, same tensor shapes.)"""
    from teamrl.generation import multi_lora

    model = _lora_model()
    reqs = [req([5, 9, 14, 3], 2, "alice"), req([7, 21], 2, "bob")]
    ref = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
    fast_decode.generate(model, reqs, [0], 0, True, compile=True, max_shapes=1)
    multi_lora.release(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DecodeFallbackWarning)
        fast_decode.generate(model, reqs, [0], 0, True, compile=True, max_shapes=1)
    assert counter.frame_count == 1
    model.set_attn_implementation("eager")
    with pytest.warns(DecodeFallbackWarning, match="recompile limit.*fast_decode_max_shapes=1"):
        fast = fast_decode.generate(model, reqs, [0], 0, True, compile=True, max_shapes=1)
    assert tokens(fast) == tokens(ref)
    assert counter.frame_count == 1
    fast_decode.release(model)


def test_the_config_compiles_on_cpu_when_asked_and_passes_the_shape_budget(counter):
    """generation.fast_decode_compile=on compiles the step on a CPU engine (the fast path with
    it), with fast_decode_max_shapes as the budget; 'auto' keeps a CPU engine on the reference
    loop."""
    from teamrl.config import ConfigError, GenerationConfig, load_config
    from teamrl.generation.backend import EngineSpec, make_backend

    model = load_model("tiny-llama")
    spec = EngineSpec(model, None, [0], 0, "tiny-llama", "float32", "cpu", [])
    cfg = GenerationConfig(fast_decode_compile="on", fast_decode_max_shapes=1)
    on, auto = make_backend(cfg, spec), make_backend(GenerationConfig(), spec)
    assert on.fast and on.compile and not auto.fast and not auto.compile
    auto.generate([req([5, 9, 14, 3], 2)], ignore_eos=True)
    assert counter.frame_count == 0
    on.generate([req([5, 9, 14, 3], 2)], ignore_eos=True)
    assert counter.frame_count == 1
    with pytest.warns(DecodeFallbackWarning, match="fast_decode_max_shapes=1"):
        on.generate([req([5, 9, 14, 3], 3)], ignore_eos=True)
    with pytest.raises(ConfigError, match="generation.fast_decode_max_shapes"):
        load_config(None, ["generation.fast_decode_max_shapes=0"])
    fast_decode.release(model)


def test_the_compiled_step_under_cpu_prepack_multiplies_by_the_weights(counter, monkeypatch):
    """generation.cpu_prepack wraps every large linear while sampling, with copies repacked at
    every call (new tensors): they neither break the compiled graph nor recompile it. (Inside
    it the wrapper multiplies by the weight itself; the inductor test below needs that.)"""
    from teamrl.generation import cpu_prepack

    if not cpu_prepack.available():
        pytest.skip("no oneDNN linear operators in this PyTorch build")
    monkeypatch.setattr(cpu_prepack, "MIN_PACKED_ELEMENTS", 0)  # pack the tiny model's linears
    model = load_model("tiny-llama")
    reqs = [req([5, 9, 14, 3], 2), req([7, 21], 1)]
    ref = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
    for _ in range(2):  # trainable weights: repacked (new tensors) at every call
        with cpu_prepack.prepacked(model), warnings.catch_warnings():
            warnings.simplefilter("error", DecodeFallbackWarning)
            fast = fast_decode.generate(model, reqs, [0], 0, True, compile=True)
        assert tokens(fast) == tokens(ref)
    assert counter.frame_count == 1
    fast_decode.release(model)


@pytest.mark.slow
def test_inductor_compiled_step_gives_the_eager_greedy_tokens_on_cpu(monkeypatch, tmp_path):
    """The real CPU compiler (inductor's C++ kernels) on a tiny model: LoRA rows beside a base
    row, under cpu_prepack (which inductor could not lower: the wrapper must multiply by the
    weight itself when compiling), twice: the second call compiles nothing new."""
    from teamrl.generation import cpu_prepack

    monkeypatch.setattr(cpu_prepack, "MIN_PACKED_ELEMENTS", 0)  # pack the tiny model's linears
    # a cache of this test's own: inductor's shared /tmp cache keeps precompiled headers built
    # for the ISA of an earlier process (another ATEN_CPU_CAPABILITY), which then fail to build
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    model = _lora_model()
    reqs = [req([5, 9, 14, 3], 2, "alice"), req([7, 21], 1, "bob"), req([30, 2], 1)]
    ref = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
    for _ in range(2):
        with cpu_prepack.prepacked(model), warnings.catch_warnings():
            warnings.simplefilter("error", DecodeFallbackWarning)
            fast = fast_decode.generate(model, reqs, [0], 0, True, compile=True)
        assert tokens(fast) == tokens(ref)
    assert fast_decode.stats(model)["shapes"] == 1
    fast_decode.release(model)
    torch._dynamo.reset()


def test_the_trainer_compiles_once_and_logs_it_as_time_compile(counter, tmp_path):
    """A LoRA team's rollouts compile the decode step once (the update switching the active
    adapter between them does not recompile it), and the step that compiled logs the seconds
    as time/compile; the next logs 0."""
    from helpers.runs import tiny_overrides

    from teamrl.config import load_config
    from teamrl.trainer import Trainer

    cfg = load_config(None, tiny_overrides("lora", 3, **{"generation.fast_decode_compile": "on"}))
    tr = Trainer(cfg, run_dir=tmp_path)
    first, second, third = (tr.train_step() for _ in range(3))
    assert first["time/compile"] > 0
    assert first["time/compile"] <= first["time/generate"]
    assert second["time/compile"] == third["time/compile"] == 0.0
    assert counter.frame_count == 1
