"""Packed rows (teamrl.update.packing, train.padding_free): the layout by hand, scores and
gradients equal to the padded path's in float64 (plain, temperatures, truncated scoring, a
zero-length completion, gradient checkpointing, qwen2's biases, routed adapters, a whole
update), and micro-batches filled to the token budget counted in packed tokens."""

from __future__ import annotations

import random

import pytest
import torch
from exactness import SGD, snapshot
from helpers.runs import tiny_overrides
from transformers import AutoModelForCausalLM

from teamrl.config import load_config
from teamrl.sample import Sample
from teamrl.team.models import model_config
from teamrl.team.optim import make_optimizer
from teamrl.team.policies import Team
from teamrl.update.joint import routed_lora
from teamrl.update.losses import collate, score_tokens
from teamrl.update.micro_batches import micro_batches
from teamrl.update.packing import pack, packed_forward, packed_tokens
from teamrl.update.policy import update_policy
from teamrl.update.settings import update_settings


def sample(prompt, completion, temperature=1.0, advantage=0.5, agent="a"):
    n = len(completion)
    return Sample(
        agent=agent,
        policy=agent,
        turn=0,
        group=tuple(prompt),
        prompt_ids=list(prompt),
        completion_ids=list(completion),
        sampler_logprobs=[-0.5] * n,
        advantage=advantage,
        temperature=temperature,
    )


def test_the_layout_by_hand():
    # prompt A = [1 2 3] with completions [7 8] and [9]; prompt B = [4 5] with [6 6 6]; the
    # samples in the order A1, B1, A2
    a1, b1, a2 = sample([1, 2, 3], [7, 8]), sample([4, 5], [6, 6, 6]), sample([1, 2, 3], [9])
    lay = pack([a1, b1, a2])
    # row: A, A1, A2, B, B1 (each prompt once, its completions after it)
    assert lay.input_ids.tolist() == [[1, 2, 3, 7, 8, 9, 4, 5, 6, 6, 6]]
    assert lay.position_ids.tolist() == [[0, 1, 2, 3, 4, 3, 0, 1, 2, 3, 4]]
    assert lay.tokens == 11 == packed_tokens([a1, b1, a2])  # 3 + 2 + 2 + 1 + 3, no pad
    # the logits that predict each completion token: A1's 7 from A's last (2), its 8 from 7 (3);
    # B1's from B's last (7) then its own 8, 9; A2's 9 from A's last (2)
    assert lay.keep.tolist() == [2, 3, 7, 8, 9, 2]
    assert lay.target_ids.tolist() == [7, 8, 6, 6, 6, 9]
    assert lay.rows.tolist() == [0, 0, 1, 1, 1, 2]
    assert lay.cols.tolist() == [0, 1, 0, 1, 2, 0]
    # segments: A (queries and keys 0..2), A1 (queries 3, 4; keys A ++ 3, 4), A2 (query 5;
    # keys A ++ 5), B (6, 7), B1 (queries 8..10; keys B ++ 8..10)
    assert lay.q_lens == [3, 2, 1, 2, 3] and lay.k_lens == [3, 5, 4, 2, 5]
    assert lay.key_positions == [0, 1, 2] + [0, 1, 2, 3, 4] + [0, 1, 2, 5] + [6, 7] + [
        6,
        7,
        8,
        9,
        10,
    ]
    assert lay.key_index is None  # the CUDA path's tensors are made on the way there
    # the stacks: the prompts A, B (3 x 3 queries and keys), then the completions A1, A2, B1
    # (3 queries, 5 keys); A1's first query (token 7 at position 3) sees A and itself, not its
    # own next token; A2's query sees A and itself, never A1
    prompts, completions = lay.stacks
    assert prompts.q.tolist() == [[0, 1, 2], [6, 7, 0]]
    assert completions.q.tolist() == [[3, 4, 0], [5, 0, 0], [8, 9, 10]]
    assert completions.k.tolist() == [[[0, 1, 2, 3, 4], [0, 1, 2, 5, 0], [6, 7, 8, 9, 10]]]
    m = completions.mask[0]
    assert m[0, 0].tolist() == [True, True, True, True, False]
    assert m[0, 1].tolist() == [True] * 5
    assert m[1, 0].tolist() == [True, True, True, True, False]
    assert m[0, 2].tolist() == [True, False, False, False, False]  # a pad query: key 0 only
    assert prompts.mask[0, 1, 1].tolist() == [True, True, False]  # B's second token
    # every row position's output comes from exactly one (stack, segment, query) slot
    flat = torch.cat([prompts.q.reshape(-1), completions.q.reshape(-1)])
    assert len(set(lay.stack_out.tolist())) == lay.tokens
    assert [int(flat[slot]) for slot in lay.stack_out.tolist()] == list(range(lay.tokens))


def test_adapters_do_not_share_a_prompt():
    same = [sample([1, 2], [3]), sample([1, 2], [4])]
    assert pack(same).tokens == 4  # one prompt
    lay = pack(same, route=[0, 1])
    assert lay.tokens == 6  # the prompt once per adapter
    assert lay.token_route.tolist() == [[0, 0, 0, 1, 1, 1]]


def ragged(rng: random.Random, vocab: int = 60) -> list[Sample]:
    """Three prompts of 3, 5, 9 tokens, three completions each of 0..7 tokens (one empty),
    temperatures 1 and 0.7, in a shuffled order."""
    out = []
    for p, plen in enumerate((3, 5, 9)):
        prompt = [rng.randrange(3, vocab) for _ in range(plen)]
        for g in range(3):
            n = 0 if (p, g) == (1, 0) else rng.randrange(1, 8)
            comp = [rng.randrange(3, vocab) for _ in range(n)]
            out.append(sample(prompt, comp, temperature=0.7 if g == 1 else 1.0, advantage=g - 1.0))
    rng.shuffle(out)
    return out


def tiny(name: str = "tiny-llama", checkpointing: bool = False):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(model_config(name)).double()
    if checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    return model


def scored(model, batch, **kw):
    """(scores, every parameter's gradient) of a weighted sum of the log-probs."""
    model.zero_grad(set_to_none=True)
    ctx = packed_forward(model) if batch.packed is not None else torch.enable_grad()
    with ctx:  # on through the backward: checkpointing recomputes the forward there
        s = score_tokens(model, batch, **kw)
        weight = torch.arange(1, s.logp.numel() + 1, dtype=s.logp.dtype).reshape(s.logp.shape)
        (s.logp * weight).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return s, grads


def assert_same(padded, packed, mask):
    (sa, ga), (sb, gb) = padded, packed
    assert torch.allclose(sa.logp, sb.logp, rtol=0, atol=1e-12)
    if sa.entropy is not None:
        assert torch.allclose(sa.entropy[mask], sb.entropy[mask], rtol=0, atol=1e-12)
        assert (sb.entropy[~mask] == 0).all()
    if sa.full_logp is not None:
        assert torch.allclose(sa.full_logp, sb.full_logp, rtol=0, atol=1e-12)
    assert ga.keys() == gb.keys() and len(ga) > 0
    for n in ga:
        scale = ga[n].abs().max().clamp_min(1e-30)
        assert torch.allclose(ga[n], gb[n], rtol=0, atol=1e-10 * scale), n


@pytest.mark.parametrize(
    "name,checkpointing,kw",
    [
        ("tiny-llama", False, {"with_entropy": True}),
        ("tiny-qwen2", False, {"with_entropy": True}),  # biases on q, k, v
        ("tiny-llama", True, {}),  # gradient checkpointing: the forward recomputed
        ("tiny-llama", False, {"truncate": True, "with_full": True, "with_entropy": True}),
    ],
)
def test_packed_scores_and_gradients_equal_the_padded_ones_in_float64(name, checkpointing, kw):
    model = tiny(name, checkpointing)
    rows = ragged(random.Random(1))
    padded, packed = collate(rows, 0), collate(rows, 0, packed=True)
    if kw.get("truncate"):
        for b in (padded, packed):
            b.top_p = torch.tensor([0.9, 1.0, 0.8] * 3, dtype=torch.float64)
            b.top_k = torch.tensor([0, 5, 0] * 3)
            b.max_top_k, b.nucleus = 5, True
    # the packed row holds exactly the real tokens: each prompt once and every completion
    assert packed.packed.tokens == 3 + 5 + 9 + sum(len(s.completion_ids) for s in rows)
    assert packed.packed.tokens < padded.prompt_ids.numel() + padded.completion_ids.numel()
    mask = padded.completion_mask > 0
    # the reference: the padded path with the KV cache (under checkpointing the padded path
    # reruns every prompt, whose float64 gradients differ from its own cached path's by ~1e-8
    # of their scale; the packed path equals the cached one there too)
    reference = scored(tiny(name), padded, **kw)
    assert_same(reference, scored(model, packed, **kw), mask)


def test_routed_adapters_packed_equal_padded_in_float64():
    from peft import LoraConfig, get_peft_model

    model = tiny()
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])
    model = get_peft_model(model, cfg, adapter_name="first")
    model.add_adapter("second", cfg)
    torch.manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.normal_(0, 0.1)
            p.requires_grad_("lora_" in n)
    rows = ragged(random.Random(2))
    route = [i % 2 for i in range(len(rows))]  # the same prompt through both adapters
    padded, packed = collate(rows, 0, route), collate(rows, 0, route, packed=True)
    mask = padded.completion_mask > 0
    out = []
    for batch in (padded, packed):
        with routed_lora(model, ["first", "second"], "model") as rt:
            out.append(scored(model, batch, route=rt, with_entropy=True))
    assert_same(*out, mask)
    assert any("lora_A.second" in n for n in out[1][1])  # both adapters got gradients


def test_a_whole_update_packed_equals_padded_in_float64(tmp_path):
    """update_policy from the same weights on the same ragged samples, two passes and two
    minibatches cut into chunks, one packed and one padded: the same weights after it."""
    after = []
    for packed in (False, True):
        extra = {
            **SGD,
            "algorithm.num_iterations": 2,
            "train.num_mini_batches": 2,
            "train.micro_batch_size": 3,
            "train.padding_free": packed,
        }
        cfg = load_config(None, tiny_overrides("shared", 1, **extra))
        torch.manual_seed(0)
        team = Team(cfg)
        pol = team.policies[team.policy_of["alice"]]
        pol.model.double()
        make_optimizer(pol, cfg)
        rows = ragged(random.Random(3))
        for s in rows:
            s.agent, s.policy = "alice", pol.name
        before = snapshot(pol)
        out = update_policy(
            pol, rows, update_settings(cfg, pol.agents), step=0, max_completion_length=8
        )
        assert out.stepped
        after.append(snapshot(pol))
    moved = 0
    for n in after[0]:
        delta = (after[0][n] - before[n]).abs().max()
        moved += delta > 0
        assert torch.allclose(after[0][n], after[1][n], rtol=0, atol=1e-10 * max(delta, 1e-30)), n
    assert moved > 0


def test_packed_micro_batches_are_filled_to_the_token_budget():
    rng = random.Random(4)
    rows = [
        sample([rng.randrange(3, 60) for _ in range(p)], [1] * rng.randrange(1, 9))
        for p in (4, 4, 4, 6, 6, 9, 9, 9, 9, 3)
    ]
    budget = 24
    chunks = micro_batches(rows, None, budget, packed=True)
    assert sorted(map(id, (s for c in chunks for s in c))) == sorted(map(id, rows))
    for i, chunk in enumerate(chunks):
        assert packed_tokens(chunk) <= budget or len(chunk) == 1
        if i + 1 < len(chunks):  # closed only because the next sample did not fit
            assert packed_tokens(chunk + chunks[i + 1][:1]) > budget
    # padded counting would have cut more chunks for the same budget
    assert len(micro_batches(rows, None, budget)) > len(chunks)
