"""One MAGRPO step, side by side: teamrl vs CoMLRL 1.4.3 vs the raw bound.

Work per step (identical for every contender): 2 agents, one prompt each, G = 4 samples per
agent, exactly 64 new tokens per sample (EOS ignored), SmolLM2-135M-Instruct fp32 on CPU, then
one policy-gradient update of both agents.

- raw bound: one model, one batched ``generate`` of the 8 sequences, one forward/backward over
  them, one fused AdamW step (no rewards, no bookkeeping): the floor for a full fine-tune.
- teamrl: ``Trainer.train_step`` with policies 'lora' (the default: one base + two adapters,
  one batched generate), 'shared' (one full model) and 'separate' (two full models, as CoMLRL).
- CoMLRL 1.4.3 ``MAGRPOTrainer`` (two full models) in its own venv, via comlrl_worker.py.

Usage:  python benchmarks/magrpo_step.py [--steps 3] [--skip-comlrl] [--out FILE]
Prints per-contender medians and ratios, and writes a markdown table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
G, NEW_TOKENS = 4, 64


SHORT_PROMPTS = [
    "Write a short paragraph about the sea.",
    "Describe a busy city street in the morning.",
    "Explain why the sky is blue to a child.",
    "Tell a short story about a lost key.",
    "Give three tips for learning to cook.",
    "Describe the smell of rain on a summer day.",
    "Write a note thanking a neighbour for help.",
    "Explain how a bicycle stays upright.",
]


def prompts(n: int, style: str = "short") -> list[str]:
    """Short one-line prompts (the shared notes' setting) or ~200-token posts ('long')."""
    if style == "short":
        return [SHORT_PROMPTS[i % len(SHORT_PROMPTS)] for i in range(n)]
    from teamrl.tasks.writing.data import offline_texts

    rows = offline_texts("train")[:n]
    return [f"Summarize the following post.\n\n{r['text']}\n\nSummary:" for r in rows]


def reward(completions: dict[str, str], example: dict) -> float:
    """Cheap, deterministic and varied across samples (so advantages are non-zero)."""
    a, b = (len(set(t.split())) for t in completions.values())
    return (b - a) / 10.0


def bench_raw(texts: list[str], steps: int) -> list[float]:
    import torch

    from teamrl.models import load_model, load_tokenizer

    tok = load_tokenizer("smollm2-135m")
    model = load_model("smollm2-135m")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)
    times = []
    for i in range(steps + 1):
        batch = tok(
            [texts[i % len(texts)]] * G + [texts[(i + 1) % len(texts)]] * G,
            return_tensors="pt",
            padding=True,
        )
        t0 = time.perf_counter()
        with torch.no_grad():
            seqs = model.generate(
                **batch,
                do_sample=True,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                pad_token_id=tok.pad_token_id,
            )
        attn = torch.cat(
            [batch["attention_mask"], torch.ones(seqs.shape[0], NEW_TOKENS, dtype=torch.long)],
            dim=1,
        )
        logits = model(input_ids=seqs, attention_mask=attn, logits_to_keep=NEW_TOKENS + 1).logits
        logp = torch.log_softmax(logits[:, :-1].float(), -1)
        token_logp = logp.gather(-1, seqs[:, -NEW_TOKENS:, None]).squeeze(-1)
        loss = -(token_logp.mean(-1) * torch.randn(seqs.shape[0])).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i:  # the first step warms up
            times.append(time.perf_counter() - t0)
    return times


def bench_teamrl(texts: list[str], steps: int, policies: str) -> tuple[list[float], dict]:
    from teamrl.config import load_config
    from teamrl.envs.base import Task
    from teamrl.envs.functional import FunctionEnv
    from teamrl.trainer import Trainer

    agents = ["helper", "writer"]
    task = Task(
        name="bench",
        make_env=lambda: FunctionEnv(agents, reward),
        train=[{"prompt": t} for t in texts],
    )
    overrides = [
        "model.name_or_path=smollm2-135m",
        f"team.policies={policies}",
        "team.chat_template=false",  # CoMLRL sends the raw prompt
        "team.ignore_eos=true",
        "team.agents=[{name: helper, system: '', max_completion_length: 64}, "
        "{name: writer, system: '', max_completion_length: 64}]",
        f"algorithm.num_generations={G}",
        "train.prompts_per_step=1",
        "train.learning_rate=1e-6",
        "train.shuffle=false",
        "log.progress_bar=false",
    ]
    trainer = Trainer(load_config(None, overrides), task=task, run_dir=tempfile.mkdtemp())
    times, parts = [], {"generate": [], "update": []}
    for i in range(steps + 1):
        m = trainer.train_step()
        assert m["completion_length/mean"] == NEW_TOKENS, m["completion_length/mean"]
        if i:
            times.append(m["time/step"])
            parts["generate"].append(m["time/generate"])
            parts["update"].append(m["time/update"])
    return times, {k: statistics.median(v) for k, v in parts.items()}


def bench_comlrl(texts: list[str], steps: int) -> dict | None:
    py = HERE / ".venv-comlrl" / "bin" / "python"
    if not py.exists():
        subprocess.run(["bash", str(HERE / "setup_comlrl.sh")], check=True)
    from teamrl.models import resolve

    folder = resolve("smollm2-135m")
    with tempfile.TemporaryDirectory() as tmp:
        pfile, out = Path(tmp) / "prompts.json", Path(tmp) / "out.json"
        pfile.write_text(json.dumps(texts))
        cmd = [
            str(py),
            str(HERE / "comlrl_worker.py"),
            "--model-dir",
            folder,
            "--prompts",
            str(pfile),
            "--steps",
            str(steps),
            "--warmup",
            "1",
            "--num-generations",
            str(G),
            "--max-new-tokens",
            str(NEW_TOKENS),
            "--out",
            str(out),
        ]
        subprocess.run(cmd, check=True)
        return json.loads(out.read_text())


def _child(kind: str, steps: int, style: str) -> None:
    """Run one contender in this process and print its JSON (fresh process = fair RSS)."""
    texts = prompts(2 * (steps + 1), style)
    parts: dict = {}
    if kind == "raw":
        times = bench_raw(texts, steps)
    else:
        times, parts = bench_teamrl(texts, steps, kind.split(":")[1])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"times": times, "parts": parts, "peak_rss_gib": rss}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--skip-comlrl", action="store_true")
    ap.add_argument("--prompts", choices=["short", "long"], default="short")
    ap.add_argument("--out", default=None, help="default: results/magrpo_step_<prompts>.md")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if args.child:
        _child(args.child, args.steps, args.prompts)
        return 0

    rows: dict[str, dict] = {}
    for kind in ("raw", "teamrl:lora", "teamrl:shared", "teamrl:separate"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                kind,
                "--steps",
                str(args.steps),
                "--prompts",
                args.prompts,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        res = json.loads(out.stdout.strip().splitlines()[-1])
        rows[kind] = {
            "median": statistics.median(res["times"]),
            "rss": res["peak_rss_gib"],
            **{f"{k}_s": v for k, v in res["parts"].items()},
        }
        print(
            f"{kind:<16} {rows[kind]['median']:6.2f} s/step  {res['peak_rss_gib']:.1f} GiB",
            flush=True,
        )
    if not args.skip_comlrl:
        c = bench_comlrl(prompts(2 * (args.steps + 1), args.prompts), args.steps)
        rows["comlrl 1.4.3"] = {
            "median": c["median_s_per_step"],
            "rss": c["peak_rss_gib"],
            "generate_s": statistics.median(c["generate_s"]),
            "update_s": statistics.median(c["update_s"]),
        }
        print(f"{'comlrl 1.4.3':<16} {c['median_s_per_step']:6.2f} s/step", flush=True)

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(
            ln.split(":", 1)[1].strip()
            for ln in open("/proc/cpuinfo")
            if ln.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    import torch

    header = (
        f"MAGRPO step, 2 agents x G={G} x {NEW_TOKENS} tokens, SmolLM2-135M fp32. "
        f"{dt.date.today()}, {os.cpu_count()} cores ({cpu}), torch {torch.__version__}, "
        f"{args.prompts} prompts, median of {args.steps} steps after 1 warm-up."
    )
    lines = [
        header,
        "",
        "| run | s/step | generate s | update s | peak RSS (GiB) | vs raw bound | CoMLRL / this |",
        "|---|---|---|---|---|---|---|",
    ]
    raw = rows["raw"]["median"]
    comlrl = rows.get("comlrl 1.4.3", {}).get("median")
    for name, r in rows.items():
        speedup = f"{comlrl / r['median']:.2f}x" if comlrl else "n/a"
        gen, upd = (f"{r[k]:.2f}" if k in r else "" for k in ("generate_s", "update_s"))
        lines.append(
            f"| {name} | {r['median']:.2f} | {gen} | {upd} | {r['rss']:.1f} | "
            f"{r['median'] / raw:.2f} | {speedup} |"
        )
    table = "\n".join(lines)
    print("\n" + table)
    out_path = Path(args.out or HERE / "results" / f"magrpo_step_{args.prompts}.md")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
