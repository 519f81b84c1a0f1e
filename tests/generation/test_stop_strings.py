"""Stop strings (``team.agents[i].stop``): a completion ends at the token that completes one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from teamrl.config import ConfigError, load_config
from teamrl.generation import fast_decode
from teamrl.generation.hf import generate
from teamrl.generation.hf_backend import HFBackend
from teamrl.generation.types import EngineSpec, Request
from teamrl.team.models import load_model

PROMPTS = [[5, 9, 14, 3], [7, 21], [30, 2, 8, 11, 19, 4, 6]]


def decode(ids: list[int]) -> str:
    """A stand-in tokenizer whose text says which tokens were drawn: [5, 9] -> '<5><9>'."""
    return "".join(f"<{i}>" for i in ids)


def requests(temperature: float, stop0=()) -> list[Request]:
    """Three prompts; only the first request has stop strings."""
    return [
        Request(prompt_ids=p, n=n, temperature=temperature, max_new_tokens=12, stop=s)
        for p, n, s in zip(PROMPTS, (3, 1, 2), (tuple(stop0), (), ()))
    ]


def first_end(ids: list[int], pattern: list[int]) -> int | None:
    """Length of the shortest prefix of ``ids`` that ends with ``pattern``."""
    for end in range(len(pattern), len(ids) + 1):
        if ids[end - len(pattern) : end] == pattern:
            return end
    return None


def run(model, reqs, seed=0, fast=False, **kw):
    torch.manual_seed(seed)
    loop = fast_decode.generate if fast else generate
    return loop(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=kw.pop("ignore_eos", False), **kw)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("fast", [False, True])
def test_a_stop_string_ends_the_row_at_the_token_that_completes_it(temperature, fast):
    model = load_model("tiny-llama")
    ref = run(model, requests(temperature))
    row0 = ref[0][0].completion_ids
    assert len(row0) == 12  # no EOS in the reference: the stop string alone must end it
    # one token, then two tokens in a row: the row keeps exactly the prefix through the first
    # place where the string is complete, and counts as finished, not truncated
    for pattern in ([row0[4]], [row0[2], row0[3]]):
        stop = ("".join(f"<{t}>" for t in pattern),)
        got = run(model, requests(temperature, stop), decode=decode, fast=fast)
        for r, g in zip(ref[0], got[0]):
            end = first_end(r.completion_ids, pattern)
            want = r.completion_ids if end is None else r.completion_ids[:end]
            assert g.completion_ids == want
            assert g.truncated == (end is None and r.truncated)
            assert len(g.logprobs) == len(want)
            torch.testing.assert_close(
                torch.tensor(g.logprobs), torch.tensor(r.logprobs[: len(want)]), atol=1e-5, rtol=0
            )
        # requests without stop strings are untouched by another request's
        for per_ref, per_got in zip(ref[1:], got[1:]):
            assert [g.completion_ids for g in per_got] == [g.completion_ids for g in per_ref]


def test_stop_strings_are_matched_in_the_completion_only():
    model = load_model("tiny-llama")
    ref = run(model, requests(0.0))
    prompt_token = f"<{PROMPTS[0][0]}>"  # in the prompt; stops only if the completion draws it
    got = run(model, requests(0.0, (prompt_token,)), decode=decode)
    want = ref[0][0].completion_ids
    end = first_end(want, [PROMPTS[0][0]])
    assert got[0][0].completion_ids == (want if end is None else want[:end])


def test_ignore_eos_ignores_stop_strings_and_a_missing_decode_is_refused():
    model = load_model("tiny-llama")
    ref = run(model, requests(0.0))
    stop = (f"<{ref[0][0].completion_ids[1]}>",)
    got = run(model, requests(0.0, stop), decode=decode, ignore_eos=True)
    assert all(len(g.completion_ids) == 12 for per in got for g in per)
    with pytest.raises(ValueError, match="stop strings need the tokenizer's decode"):
        run(model, requests(0.0, stop))


def test_the_hf_backend_decodes_with_the_engines_tokenizer():
    model = load_model("tiny-llama")
    ref = run(model, requests(0.0))
    tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: decode(ids))
    spec = EngineSpec(model, tokenizer, [0], 0, "tiny-llama", "float32", "cpu", [])
    backend = HFBackend(spec)
    stop = (f"<{ref[0][0].completion_ids[3]}>",)
    got = backend.generate(requests(0.0, stop))
    end = first_end(ref[0][0].completion_ids, [ref[0][0].completion_ids[3]])
    assert got[0][0].completion_ids == ref[0][0].completion_ids[:end]
    assert not got[0][0].truncated


def test_agent_stop_strings_reach_the_request_and_empty_ones_are_refused():
    from teamrl.team.policies import Team

    with pytest.raises(ConfigError, match=r"team.agents\[concise\].stop: expected non-empty"):
        load_config("quickstart", ["team.agents.0.stop=['']"])
    cfg = load_config(
        "quickstart",
        [
            "model.name_or_path=tiny-llama",
            "team.agents.0.stop=[']', 'END']",
            "team.agents.1.stop=[]",
        ],
    )
    team = Team(cfg, load_models=False)  # tokenizers and the agent map: what request() reads
    assert team.request("concise", [1, 2], 2).stop == ("]", "END")
    assert team.request("detailed", [1, 2], 2).stop == ()
