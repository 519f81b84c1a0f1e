"""The sampler's inverse-CDF draw: the categorical it claims, never a zero-probability token."""

from __future__ import annotations

import torch

from teamrl.generation import hf
from teamrl.generation.hf import draw, sample_tokens


def test_frequencies_match_the_probabilities_and_zeros_are_never_drawn():
    torch.manual_seed(0)
    p = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0])
    n = 200_000
    counts = torch.bincount(draw(p.repeat(n, 1)), minlength=6).double()
    assert counts[[0, 2, 5]].sum() == 0
    sd = (n * p * (1 - p)).sqrt()
    assert ((counts - n * p).abs() <= 5 * sd + 1e-9).all(), counts  # within 5 sigma


def test_rows_are_drawn_from_their_own_unnormalised_rows():
    torch.manual_seed(1)
    probs = torch.tensor([[0.0, 0.0, 3.0], [2.0, 0.0, 0.0], [0.0, 1e-30, 0.0]])
    for _ in range(50):
        assert draw(probs).tolist() == [2, 0, 1]
    half = torch.tensor([[1.0, 1.0]]).repeat(20_000, 1)  # sums to 2: u scales by the total
    assert abs(draw(half).double().mean().item() - 0.5) < 0.02


def test_a_uniform_that_rounds_up_to_the_total_lands_on_the_last_positive_token(monkeypatch):
    """``rand * total`` can round up to the total itself, past every token's interval: the draw
    keeps u under the total, so it lands on the last token of positive probability, never on
    the zero-probability tokens after it (a search at u = total would return the vocabulary's
    end)."""
    probs = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.25, 0.0, 0.75, 0.0]])
    monkeypatch.setattr(hf.torch, "rand", lambda *a, **kw: torch.ones(*a, **kw))
    assert draw(probs).tolist() == [1, 1, 2]
    monkeypatch.setattr(hf.torch, "rand", lambda *a, **kw: torch.zeros(*a, **kw))
    assert draw(probs).tolist() == [0, 1, 0]  # u = 0: the first token of positive probability


def test_top_p_and_top_k_sets_bound_the_draw_and_logprobs_are_the_samplers():
    torch.manual_seed(2)
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, -3.0]]).repeat(4000, 1)
    n = logits.shape[0]
    temp, top_p, top_k = torch.full((n,), 0.7), torch.full((n,), 0.8), torch.zeros(n).long()
    tok, lp = sample_tokens(logits, temp, top_p, top_k)
    scaled = logits[0] / 0.7
    p = scaled.softmax(-1)
    keep = (p.cumsum(-1) - p) < 0.8  # sorted already: smallest prefix reaching 0.8
    assert set(tok.tolist()) <= set(torch.nonzero(keep).flatten().tolist())
    kept = scaled.masked_fill(~keep, float("-inf")).log_softmax(-1)
    torch.testing.assert_close(lp, kept[tok])
    top2 = sample_tokens(logits, torch.ones(n), torch.ones(n), torch.full((n,), 2))[0]
    assert set(top2.tolist()) == {0, 1}


def test_greedy_rows_take_the_argmax_beside_sampled_rows_at_temperature_one():
    torch.manual_seed(3)
    logits = torch.tensor([[0.0, 5.0, 1.0], [0.0, 5.0, 1.0]]).repeat(500, 1)
    temp = torch.tensor([0.0, 1.0]).repeat(500)
    tok, lp = sample_tokens(logits, temp, torch.ones(1000), torch.zeros(1000).long())
    assert (tok[0::2] == 1).all() and (lp[0::2] == 0).all()
    assert set(tok[1::2].tolist()) == {0, 1, 2}  # sampled, not greedy
    torch.testing.assert_close(lp[1::2], logits[1].log_softmax(-1)[tok[1::2]])
