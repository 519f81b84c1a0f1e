"""log softmax(z)[y]: the log-prob of each chosen token, with a one-pass backward.

For one row of logits z (V entries) and the chosen token y:

    logp = z_y - lse(z),   lse(z) = log sum_j exp(z_j)
    d logp / d z_j = 1[j = y] - softmax(z)_j = 1[j = y] - exp(z_j - lse(z))

Written as autograd's composition (``z.gather(-1, y) - torch.logsumexp(z, -1)``) the backward
builds this from three vocabulary-wide tensors: a zero tensor that ``gather``'s backward
scatters into, ``logsumexp``'s exp(z - lse) scaled by the incoming gradient, and their sum.
On a CPU each of them is a fresh allocation of rows x V floats (50 MiB for 256 rows of a
49152-entry vocabulary: above glibc's largest mmap threshold, so every one is mapped anew and
page-faulted on first touch) and one pass over memory: on a small model's LoRA update a
noticeable share of the update (docs/performance.md, "Memory", has the profile).

Here the backward allocates the gradient once and fills it in row chunks small enough to stay
in cache: exp(z - lse) times -g, then + g at column y (``scatter_add_``: the one-hot term).
The forward computes lse in the same row chunks (max-shifted, as ``torch.logsumexp`` does), so
its temporaries stay small too, and the logged entropy comes from the same exponentials
(``chosen_logprob_and_entropy``). Values are those of the composition up to float rounding.
``row_entropy`` gives the entropy of logits with -inf entries (truncated scoring).

Half-precision logits (a bf16 model) are upcast a chunk at a time: the log-probs and the
entropy come out in float32, and the gradient is each chunk's float32 gradient rounded once
into the logits' dtype, so no float32 copy of the whole (rows x V) logits is made in either
direction; the values are those of upcasting the whole logits first.

Chunk size per device. On a CPU the point of a chunk is the cache: a few rows of a vocabulary
(``CHUNK_ELEMENTS``). On an accelerator there is no cache to fit and every chunk costs a handful
of kernel launches (max, sub, exp, sum, log; three more in the backward): with Qwen's 151,936-entry
vocabulary a cache-sized chunk is 6 rows, so a micro-batch of 16 x 256 positions would launch some
4,000 kernels of a few microseconds each, its time spent launching them. There the chunk is sized
by memory instead (``DEVICE_CHUNK_ELEMENTS``: the temporary of one chunk is a fraction of the
float32 logits that the caller already holds), so the launches per forward stay a handful and do
not grow with the rows (``tests/update/test_host_syncs.py`` counts the update's operations).
"""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 20  # floats per row chunk on a CPU (4 MiB in float32): a few rows
DEVICE_CHUNK_ELEMENTS = 1 << 28  # elsewhere (1 GiB in float32): one chunk per usual micro-batch


def chosen_logprob(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits, -1).gather(-1, ids[..., None])[..., 0]`` for (..., V) logits and
    (...) ids, without a vocabulary-wide softmax tensor in the forward or the backward."""
    return _ChosenLogProb.apply(logits, ids, False)[0]


def chosen_logprob_and_entropy(
    logits: torch.Tensor, ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``chosen_logprob`` and each row's entropy (no gradient) from the same pass over each
    chunk: with e = exp(z - max z) and s = sum e, lse = max z + log s and
    H = lse - sum_j p_j z_j = lse - (e . z) / s. For finite logits (every entry has p > 0);
    ``row_entropy`` takes -inf entries."""
    return _ChosenLogProb.apply(logits, ids, True)


@torch.no_grad()
def row_entropy(logits: torch.Tensor) -> torch.Tensor:
    """The entropy of softmax(z) for each row of (..., V) logits, -inf entries allowed (a
    truncated distribution's excluded tokens, probability 0):

        H = -sum_j p_j log p_j = lse(z) - sum_j p_j z_j,   p = exp(z - lse(z)),

    with 0 * z counted as 0 where p = 0 (z = -inf). A metric, not a loss: no gradient. Computed
    in the same cache-sized row chunks, so its temporaries stay small."""
    v = logits.shape[-1]
    flat = logits.reshape(-1, v)
    out = []
    for rows in flat.split(_rows_per_chunk(v, flat.device)):
        lse = torch.logsumexp(rows, dim=-1, keepdim=True)
        p = (rows - lse).exp_()
        out.append(lse[:, 0] - torch.where(p > 0, p * rows, 0.0).sum(-1))
    return torch.cat(out).reshape(logits.shape[:-1]) if out else flat.new_zeros(logits.shape[:-1])


_HALF = (torch.float16, torch.bfloat16)


def _wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 when it is half precision, else itself (float32 and float64 stay)."""
    return t.float() if t.dtype in _HALF else t


def _rows_per_chunk(vocab: int, device: torch.device) -> int:
    """Rows per chunk: cache-sized on a CPU, memory-sized on any other device (module doc)."""
    elements = CHUNK_ELEMENTS if device.type == "cpu" else DEVICE_CHUNK_ELEMENTS
    return max(1, elements // max(vocab, 1))


class _ChosenLogProb(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, ids: torch.Tensor, with_entropy: bool):
        v = logits.shape[-1]
        flat = logits.reshape(-1, v)
        lse, entropy = [], []
        for rows in flat.split(_rows_per_chunk(v, flat.device)):
            rows = _wide(rows)  # half-precision logits: upcast a chunk at a time (module doc)
            top = rows.amax(dim=-1, keepdim=True)
            e = (rows - top).exp_()  # the chunk's one temporary
            s = e.sum(dim=-1)
            lse.append(top[:, 0] + s.log())
            if with_entropy:
                entropy.append(lse[-1] - torch.linalg.vecdot(e, rows) / s)
        lse = torch.cat(lse) if lse else _wide(flat.new_zeros(0))
        token = _wide(flat.gather(-1, ids.reshape(-1, 1)).squeeze(-1))
        ctx.save_for_backward(logits, ids, lse)
        ent = torch.cat(entropy).reshape(ids.shape) if entropy else lse.new_zeros(ids.shape)
        ctx.mark_non_differentiable(ent)
        return (token - lse).reshape(ids.shape), ent

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor, _grad_entropy: torch.Tensor):
        logits, ids, lse = ctx.saved_tensors
        v = logits.shape[-1]
        flat = logits.reshape(-1, v)
        grad = torch.empty_like(flat)
        step = _rows_per_chunk(v, flat.device)
        if flat.dtype not in _HALF:
            g = grad_out.reshape(-1, 1).to(flat.dtype)
            for start in range(0, flat.shape[0], step):
                rows = slice(start, start + step)
                out = grad[rows]
                torch.sub(flat[rows], lse[rows, None], out=out)
                out.exp_().mul_(-g[rows])  # -g softmax(z)
            grad.scatter_add_(-1, ids.reshape(-1, 1), g)  # + g at the chosen column
            return grad.reshape(logits.shape), None, None
        # half-precision logits: each chunk's gradient in float32, then rounded once into the
        # logits' dtype, the values an upcast of the whole logits would give, bit for bit
        g = grad_out.reshape(-1, 1).to(lse.dtype)
        flat_ids = ids.reshape(-1, 1)
        for start in range(0, flat.shape[0], step):
            rows = slice(start, start + step)
            out = (flat[rows].float() - lse[rows, None]).exp_().mul_(-g[rows])
            out.scatter_add_(-1, flat_ids[rows], g[rows])
            grad[rows].copy_(out)
        return grad.reshape(logits.shape), None, None
