"""The update's activation memory against sequence length, measured beside the preflight's estimate.

    python benchmarks/update_memory.py                      # SmolLM2-135M shape, LoRA and full
    python benchmarks/update_memory.py --model qwen2.5-0.5b-shape --points \
        "8,2,64,64 8,2,64,256 8,2,256,64 8,8,256,64" --out update_memory_qwen05
    python benchmarks/update_memory.py --model tiny-llama   # smoke

Each point is one forward and backward of the update's scoring (``score_tokens``: distinct
prompts first, their KV cache copied to each completion, then the completions; a sum of the
log-probs as the loss) on a batch of ``rows`` samples over ``prompts`` distinct prompts of
``P`` tokens with completions of ``C`` tokens, in a fresh process (float32, CPU, random weights
from the model's config: memory does not depend on their values; ``qwen2.5-0.5b-shape`` is
Qwen2.5-0.5B's published shape, written to a temporary folder). The process first runs one
2-token step, so the gradients and the allocator's arenas exist; the point's memory is the
peak resident set (``ru_maxrss``) above the resident set after that step. That difference is
what a micro-batch adds to a running trainer, and what ``train.max_tokens_per_micro_batch``
bounds. The report puts it beside ``teamrl.preflight``'s training term for the same batch.

Each point runs ``--rounds`` times (3 by default), every round a fresh process per point, the
points in the same order each round; the report gives the median with its [min, max] over the
rounds, so a point's spread is visible. Output: ``results/update_memory.md`` and ``.json``
(every round's measurement) with date and machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS = Path(__file__).resolve().parent / "results"
MiB = 2**20

# (rows, distinct prompts, prompt tokens, completion tokens): prompt length and completion
# length varied one at a time, so the report shows which one costs what
POINTS = [
    (8, 2, 64, 64),
    (8, 2, 64, 256),
    (8, 2, 64, 512),
    (8, 2, 256, 64),
    (8, 2, 512, 64),
    (8, 8, 512, 64),
]


QWEN_05B = dict(  # Qwen2.5-0.5B's published config
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    tie_word_embeddings=True,
)


def model_folder(name: str, scratch: str) -> str:
    """A model name or folder; ``qwen2.5-0.5b-shape``: a config-only folder in ``scratch``."""
    if name != "qwen2.5-0.5b-shape":
        return name
    from transformers import Qwen2Config

    Qwen2Config(**QWEN_05B).save_pretrained(scratch)
    return scratch


def measure(model_name: str, lora: bool, rows: int, prompts: int, p: int, c: int) -> dict:
    """One point, in this process (call it in a fresh one)."""
    import torch
    from transformers import AutoModelForCausalLM

    from teamrl.sample import Sample
    from teamrl.team.models import model_config
    from teamrl.update.losses import collate, score_tokens

    torch.manual_seed(0)  # random weights from the config: a shape folder (config.json) will do
    model = AutoModelForCausalLM.from_config(model_config(model_name), dtype=torch.float32)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear")
        )
    model.train()
    vocab = model.config.get_text_config().vocab_size

    def sample(i: int, plen: int, clen: int) -> Sample:
        g = torch.Generator().manual_seed(i % prompts)  # rows i, i + U, ... share a prompt
        prompt = torch.randint(3, vocab, (plen,), generator=g).tolist()
        comp = torch.randint(3, vocab, (clen,), generator=torch.Generator().manual_seed(1000 + i))
        return Sample(
            agent="a",
            policy="a",
            turn=0,
            group=i % prompts,
            prompt_ids=prompt,
            completion_ids=comp.tolist(),
            sampler_logprobs=[0.0] * clen,
            advantage=1.0,
        )

    def step(batch) -> None:
        score_tokens(model, batch).logp.sum().backward()

    step(collate([sample(i, 2, 2) for i in range(2)], 0))  # gradients and arenas exist
    base = _rss()
    step(collate([sample(i, p, c) for i in range(rows)], 0))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"added_mib": (peak - base) / MiB}


def estimate(model_name: str, lora: bool, rows: int, prompts: int, p: int, c: int) -> float:
    """The preflight's training term (bytes) for one micro-batch of this shape."""
    from teamrl.preflight import micro_batch_bytes, shape_of
    from teamrl.team.models import model_config

    shape = shape_of(model_config(model_name))
    return micro_batch_bytes(
        shape, rows=rows, prompts=prompts, prompt_len=p, completion_len=c, nbytes=4
    )


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--out", default="update_memory")
    ap.add_argument(
        "--points",
        help="space-separated rows,prompts,P,C points (default: the six of POINTS)",
    )
    ap.add_argument("--rounds", type=int, default=3, help="fresh processes per point")
    ap.add_argument("--point", help=argparse.SUPPRESS)  # internal: run one point, print JSON
    ap.add_argument("--lora", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    scratch = tempfile.mkdtemp()
    model = model_folder(args.model, scratch)
    if args.point:
        rows, prompts, p, c = map(int, args.point.split(","))
        print(json.dumps(measure(model, args.lora, rows, prompts, p, c)))
        return 0
    points = POINTS
    if args.points:
        points = [tuple(map(int, pt.split(","))) for pt in args.points.split()]

    from rounds import header, provenance

    load_start = os.getloadavg()[0]
    import statistics

    cells = [(lora, *pt) for lora in (True, False) for pt in points]
    runs: dict[tuple, list[dict]] = {cell: [] for cell in cells}
    for r in range(args.rounds):
        for lora, rows, prompts, p, c in cells:
            cmd = [sys.executable, __file__, "--model", model, "--point"]
            cmd += [f"{rows},{prompts},{p},{c}"] + (["--lora"] if lora else [])
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            got = json.loads(out.strip().splitlines()[-1])
            runs[(lora, rows, prompts, p, c)].append(got)
            print(
                f"round {r} {'lora' if lora else 'full'} rows={rows} prompts={prompts} P={p} "
                f"C={c}: {got['added_mib']:.0f} MiB measured",
                flush=True,
            )
    records = []
    for (lora, rows, prompts, p, c), got in runs.items():
        added = [g["added_mib"] for g in got]
        rec = {"lora": lora, "rows": rows, "prompts": prompts, "P": p, "C": c, "rounds": got}
        rec["added_mib"] = statistics.median(added)
        rec["added_mib_min"], rec["added_mib_max"] = min(added), max(added)
        rec["estimate_mib"] = estimate(model, lora, rows, prompts, p, c) / MiB
        records.append(rec)
    RESULTS.mkdir(exist_ok=True)
    meta = {**provenance(argv, args, load_start), "records": records}
    (RESULTS / f"{args.out}.json").write_text(json.dumps(meta, indent=1) + "\n")
    title = f"The update's activation memory against sequence length ({args.model})"
    lines = [
        *header(meta, title, "update_memory.py"),
        "",
        "One forward + backward of the update's scoring, float32 on CPU, in a fresh process: "
        "peak resident memory above the process after a 2-token warm-up step (weights, "
        "gradients and allocator arenas already there). `estimate` is `teamrl.preflight`'s "
        "training term for the same micro-batch (`micro_batch_bytes`).",
        "",
        "| mode | rows | distinct prompts | prompt tokens | completion tokens | forward tokens "
        f"| measured MiB, median [min, max] of {args.rounds} | estimate MiB | "
        "estimate / measured (median) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        tokens = r["prompts"] * r["P"] + r["rows"] * r["C"]
        lines.append(
            f"| {'lora' if r['lora'] else 'full'} | {r['rows']} | {r['prompts']} | {r['P']} | "
            f"{r['C']} | {tokens} | {r['added_mib']:.0f} [{r['added_mib_min']:.0f}, "
            f"{r['added_mib_max']:.0f}] | {r['estimate_mib']:.0f} | "
            f"{r['estimate_mib'] / r['added_mib']:.2f} |"
        )
    (RESULTS / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / args.out}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
