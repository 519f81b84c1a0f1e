"""train.max_tokens_per_micro_batch: the update's forward chunks cut by a token budget.

Hand-computed cuts on small cases, a randomized check of the bounds, every forward of a real
update within the budget (prefix sharing and gradient checkpointing), the gradient equal to the
uncut one (the exactness criterion of tests/exactness.py), the one-line config error, the
warning for a sample over the budget, and the preflight's estimate under the budget."""

from __future__ import annotations

import random

import pytest
import torch
from exactness import SGD, assert_same_update, snapshot
from helpers.runs import tiny_overrides

import teamrl.update.policy as update_mod
from teamrl.config import ConfigError, load_config
from teamrl.credit.advantages import compute_advantages
from teamrl.preflight import micro_batch_bytes, micro_batch_tokens
from teamrl.sample import Sample
from teamrl.trainer import Trainer
from teamrl.update.micro_batches import by_prompt, forward_tokens, micro_batches, oversized


def sample(prompt: list[int], completion: int, agent: str = "a") -> Sample:
    return Sample(
        agent=agent,
        policy=agent,
        turn=0,
        group=tuple(prompt),
        prompt_ids=list(prompt),
        completion_ids=[7] * completion,
        sampler_logprobs=[0.0] * completion,
    )


A, B = list(range(1, 11)), [21, 22, 23, 24]  # prompts of 10 and 4 tokens


def names(chunks, index):
    return [[index[id(s)] for s in c] for c in chunks]


def test_forward_tokens_by_hand():
    a3, a2, b5 = sample(A, 3), sample(A, 2), sample(B, 5)
    assert forward_tokens([a3]) == 10 + 3
    assert forward_tokens([a3, a2]) == 1 * 10 + 2 * 3  # one prompt, run once
    assert forward_tokens([a3, a2, b5]) == 2 * 10 + 3 * 5  # padded to the longest of each
    assert forward_tokens([a3, a2, b5], shares_prefix=False) == 3 * (10 + 5)
    assert forward_tokens([sample(B, 0)]) == 4 + 1  # collate pads an empty completion to 1
    assert forward_tokens([]) == 0


def test_cuts_by_hand_with_and_without_prefix_sharing():
    mb = [sample(A, 3), sample(B, 5), sample(A, 2), sample(B, 1)]
    index = {id(s): n for s, n in zip(mb, ["A3", "B5", "A2", "B1"])}
    # a prompt's samples are put together (first-seen order, shortest completion first), then
    # packed under 20 tokens: [A2, A3] = 10 + 2*3 = 16; + B1 would be 2*10 + 3*3 = 29;
    # [B1, B5] = 4 + 2*5 = 14
    assert [index[id(s)] for s in by_prompt(mb)] == ["A2", "A3", "B1", "B5"]
    assert names(micro_batches(mb, None, 20), index) == [["A2", "A3"], ["B1", "B5"]]
    # no cache (gradient checkpointing): [A2] 12, [A2, A3] 2*13 = 26 > 20; [A3] + B1 =
    # 2*(10 + 3) > 20; [B1, B5] = 2*(4 + 5) = 18
    got = micro_batches(mb, None, 20, shares_prefix=False)
    assert names(got, index) == [["A2"], ["A3"], ["B1", "B5"]]
    # both bounds: 1 sample a chunk whatever the budget
    assert names(micro_batches(mb, 1, 1000), index) == [["A2"], ["A3"], ["B1"], ["B5"]]
    # no token budget: slices in prompt order (a prompt split over chunks runs in each), the
    # minibatch as it is when it fits in one
    assert names(micro_batches(mb, 3), index) == [["A2", "A3", "B1"], ["B5"]]
    assert names(micro_batches(mb, 2), index) == [["A2", "A3"], ["B1", "B5"]]
    assert names(micro_batches(mb), index) == [["A3", "B5", "A2", "B1"]]


def test_a_sample_over_the_budget_runs_alone_and_is_reported():
    mb = [sample(A, 2), sample(A, 30, agent="tool"), sample(A, 2)]
    chunks = micro_batches(mb, None, 20)
    # the short ones first, together (10 + 2*2 = 14); the long one alone: 10 + 30 = 40 > 20
    assert [[id(s) for s in c] for c in chunks] == [[id(mb[0]), id(mb[2])], [id(mb[1])]]
    assert oversized(chunks, 20) == ("tool", 40)
    assert oversized(chunks, 40) is None and oversized(chunks, None) is None


@pytest.mark.parametrize("shares", [True, False])
def test_random_minibatches_respect_both_bounds_and_keep_every_sample_once(shares):
    rng = random.Random(0)
    prompts = [[rng.randrange(100) for _ in range(rng.randint(1, 40))] for _ in range(6)]
    for trial in range(200):
        mb = [sample(rng.choice(prompts), rng.randint(0, 30)) for _ in range(rng.randint(1, 24))]
        budget, size = rng.randint(1, 150), rng.choice([None, 1, 2, 5])
        chunks = micro_batches(mb, size, budget, shares)
        assert sorted(id(s) for c in chunks for s in c) == sorted(id(s) for s in mb)
        for c in chunks:
            assert len(c) <= (size or len(mb))
            assert len(c) == 1 or forward_tokens(c, shares) <= budget, (trial, c)
        # greedy: a chunk closed only because the next sample would not fit
        for c, nxt in zip(chunks, chunks[1:]):
            assert len(c) == size or forward_tokens([*c, nxt[0]], shares) > budget


# --- the budget in a real update --------------------------------------------------------------


def ragged(**extra):
    """A tiny team whose rows differ in length (alice 8 tokens, bob 5), 2 prompts of G = 4."""
    items = {
        "team.agents": "[{name: alice, max_completion_length: 8}, "
        "{name: bob, max_completion_length: 5}]",
        "train.prompts_per_step": 2,
        **extra,
    }
    return load_config(None, tiny_overrides("shared", 1, **items))


def spy_batches(monkeypatch):
    """Every batch the update scores: (rows, distinct prompts, P, C, grad enabled, the packed
    row's tokens or None)."""
    seen = []
    real = update_mod.score_tokens

    def score(model, batch, **kw):
        b, c = batch.completion_mask.shape
        if batch.packed is None:
            u, p = batch.prompt_ids.shape
            packed = None
        else:  # the prompts' count and longest, from the layout's prompt segments
            prompts = batch.packed.stacks[0].q
            u, p, packed = prompts.shape[0], prompts.shape[1], batch.packed.tokens
        seen.append((b, u, p, c, torch.is_grad_enabled(), packed))
        return real(model, batch, **kw)

    monkeypatch.setattr(update_mod, "score_tokens", score)
    return seen


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_every_forward_of_an_update_keeps_the_budget(tmp_path, monkeypatch, checkpointing, packed):
    extra = {
        "train.num_mini_batches": 2,
        "model.gradient_checkpointing": checkpointing,
        "train.padding_free": packed,
    }
    probe = Trainer(ragged(**extra), run_dir=tmp_path / "probe")
    samples = probe.rollout(probe.data.next(2)).samples
    prompt = max(len(s.prompt_ids) for s in samples)
    # about 2-3 rows
    budget = prompt + 3 * 8 if packed or not checkpointing else 2 * (prompt + 8)
    cut = ragged(**extra, **{"train.max_tokens_per_micro_batch": budget})
    tr = Trainer(cut, run_dir=tmp_path / "r")
    seen = spy_batches(monkeypatch)
    tr.train_step()
    grad = [x for x in seen if x[4]]
    assert sum(b for b, *_ in grad) == 16  # every sample trained on, once
    assert len(grad) > 2  # the budget cut the two minibatches
    for b, u, p, c, _, row in seen:
        if packed:  # the packed row: each distinct prompt once and every completion, no pad
            assert row is not None and row <= u * p + b * c
            tokens = row
        else:
            tokens = b * (p + c) if checkpointing else u * p + b * c
        assert b == 1 or tokens <= budget, (b, u, p, c, budget)


def planted_step(tmp_path, cfg):
    """One update of the shared policy on a rollout with planted advantages, from the seed's
    initial weights: (before, after)."""
    tr = Trainer(cfg, run_dir=tmp_path)
    samples = tr.rollout(tr.data.next(cfg.train.prompts_per_step)).samples
    compute_advantages(samples, cfg.algorithm.baseline, cfg.algorithm.scale_rewards)
    signal = [1.0, -0.5, 0.25, -1.0, 0.75]
    for i, s in enumerate(samples):
        s.advantage = signal[i % len(signal)]  # a signal whatever the rewards were
    pol = tr.team.policies["shared"]
    before = snapshot(pol)
    tr.update(pol, samples)
    return before, snapshot(pol)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_the_cut_update_equals_the_uncut_one(tmp_path, monkeypatch, loss_type):
    extra = {
        "algorithm.loss_type": loss_type,
        "algorithm.num_iterations": 2,  # pass 2 meets other chunks, with old log-probs kept
        "train.num_mini_batches": 2,
        **SGD,
    }
    before, want = planted_step(tmp_path / "whole", ragged(**extra))
    seen = spy_batches(monkeypatch)
    cut = ragged(**extra, **{"train.max_tokens_per_micro_batch": 40})
    before_cut, got = planted_step(tmp_path / "cut", cut)
    assert all(torch.equal(before[k], before_cut[k]) for k in before)  # same start
    assert len([x for x in seen if x[4]]) >= 6  # 2 passes x 2 minibatches, cut further
    assert_same_update(got, want, before, f"{loss_type} under a 40-token budget")
    assert max(float((want[k] - before[k]).abs().max()) for k in want) > 1e-4


def test_a_budget_below_one_sample_warns_once_and_still_trains(tmp_path):
    tr = Trainer(ragged(**{"train.max_tokens_per_micro_batch": 1}), run_dir=tmp_path)
    with pytest.warns(UserWarning, match=r"train\.max_tokens_per_micro_batch=1: a sample of agent"):
        m = tr.train_step()
    assert m["grad_norm/shared"] > 0


@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_bad_budget_is_a_one_line_error_naming_the_field(value):
    with pytest.raises(ConfigError) as err:
        load_config(
            None, tiny_overrides("shared", 1, **{"train.max_tokens_per_micro_batch": value})
        )
    assert "train.max_tokens_per_micro_batch" in str(err.value) and value in str(err.value)
    assert "\n" not in str(err.value)


# --- the preflight ----------------------------------------------------------------------------


def test_micro_batch_bytes_by_hand():
    shape = {"layers": 2, "hidden": 4, "inter": 8, "kv_dim": 2, "vocab": 10}
    # 3 rows over 1 prompt of 5 tokens, completions of 2; fp32
    kw = dict(rows=3, prompts=1, prompt_len=5, completion_len=2, nbytes=4)
    tokens = 1 * 5 + 3 * 2
    assert micro_batch_tokens(**kw, checkpointing=False) == tokens
    layer = (16 * 4 + 4 * 8) * 4  # bytes a layer keeps per token
    kv_copies = 3 * 5 * (2 * 2 * 2 * 4)  # each row's copy of its prompt's K and V, per layer
    logits = 3 * 2 * 10 * 4 * 6
    assert micro_batch_bytes(shape, **kw) == tokens * 2 * layer + kv_copies + logits
    # gradient checkpointing: every row in full; each layer's input kept, one layer recomputed
    full = 3 * (5 + 2)
    assert micro_batch_tokens(**kw, checkpointing=True) == full
    want = full * (2 * 4 * 4 + layer) + logits
    assert micro_batch_bytes(shape, **kw, checkpointing=True) == want
    # packed rows (train.padding_free): each prompt once with or without checkpointing, and
    # no sample copies its prompt's cache
    for ckpt in (False, True):
        assert micro_batch_tokens(**kw, checkpointing=ckpt, packed=True) == tokens
    assert micro_batch_bytes(shape, **kw, packed=True) == tokens * 2 * layer + logits
    want = tokens * (2 * 4 * 4 + layer) + logits
    assert micro_batch_bytes(shape, **kw, checkpointing=True, packed=True) == want


def test_the_estimate_shrinks_under_a_token_budget():
    from teamrl.preflight import estimate_memory, meta_model, model_config_of

    four = {"train.prompts_per_step": 4}
    models = {"tiny-llama": meta_model(model_config_of(ragged(**four), "tiny-llama"))}
    whole = estimate_memory(ragged(**four), models, prompt_len=100)
    # the uncut micro-batch: 4 prompts x 2 agents x G = 4 samples, one prompt per agent and
    # tree root: 8 * 100 + 32 * 8 = 1056 forward tokens
    tokens, seq = 8 * 100 + 32 * 8, 100 + 8  # seq: one sample (prompt budget + completion)
    cut = ragged(**four, **{"train.max_tokens_per_micro_batch": 4 * seq})
    cut = estimate_memory(cut, models, 100)
    assert cut.training == pytest.approx(whole.training * 4 * seq / tokens)
    assert cut.weights == whole.weights and cut.generation == whole.generation
    lone = ragged(**four, **{"train.max_tokens_per_micro_batch": 1})
    lone = estimate_memory(lone, models, 100)
    assert lone.training == pytest.approx(whole.training * seq / tokens)  # a sample, not 1 token
    roomy = ragged(**four, **{"train.max_tokens_per_micro_batch": tokens})
    assert estimate_memory(roomy, models, 100).training == whole.training
