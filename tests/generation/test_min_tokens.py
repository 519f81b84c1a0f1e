"""``team.agents[i].min_completion_length`` (a request's ``min_new_tokens``): neither EOS nor a
stop string ends a completion before it, and a stop string written before it is not where the
reply ends or is cut."""

from __future__ import annotations

import math

import pytest
import torch

from teamrl.config import ConfigError, load_config
from teamrl.generation import fast_decode, stop_end, stop_floor
from teamrl.generation.hf import Batch, Decoded, generate
from teamrl.generation.types import Request
from teamrl.team.models import load_model
from teamrl.team.policies import cut_at_stop

VOCAB = 10
EOS = 3


def decode(ids: list[int]) -> str:
    """A stand-in tokenizer whose text says which tokens were drawn: [5, 9] -> '<5><9>'."""
    return "".join(f"<{i}>" for i in ids)


def scripted(favourites: list[int], runner_up: int = 9) -> list[torch.Tensor]:
    """Greedy logits, one (1, VOCAB) tensor a step: each step's favourite token at 5, the
    runner-up at 4, everything else at 0."""
    out = []
    for fav in favourites:
        row = torch.zeros(1, VOCAB)
        row[0, runner_up] = 4.0
        row[0, fav] = 5.0
        out.append(row)
    return out


def drive(request: Request, steps: list[torch.Tensor], eos=(EOS,)) -> list[int]:
    """Run ``Decoded`` on scripted logits, as a decode loop would; the row's tokens."""
    dec = Decoded(Batch([request], 0, torch.device("cpu")), list(eos), 0, False, "cpu", decode)
    for t, logits in enumerate(steps):
        if dec.sample(t, logits):
            break
    (gen,) = dec.generations()[0]
    return gen.completion_ids


def greedy(least: int, stop=(), budget: int = 12) -> Request:
    return Request([1, 2], temperature=0.0, max_new_tokens=budget, stop=stop, min_new_tokens=least)


def test_eos_is_never_drawn_before_the_minimum():
    # the model wants EOS at every step: without a minimum the row is one EOS token; with a
    # minimum of 4 it draws the runner-up 4 times, then EOS, as vLLM's min_tokens does
    wants_eos = scripted([EOS] * 12)
    assert drive(greedy(0), wants_eos) == [EOS]
    assert drive(greedy(4), wants_eos) == [9, 9, 9, 9, EOS]
    assert drive(greedy(1), wants_eos) == [9, EOS]


def test_a_stop_string_before_the_minimum_neither_ends_the_row_nor_counts_later():
    # token 7 at steps 1 and 5: the stop string '<7>' is written at token 2 (before the
    # minimum of 4) and again at token 6; the row ends at the second
    tokens = [5, 7, 5, 5, 5, 7, 5, 5]
    assert drive(greedy(0, stop=("<7>",)), scripted(tokens)) == [5, 7]
    assert drive(greedy(4, stop=("<7>",)), scripted(tokens)) == [5, 7, 5, 5, 5, 7]
    # one written only before the minimum never ends it: the budget does
    early = [5, 7, 5, 5, 5, 5, 5, 5]
    assert drive(greedy(4, stop=("<7>",), budget=8), scripted(early)) == early


def test_a_stop_string_completed_by_the_minimums_own_token_ends_the_row():
    # '<7><8>' completed by token 4 (the minimum's): its end is past the first 3 tokens' text
    tokens = [5, 5, 7, 8, 5, 5]
    assert drive(greedy(4, stop=("<7><8>",)), scripted(tokens)) == [5, 5, 7, 8]
    # completed by token 3, before the minimum: ignored, as is the rest of it
    tokens = [5, 7, 8, 5, 5, 5]
    assert drive(greedy(4, stop=("<7><8>",), budget=6), scripted(tokens)) == tokens


def test_the_sampled_log_prob_is_the_one_of_the_distribution_without_eos():
    logits = torch.tensor([[0.0, 1.0, 0.5, 3.0]])  # EOS (3) is the favourite
    req = Request([1], n=1, temperature=1.0, max_new_tokens=1, min_new_tokens=1)
    dec = Decoded(Batch([req], 0, torch.device("cpu")), [3], 0, False, "cpu", decode)
    torch.manual_seed(0)
    dec.sample(0, logits)
    (gen,) = dec.generations()[0]
    (token,) = gen.completion_ids
    assert token != 3
    by_hand = {0: 0.0, 1: 1.0, 2: 0.5}
    z = math.log(sum(math.exp(v) for v in by_hand.values()))
    assert gen.logprobs[0] == pytest.approx(by_hand[token] - z, abs=1e-6)


def test_rows_without_a_minimum_are_untouched_and_ignore_eos_ignores_it():
    reqs = [greedy(4), greedy(0)]
    dec = Decoded(Batch(reqs, 0, torch.device("cpu")), [EOS], 0, False, "cpu", decode)
    for t, row in enumerate(scripted([EOS] * 6)):
        if dec.sample(t, row.expand(2, VOCAB)):
            break
    with_min, without = (g[0].completion_ids for g in dec.generations())
    assert with_min == [9, 9, 9, 9, EOS] and without == [EOS]
    dec = Decoded(Batch([greedy(4)], 0, torch.device("cpu")), [EOS], 0, True, "cpu", decode)
    assert dec.min_new is None  # ignore_eos: nothing ends a row early anyway


def test_stop_end_and_the_env_cut_agree_with_the_floor():
    text = "Title\n\nBody one.\n\nMore"
    assert stop_end(text, ["\n\n"]) == 7
    floor = len("Title\n")  # the newline before the minimum, the second after it
    assert stop_end(text, ["\n\n"], floor) == 7  # still completed past the floor
    assert cut_at_stop(text, ["\n\n"], len("Title\n\n")) == "Title\n\nBody one.\n\n"
    assert cut_at_stop(text, ["\n\n"], len(text)) == text
    ids = [5, 7, 5]
    assert stop_floor(decode, ids, 0) == 0 and stop_floor(decode, ids, 1) == 0
    assert stop_floor(decode, ids, 3) == len("<5><7>")


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_model_run_keeps_the_minimum_and_the_rows_without_one(fast, temperature):
    model = load_model("tiny-llama")
    loop = fast_decode.generate if fast else generate
    prompts = [[5, 9, 14, 3], [7, 21]]

    def run(eos, least):
        torch.manual_seed(0)
        reqs = [
            Request(p, n=3, temperature=temperature, max_new_tokens=10, min_new_tokens=m)
            for p, m in zip(prompts, (least, 0))
        ]
        return loop(model, reqs, eos_ids=eos, pad_id=0, decode=decode)

    ref = run([0], 0)
    # make the reference's second token of the first sample an EOS: without a minimum that
    # sample ends there; with a minimum of 6 no sample of the first prompt draws it that early
    eos = [ref[0][0].completion_ids[1]]
    plain = run(eos, 0)
    first = plain[0][0].completion_ids
    assert len(first) <= 2 and first[-1] == eos[0] and not plain[0][0].truncated
    held = run(eos, 6)
    for g in held[0]:
        assert eos[0] not in g.completion_ids[:6]
        assert len(g.completion_ids) >= 6 or g.truncated
    if temperature == 0.0:  # the second prompt has no minimum: as without one
        assert [g.completion_ids for g in held[1]] == [g.completion_ids for g in plain[1]]


def test_the_agent_field_reaches_the_request_and_bad_values_are_one_line():
    from teamrl.team.policies import Team

    with pytest.raises(ConfigError, match=r"min_completion_length: expected <= max_completion"):
        load_config("quickstart", ["team.agents.0.min_completion_length=65"])
    with pytest.raises(ConfigError, match=r"team.agents\[1\].min_completion_length: expected >= 0"):
        load_config("quickstart", ["team.agents.1.min_completion_length=-1"])
    cfg = load_config(
        "quickstart",
        ["model.name_or_path=tiny-llama", "team.agents.1.min_completion_length=48"],
    )
    team = Team(cfg, load_models=False)
    assert team.request("detailed", [1, 2], 2).min_new_tokens == 48
    assert team.request("concise", [1, 2], 2).min_new_tokens == 0
