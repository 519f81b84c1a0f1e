"""The chosen tokens' log-probs, forward and backward: autograd's composition vs chosen_logprob.

    python benchmarks/logprob_backward.py                     # SmolLM2's head, 20 rounds
    python benchmarks/logprob_backward.py --vocab 151936 --hidden 896   # Qwen2.5-0.5B's head

One step of each contender is what the update does after the last decoder layer: the output
layer's matmul (rows x hidden @ hidden x vocab, a fresh logits tensor as in training), the
log-prob of each row's chosen token and the entropy of each row (logged by every update's
first pass), a weighted sum, and the backward to the hidden states.

- ``composition``: ``logits.gather(-1, y) - torch.logsumexp(logits, -1)``, and the entropy
  from ``softmax`` (teamrl's scoring until 2026-11-27): its backward makes a zero tensor for
  gather, exp(z - lse) scaled for logsumexp, and their sum, each rows x vocab.
- ``chosen_logprob``: ``teamrl.update.chosen_logprob.chosen_logprob_and_entropy``: the
  entropy from the same exponentials, one rows x vocab gradient, all in cache-sized row chunks.

Both give the same values (checked each step, within float32 rounding). The contenders
alternate in rounds (``rounds.run_rounds``, order rotated), so both run under the same load;
the report gives each one's median [min, max] and the median of the per-round ratios.
Output: ``results/logprob_backward.md`` and ``.json`` with the date, the machine and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rounds import header, per_round_ratios, provenance, run_rounds, summarize  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


class HeadStep:
    """The output layer and the chosen tokens' log-probs, forward and backward, one way."""

    def __init__(self, args, fused: bool):
        import torch

        gen = torch.Generator().manual_seed(0)
        self.hidden = torch.randn(args.rows, args.hidden, generator=gen)
        self.weight = torch.randn(args.vocab, args.hidden, generator=gen) / args.hidden**0.5
        self.ids = torch.randint(0, args.vocab, (args.rows,), generator=gen)
        self.grad = torch.randn(args.rows, generator=gen)  # the loss's weight on each token
        self.fused = fused
        self.last = None

    def step(self) -> dict[str, float]:
        import torch

        from teamrl.update.chosen_logprob import chosen_logprob_and_entropy

        h = self.hidden.detach().requires_grad_()
        t0 = time.perf_counter()
        logits = h @ self.weight.T  # frozen head (LoRA): the gradient goes to h only
        if self.fused:
            logp, entropy = chosen_logprob_and_entropy(logits, self.ids)
        else:
            lse = torch.logsumexp(logits, -1)
            logp = logits.gather(-1, self.ids[:, None])[:, 0] - lse
            with torch.no_grad():
                probs = torch.softmax(logits, dim=-1)
                entropy = lse - torch.where(probs > 0, probs * logits, 0.0).sum(-1)
        (logp * self.grad).sum().backward()
        s = time.perf_counter() - t0
        self.last = (logp.detach(), h.grad, entropy.detach())
        return {"step_s": s}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=256, help="tokens scored (4 samples x 64)")
    ap.add_argument("--hidden", type=int, default=576, help="SmolLM2-135M's hidden size")
    ap.add_argument("--vocab", type=int, default=49152, help="SmolLM2-135M's vocabulary")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", default="logprob_backward")
    args = ap.parse_args(argv)
    import torch

    load_start = os.getloadavg()[0]
    contenders = {"composition": HeadStep(args, False), "chosen_logprob": HeadStep(args, True)}
    result = run_rounds(contenders, args.rounds, args.warmup)
    (a_logp, a_grad, a_h), (b_logp, b_grad, b_h) = (c.last for c in contenders.values())
    same = {
        "entropy_max_abs_diff": (a_h - b_h).abs().max().item(),
        "logp_max_abs_diff": (a_logp - b_logp).abs().max().item(),
        "grad_max_abs_diff": (a_grad - b_grad).abs().max().item(),
        "grad_max_abs": a_grad.abs().max().item(),
    }
    assert torch.allclose(a_logp, b_logp, rtol=1e-5, atol=1e-4), same
    assert torch.allclose(a_h, b_h, rtol=1e-5, atol=1e-4), same
    assert torch.allclose(a_grad, b_grad, rtol=1e-4, atol=1e-5 * same["grad_max_abs"]), same
    times = {n: [t["step_s"] for t in s] for n, s in result["steps"].items()}
    ratios = per_round_ratios(times["composition"], times["chosen_logprob"])
    out = {
        **provenance(argv, args, load_start),
        "steps": result["steps"],
        "orders": result["orders"],
        "summary": {n: summarize(t) for n, t in times.items()},
        "speedup_per_round": ratios,
        "speedup_median": statistics.median(ratios),
        "agreement": same,
    }
    lines = header(
        out, "Chosen-token log-probs and entropy, forward + backward (interleaved rounds)", ""
    )
    lines[2] = f"`python benchmarks/logprob_backward.py {' '.join(out['argv'])}`"
    lines += [
        "",
        f"{args.rows} rows x {args.hidden} hidden @ a {args.vocab}-entry vocabulary, float32; "
        f"{args.rounds} rounds after {args.warmup} warm-up, order rotated.",
        "",
        "| contender | ms median [min, max] |",
        "|---|---|",
    ]
    for n, s in out["summary"].items():
        lines.append(
            f"| {n} | {1e3 * s['median']:.1f} [{1e3 * s['min']:.1f}, {1e3 * s['max']:.1f}] |"
        )
    lines += [
        "",
        f"chosen_logprob's speed-up, median of the per-round ratios: "
        f"{out['speedup_median']:.2f}x [{min(ratios):.2f}, {max(ratios):.2f}]. Same values: "
        f"log-probs within {same['logp_max_abs_diff']:.1e}, entropies within "
        f"{same['entropy_max_abs_diff']:.1e}, gradients within "
        f"{same['grad_max_abs_diff']:.1e} (largest entry {same['grad_max_abs']:.1e}).",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(out, indent=1))
    (RESULTS / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
