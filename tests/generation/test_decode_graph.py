"""The graphed decode step, proved on the CPU with the operator tape (``decode_graph.OpTape``).

The tape records the step's ATen operators once and replays exactly those operators on exactly
those tensors, as a CUDA graph replays its kernels at their addresses: a Python value read at
capture is frozen, a tensor built outside the step is not seen by a replay, and a host read is a
capture error. So if the graphed loop gives the eager loop's greedy tokens under the tape, every
value that changes between steps reaches the step through memory the graph reads (its static
buffers, the cache, the weights). The negative controls show the tape is strict enough to tell:
a step that reads a Python counter replays wrong tokens, one that calls ``.item()`` is refused.
On CUDA, tests/test_cuda.py replays real CUDA graphs.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers.sampling import lora_model, tokens

from teamrl.config.engines import GenerationConfig
from teamrl.generation import decode_graph, fast_decode
from teamrl.generation.fast_decode import DecodeFallbackWarning
from teamrl.generation.hf import generate
from teamrl.generation.types import Request
from teamrl.team.models import load_model


def req(prompt, n, adapter=None, budget=10):
    # Sampled at temperature 1 with a seed, and compared by tokens and log-probs: the tiny
    # models' greedy tokens repeat the last prompt token whatever the positions, so only the
    # log-probs show a step that attends or rotates wrongly.
    return Request(prompt, n=n, temperature=1.0, max_new_tokens=budget, adapter=adapter)


SHARED = [req([5, 9, 14, 3], 2), req([7, 21], 1, budget=6), req([30, 2, 8, 11, 19, 4, 6], 2)]


def graphed(model, reqs, seed=0, **kw):
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DecodeFallbackWarning)  # a refused capture fails here
        return fast_decode.generate(model, reqs, [0], 0, ignore_eos=True, graph=True, **kw)


def eager(model, reqs, seed=0):
    torch.manual_seed(seed)
    return generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)


def same(got, want) -> bool:
    """The same tokens and the same log-probs (to float32 rounding over a longer softmax)."""
    if tokens(got) != tokens(want):
        return False
    a = torch.tensor([lp for per in got for g in per for lp in g.logprobs])
    b = torch.tensor([lp for per in want for g in per for lp in g.logprobs])
    return bool(torch.allclose(a, b, atol=1e-5, rtol=0)) and bool((b < -0.1).any())


def tape_of(model) -> decode_graph.OpTape:
    (entry,) = fast_decode._STATES[model].graphs.values()
    return entry.graph


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_the_replayed_step_gives_the_eager_loops_tokens_and_logprobs(name):
    """Captured at the second step of the first call, replayed at every later step and in the
    later calls of the shape (other prompts, other budgets in the same bucket)."""
    model = load_model(name).eval()
    want = eager(model, SHARED)
    assert same(graphed(model, SHARED), want)
    assert fast_decode.stats(model)["captures"] == 1
    tape = tape_of(model)
    assert tape.replays == 9 - 1  # 10 tokens: 1 from the prefill, 1 warm-up step, 8 replays
    assert len(tape.ops) > 20  # the whole forward was recorded, not a stub
    assert same(graphed(model, SHARED), want)
    other = [req([11, 4], 3, budget=12), req([8, 8, 8], 2, budget=3)]  # 5 rows: 8-row bucket
    assert same(graphed(model, other), eager(model, other))
    assert fast_decode.stats(model)["captures"] == 1  # one graph served all three calls
    assert tape_of(model).replays == 8 + 9 + 11
    fast_decode.release(model)


def mixed():
    return [req([5, 9, 14, 3], 2, "alice"), req([7, 21], 2, "bob"), req([30, 2, 8], 1)]


def test_lora_rows_replay_the_graph_and_follow_the_adapters_weights():
    """Mixed-adapter rows through the grouped LoRA forward: the graph reads the stacks, which
    every call refills in place, so a new mix of rows and an in-place optimizer-like change of
    an adapter both reach the replay without a new capture."""
    model = lora_model().eval()
    assert same(graphed(model, mixed()), eager(model, mixed()))
    swapped = [req([5, 9, 14, 3], 2, "bob"), req([7, 21], 2, None), req([30, 2, 8], 1, "alice")]
    assert same(graphed(model, swapped), eager(model, swapped))
    before = eager(model, mixed())
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B.alice" in n:
                p.mul_(-3.0)
    after = eager(model, mixed())
    assert not same(after, before)  # the change moves alice's sampling
    assert same(graphed(model, mixed()), after)
    assert fast_decode.stats(model)["captures"] == 1
    fast_decode.release(model)


def test_replaced_stacks_or_weights_are_captured_again_not_replayed_stale():
    """A graph points at memory: a call with more rows than the LoRA stacks hold rebuilds them,
    and weights replaced by new tensors (a reload) live elsewhere; both capture anew, and the
    tokens are the eager loop's."""
    model = lora_model().eval()
    assert same(graphed(model, mixed()), eager(model, mixed()))
    big = [req([5, 9, 14, 3], 150, "alice"), req([7, 21], 150, "bob")]  # 300 rows > 256
    assert same(graphed(model, big), eager(model, big))
    assert fast_decode.stats(model)["captures"] == 2
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "q_proj.base_layer.weight" in n:
                p.data = p.data.flip(0).clone()  # new storage, new values
    assert same(graphed(model, mixed()), eager(model, mixed()))
    assert fast_decode.stats(model)["captures"] == 3
    fast_decode.release(model)


def test_separate_models_keep_their_own_graphs():
    a, b = load_model("tiny-llama").eval(), load_model("tiny-qwen2").eval()
    for model in (a, b, a, b):
        assert same(graphed(model, SHARED), eager(model, SHARED))
    assert fast_decode.stats(a)["captures"] == fast_decode.stats(b)["captures"] == 1
    fast_decode.release(a)
    fast_decode.release(b)


def test_a_python_value_read_in_the_step_is_frozen_by_the_replay(monkeypatch):
    """Negative control: a step that takes its positions from a Python counter instead of the
    position buffer is right eagerly and wrong replayed (the tape froze the counter at capture,
    as a CUDA graph freezes it): the tape can tell a capturable step from one that is not."""
    real = fast_decode._decode_step
    model = load_model("tiny-llama").eval()
    same_width = [req([5, 9, 14, 3], 3, budget=12)]  # one prompt: every row at one position
    want = eager(model, same_width)
    # positions from a Python int kept beside the step (as a cache counter kept in Python
    # would be), not from the position buffer the loop fills
    counter = {"pos": None}

    def python_counter_step(model, ids, mask, position, cache_kw):
        counter["pos"] += 1
        return real(model, ids, mask, torch.full_like(position, counter["pos"]), cache_kw)

    monkeypatch.setattr(fast_decode, "_decode_step", python_counter_step)
    counter["pos"] = 3
    torch.manual_seed(0)
    assert same(fast_decode.generate(model, same_width, [0], 0, ignore_eos=True), want)
    counter["pos"] = 3
    torch.manual_seed(0)
    frozen = fast_decode.generate(model, same_width, [0], 0, ignore_eos=True, graph=True)
    assert not same(frozen, want)
    fast_decode.release(model)


def test_a_step_that_reads_the_host_is_refused_with_one_warning_and_runs_eagerly(monkeypatch):
    """``.item()`` in the step: the capture fails (a CUDA capture cannot synchronise), the call
    warns once naming why, finishes eagerly with the right tokens, and the model does not try
    to capture again."""
    real = fast_decode._decode_step

    def syncing_step(model, ids, mask, position, cache_kw):
        if float(mask.sum()) < 0:  # a host read that changes nothing
            raise AssertionError
        return real(model, ids, mask, position, cache_kw)

    model = load_model("tiny-llama").eval()
    want = eager(model, SHARED)
    monkeypatch.setattr(fast_decode, "_decode_step", syncing_step)
    with pytest.warns(DecodeFallbackWarning, match="reads a device value on the host"):
        torch.manual_seed(0)
        got = fast_decode.generate(model, SHARED, [0], 0, ignore_eos=True, graph=True)
    assert same(got, want)
    assert same(graphed(model, SHARED), want)  # no second warning (it would raise here)
    stats = fast_decode.stats(model)
    assert stats["captures"] == 0 and stats["eager_calls"] >= 1
    fast_decode.release(model)


def test_the_tape_puts_back_what_a_capture_wrote():
    """A capture runs nothing (as on CUDA): the tensors the recorded step wrote in place are
    as they were before it, and the first replay writes them."""
    buf = torch.zeros(3)
    counter = torch.tensor(1)
    tape = decode_graph.OpTape()

    def step():
        buf.index_copy_(0, counter.view(1), torch.ones(1) * 7)
        counter.add_(1)
        return buf * 2

    tape.capture(step)
    assert buf.tolist() == [0, 0, 0] and int(counter) == 1
    assert tape.replay().tolist() == [0, 14, 0]
    assert tape.replay().tolist() == [0, 14, 14]
    assert int(counter) == 3


def test_the_config_graphs_the_step_where_asked():
    from teamrl.generation.backend import make_backend
    from teamrl.generation.types import EngineSpec

    model = load_model("tiny-llama")
    spec = EngineSpec(
        model=model,
        tokenizer=None,
        eos_ids=[0],
        pad_id=0,
        model_path="tiny-llama",
        dtype="float32",
        device="cpu",
        adapters=[],
    )
    cpu_auto = make_backend(GenerationConfig(), spec)
    assert (cpu_auto.fast, cpu_auto.graph, cpu_auto.compile) == (False, False, False)
    on = make_backend(GenerationConfig(fast_decode_graph="on"), spec)
    assert (on.fast, on.graph, on.compile) == (True, True, False)
    both = make_backend(GenerationConfig(fast_decode_graph="on", fast_decode_compile="on"), spec)
    assert (both.graph, both.compile) == (False, True)  # a compiled step graphs itself
