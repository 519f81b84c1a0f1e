"""Where a sharded worker's memory goes, phase by phase, against an unsharded one.

    python benchmarks/sharding_phases.py                        # SmolLM2-135M, 2 workers
    python benchmarks/sharding_phases.py --model tiny-llama --rows 2 --tokens 8 --rounds 1

``benchmarks/sharding_memory.py`` gives each Ray worker's resident memory and one peak over the
whole update; this one splits the update into its phases to say where a peak comes from. W
processes (gloo, ``torch.multiprocessing``, no Ray) each hold a full fp32 fine-tune of the model
with fused AdamW and glibc's mmap threshold fixed at 128 KiB (what a sharded CPU worker sets,
``teamrl/scale/cpu_malloc.py``), unsharded or sharded with ``teamrl.scale.sharding.shard_model``
(plus the plain replica a sharded worker samples from). Each rank scores ``--rows`` samples of
``--tokens`` prompt + ``--tokens`` completion tokens (two distinct prompts) with
``score_tokens``, after a 2-token warm-up update that creates the optimizer state.

Each phase starts by resetting the kernel's peak counter (``/proc/self/clear_refs`` = 5) and
ends by reading it (``VmHWM``): forward + backward, the all-reduce of the gradients
(unsharded; FSDP reduce-scatters inside the backward), the optimizer step, and the replica's
refresh (sharded; also its wall time: the cost of syncing the sampling weights after an
update); ``VmRSS`` after the backward and after ``zero_grad``. ``--rounds`` repeats
both settings, alternating; the report gives the median over ranks and rounds with [min, max].
Output: ``results/sharding_phases.md`` and ``.json`` with date and machine. Linux only.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS = Path(__file__).resolve().parent / "results"
GiB = 2**30


def _status(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024 / GiB
    raise RuntimeError(f"no {key} in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def worker(rank: int, world: int, sharded: bool, port: int, args, out) -> None:
    import torch
    import torch.distributed as dist

    from teamrl.sample import Sample
    from teamrl.scale.cpu_malloc import set_mmap_threshold
    from teamrl.team.models import model_config
    from teamrl.update.losses import collate, score_tokens

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    set_mmap_threshold(128)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = model_config(args.model)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).train()
    vocab = config.get_text_config().vocab_size
    replica = None
    if sharded:
        from teamrl.scale.sharding import gather_into, shard_model

        replica = copy.deepcopy(model).eval()  # what a sharded worker samples from
        shard_model(model, world, "cpu", "float32")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)
    rec = {"built": _status("VmRSS")}

    def sample(i: int, n: int) -> Sample:
        prompt = torch.randint(3, vocab, (n,), generator=torch.Generator().manual_seed(i % 2))
        comp = torch.randint(3, vocab, (n,), generator=torch.Generator().manual_seed(99 + i))
        return Sample("a", "a", 0, i % 2, prompt.tolist(), comp.tolist(), [0.0] * n, 1.0)

    def update(rows: int, n: int, tag: str) -> None:
        _reset_peak()
        batch = collate([sample(rank * rows + i, n) for i in range(rows)], 0)
        score_tokens(model, batch).logp.sum().backward()
        rec[f"{tag}forward + backward peak"] = _status("VmHWM")
        rec[f"{tag}after backward"] = _status("VmRSS")
        if not sharded:
            _reset_peak()
            t0 = time.perf_counter()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            rec[f"{tag}all-reduce seconds"] = time.perf_counter() - t0
            rec[f"{tag}all-reduce peak"] = _status("VmHWM")
        _reset_peak()
        opt.step()
        rec[f"{tag}optimizer step peak"] = _status("VmHWM")
        opt.zero_grad()
        rec[f"{tag}after zero_grad"] = _status("VmRSS")
        if sharded:
            _reset_peak()
            t0 = time.perf_counter()
            gather_into(replica, model, trainable_only=True)
            rec[f"{tag}replica refresh seconds"] = time.perf_counter() - t0
            rec[f"{tag}replica refresh peak"] = _status("VmHWM")

    update(1, 2, "warm-up: ")
    update(args.rows, args.tokens, "")
    out[rank] = rec
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rows", type=int, default=4, help="samples each rank scores")
    ap.add_argument("--tokens", type=int, default=64, help="prompt and completion length")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="sharding_phases")
    args = ap.parse_args(argv)
    import torch.multiprocessing as mp
    from rounds import header, provenance, round_order

    load_start = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {"none": [], "fsdp": []}
    for r in range(args.rounds):
        for setting in round_order(list(runs), r):
            with mp.Manager() as manager:
                out = manager.dict()
                port = 29500 + 2 * r + (setting == "fsdp")
                mp.spawn(
                    worker,
                    args=(args.workers, setting == "fsdp", port, args, out),
                    nprocs=args.workers,
                    join=True,
                )
                runs[setting] += [dict(out[k]) for k in sorted(out.keys())]
            print(f"round {r} {setting}: done", flush=True)
    result = {**provenance(argv, args, load_start), "runs": runs}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=1) + "\n")
    n = args.workers * args.rounds
    lines = [
        *header(result, "Memory per worker, phase by phase, with and without sharding",
                "sharding_phases.py"),
        "",
        f"{args.model}, full fine-tune in float32 with fused AdamW, {args.workers} gloo "
        f"processes, glibc's mmap threshold fixed at 128 KiB; each rank scores {args.rows} "
        f"samples of {args.tokens} + {args.tokens} tokens. GiB; median over {n} ranks x rounds "
        "[min, max]; the all-reduce and the replica's refresh also in seconds. A peak is the highest resident memory "
        "within that phase alone.",
        "",
        "| phase | unsharded | sharded (fsdp) |",
        "|---|---|---|",
    ]  # fmt: skip
    phases = ["built", "forward + backward peak", "after backward", "all-reduce peak"]
    phases += ["optimizer step peak", "after zero_grad", "replica refresh peak"]
    phases += ["all-reduce seconds", "replica refresh seconds"]
    keys = sorted(
        {k for rec in runs["none"] + runs["fsdp"] for k in rec},
        key=lambda k: (
            k != "built" and 1 + (not k.startswith("warm-up: ")),
            phases.index(k.removeprefix("warm-up: ")),
        ),
    )
    for key in keys:
        cells = []
        for setting in ("none", "fsdp"):
            vals = [rec[key] for rec in runs[setting] if key in rec]
            cells.append(
                f"{statistics.median(vals):.2f} [{min(vals):.2f}, {max(vals):.2f}]" if vals else "-"
            )
        lines.append(f"| {key} | {cells[0]} | {cells[1]} |")
    (RESULTS / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
