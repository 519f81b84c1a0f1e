"""chosen_logprob: log softmax(z)[y] and its one-pass backward, by hand and against autograd's
composition (gather - logsumexp), across row chunks."""

import math

import pytest
import torch

from teamrl.update import chosen_logprob as module
from teamrl.update.chosen_logprob import chosen_logprob


def test_a_row_by_hand():
    # z = (0, ln 3): softmax (1/4, 3/4); choosing token 1 gives ln(3/4), and
    # d/dz = onehot(1) - softmax = (-1/4, +1/4); choosing token 0 gives ln(1/4), (3/4, -3/4).
    z = torch.tensor([[0.0, math.log(3.0)], [0.0, math.log(3.0)]], requires_grad=True)
    logp = chosen_logprob(z, torch.tensor([1, 0]))
    assert logp.tolist() == pytest.approx([math.log(0.75), math.log(0.25)], abs=1e-6)
    # weights 2 and -1 on the two rows: the gradient is each row's times its weight
    (logp * torch.tensor([2.0, -1.0])).sum().backward()
    assert z.grad.flatten().tolist() == pytest.approx([-0.5, 0.5, -0.75, 0.75], abs=1e-6)


def test_a_row_with_zero_incoming_gradient_gets_exactly_zero():
    """A pad's log-prob is replaced by 0 downstream, so its incoming gradient is 0: its row of
    the logits' gradient must be exactly 0, whatever its logits."""
    z = torch.tensor([[5.0, -3.0, 0.5], [1.0, 2.0, 3.0]], requires_grad=True)
    logp = chosen_logprob(z, torch.tensor([2, 0]))
    torch.where(torch.tensor([True, False]), logp, 0.0).sum().backward()
    assert z.grad[1].tolist() == [0.0, 0.0, 0.0]
    assert z.grad[0].sum().item() == pytest.approx(0.0, abs=1e-6)  # softmax sums to 1


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_equals_gather_minus_logsumexp_across_chunks(monkeypatch, chunk):
    """Same values and gradients as autograd's composition, in float64 (so the comparison is
    not about rounding), with row chunks that split the rows unevenly or not at all."""
    monkeypatch.setattr(module, "CHUNK_ELEMENTS", chunk * 11)  # 11 = the vocabulary below
    gen = torch.Generator().manual_seed(0)
    z = (3 * torch.randn(3, 5, 11, generator=gen, dtype=torch.float64)).requires_grad_()
    ids = torch.randint(0, 11, (3, 5), generator=gen)
    weights = torch.randn(3, 5, generator=gen, dtype=torch.float64)

    ours = chosen_logprob(z, ids)
    (ours * weights).sum().backward()
    grad_ours, z.grad = z.grad.clone(), None

    ref = z.gather(-1, ids[..., None])[..., 0] - torch.logsumexp(z, -1)
    (ref * weights).sum().backward()
    assert torch.allclose(ours, ref, rtol=0, atol=1e-12)
    assert torch.allclose(grad_ours, z.grad, rtol=0, atol=1e-12)
    assert ours.shape == ids.shape and grad_ours.shape == z.shape


def test_gradcheck():
    z = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([0, 5, 2, 2])
    assert torch.autograd.gradcheck(lambda x: chosen_logprob(x, ids), (z,))


def test_huge_logits_do_not_overflow():
    z = torch.tensor([[1000.0, 0.0, -1000.0]], requires_grad=True)
    logp = chosen_logprob(z, torch.tensor([1]))
    assert logp.item() == pytest.approx(-1000.0)
    logp.sum().backward()
    assert torch.isfinite(z.grad).all()
    assert z.grad.flatten().tolist() == pytest.approx([-1.0, 1.0, 0.0], abs=1e-6)


def test_row_entropy_by_hand_and_with_excluded_tokens(monkeypatch):
    from teamrl.update.chosen_logprob import row_entropy

    monkeypatch.setattr(module, "CHUNK_ELEMENTS", 4)  # one row per chunk
    inf = float("inf")
    z = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],  # uniform over 4: ln 4
            [1.0, 1.0, -inf, -inf],  # two kept tokens (truncated scoring): ln 2, not NaN
            [0.0, math.log(3.0), -inf, -inf],  # (1/4, 3/4): -(1/4 ln 1/4 + 3/4 ln 3/4)
        ]
    )
    h = row_entropy(z)
    expected = [math.log(4), math.log(2), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))]
    assert h.tolist() == pytest.approx(expected, abs=1e-6)
    ref = -(torch.softmax(z[:1], -1) * torch.log_softmax(z[:1], -1)).sum(-1)
    assert h[0].item() == pytest.approx(ref.item(), abs=1e-6)
    assert row_entropy(torch.zeros(0, 3, 5)).shape == (0, 3)


@pytest.mark.parametrize("chunk", [1, 3, 1 << 20])
def test_the_entropy_from_the_same_pass_equals_the_definition(monkeypatch, chunk):
    from teamrl.update.chosen_logprob import chosen_logprob_and_entropy

    monkeypatch.setattr(module, "CHUNK_ELEMENTS", chunk * 7)
    gen = torch.Generator().manual_seed(1)
    z = (4 * torch.randn(2, 5, 7, generator=gen, dtype=torch.float64)).requires_grad_()
    ids = torch.randint(0, 7, (2, 5), generator=gen)
    logp, h = chosen_logprob_and_entropy(z, ids)
    logq = torch.log_softmax(z.detach(), -1)
    assert torch.allclose(h, -(logq.exp() * logq).sum(-1), rtol=0, atol=1e-12)
    assert torch.allclose(logp, chosen_logprob(z, ids), rtol=0, atol=1e-12)
    assert not h.requires_grad and logp.requires_grad
    logp.sum().backward()  # the entropy takes no part in the gradient
    assert torch.allclose(z.grad, torch.nn.functional.one_hot(ids, 7) - logq.exp(), atol=1e-12)


def test_an_accelerator_chunk_is_sized_by_memory_not_by_cache():
    """On a device other than the CPU a chunk costs kernel launches, not cache misses: a
    micro-batch of 16 x 256 positions at Qwen2.5's 151,936-entry vocabulary runs its forward
    and backward in a few chunks there (on a CPU: some 700 of 6 rows each). Counted on the meta
    device (shapes only, no memory), by the exponentials each chunk computes."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountExp(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] in ("exp", "exp_"):
                CountExp.n += 1
            return func(*args, **(kwargs or {}))

    vocab, rows = 151_936, 16 * 256
    z = torch.empty(16, 256, vocab, device="meta", requires_grad=True)
    ids = torch.zeros(16, 256, dtype=torch.long, device="meta")
    with CountExp():
        logp, _ = module.chosen_logprob_and_entropy(z, ids)
        logp.sum().backward()
    chunks = -(-rows // (module.DEVICE_CHUNK_ELEMENTS // vocab))
    assert chunks <= 3
    assert CountExp.n == 2 * chunks  # one exp per chunk in the forward, one in the backward
    assert module._rows_per_chunk(vocab, torch.device("cpu")) * 100 < rows


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_logits_are_upcast_a_chunk_at_a_time(monkeypatch, dtype):
    """A bf16 model's logits: the same float32 log-probs and entropies as upcasting the whole
    tensor first, and the gradient that upcast's backward gives (float32, rounded once to the
    logits' dtype), bit for bit; but no float32 tensor of the whole logits' size is written
    in the forward or the backward."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from teamrl.update.chosen_logprob import chosen_logprob_and_entropy

    class WideFloat32(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.numel() >= 6 * 50:
                    WideFloat32.count += 1
            return out

    monkeypatch.setattr(module, "CHUNK_ELEMENTS", 2 * 50)  # 2 rows of 50 per chunk
    gen = torch.Generator().manual_seed(2)
    base = 3 * torch.randn(2, 3, 50, generator=gen)
    ids = torch.randint(0, 50, (2, 3), generator=gen)
    weights = torch.randn(2, 3, generator=gen)

    half = base.to(dtype).requires_grad_()
    with WideFloat32():
        logp, h = chosen_logprob_and_entropy(half, ids)
        (logp * weights).sum().backward()
    assert WideFloat32.count == 0
    assert logp.dtype == h.dtype == torch.float32 and half.grad.dtype == dtype

    upcast = base.to(dtype).requires_grad_()
    ref_logp, ref_h = chosen_logprob_and_entropy(upcast.float(), ids)
    (ref_logp * weights).sum().backward()
    assert torch.equal(logp, ref_logp) and torch.equal(h, ref_h)
    assert torch.equal(half.grad, upcast.grad)
