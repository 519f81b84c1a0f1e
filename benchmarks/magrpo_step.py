"""One MAGRPO step, interleaved: teamrl (lora, shared, separate, vllm) vs CoMLRL 1.4.3 vs raw.

Equal work per step (every contender): 2 agents, ``--prompts-per-step`` prompts per step (the
same prompts for every contender in a round; 1 by default), G = 4 samples per agent, exactly
64 new tokens per sample (EOS ignored, or masked until 64 in CoMLRL), the model in fp32 on CPU,
then one policy-gradient update of both agents. benchmarks/README.md gives the full definition.
The GPU check runs it at a real step's shape instead: 16 prompts of ``--prompt-tokens`` 256
tokens, G = 8, 256 new tokens, ``--micro-batch-size`` rows per forward of the update (the raw
loop cut the same way), under a ``--budget-s`` that ends the run after the last round that fits
(each round's results are written as soon as it ends).

Contenders, each a long-lived worker process built once:
- raw: one model, one batched ``generate`` of the 2 x G sequences, one forward/backward, one
  fused AdamW step, no rewards or bookkeeping: the floor for a full fine-tune.
- teamrl lora / shared / separate: ``Trainer.train_step`` with that ``team.policies`` and the
  builtin sampler.
- teamrl vllm: ``team.policies=lora`` with ``generation.backend=vllm``, run by the interpreter
  of ``.venv-vllm`` (``make test-vllm`` builds it); skipped with a note when absent.
- comlrl 1.4.3: ``MAGRPOTrainer`` in ``benchmarks/.venv-comlrl`` via comlrl_worker.py --serve.
- ``KIND@KEY=VALUE[@KEY=VALUE...]``: a teamrl contender with config overrides, e.g.
  ``lora,lora@generation.fast_decode=off``: an A/B of a setting in the same rounds, each side
  in its own worker process.
- ``KIND[@...]#REV``: a teamrl contender run by the package as it was at git revision REV
  (extracted with ``git archive``; the worker script is this one), e.g. ``lora,lora#fe09340``:
  the current code against an earlier commit's in the same rounds.

After ``--warmup`` untimed rounds, each of ``--rounds`` rounds times one step of every
contender (order rotated per round), so the steps compared within a round ran under the same
machine load. The report gives per contender the median s/step with min-max and IQR, the
generate/update split, and the speed-up vs CoMLRL in every round with the median of those
per-round ratios (vs the raw bound when CoMLRL is skipped), then throughput: generated tokens/s,
update tokens/s (prompt + completion tokens scored), the update's model FLOP/s and, on an H100 or
H200, its MFU against the dense bf16 peak (``flops_per_token`` gives the count).

Usage:  python benchmarks/magrpo_step.py [--rounds 5] [--skip-comlrl] [--model tiny-llama]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import rounds  # noqa: E402

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
TEAMRL = ("lora", "shared", "separate", "vllm")
ALL = ("raw", *TEAMRL, "comlrl")
# Opt-in: the vLLM backend with the other policy modes (one more engine each, so more memory), and
# lora with every agent's adapter updated in one forward/backward (train.one_pass_lora).
EXTRA = ("vllm-shared", "vllm-separate", "lora-1pass")


def prompts(n: int, style: str = "short", tokenizer=None, tokens: int = 0) -> list[str]:
    """Short one-line prompts (the shared notes' setting), ~200-token posts ('long'), or, with
    ``tokens`` > 0, texts of that many tokens of ``tokenizer``: random lowercase words from a
    fixed seed, encoded, cut to ``tokens`` ids and decoded (the random models' byte-level
    tokenizer, which has no merges, encodes them back to exactly ``tokens`` ids; a BPE
    tokenizer to that many give or take a merge at the cut)."""
    if tokens > 0:
        import random
        import string

        rng = random.Random(1234)
        texts = []
        for _ in range(n):
            words = " ".join(
                "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9)))
                for _ in range(tokens)  # at least one token a word, so enough
            )
            ids = tokenizer(words, add_special_tokens=False).input_ids[:tokens]
            texts.append(tokenizer.decode(ids))
        return texts
    if style == "short":
        return [SHORT_PROMPTS[i % len(SHORT_PROMPTS)] for i in range(n)]
    from teamrl.tasks.writing.data import offline_texts

    rows = offline_texts("train")[:n]
    return [f"Summarize the following post.\n\n{r['text']}\n\nSummary:" for r in rows]


def reward(completions: dict[str, str], example: dict) -> float:
    """Cheap, deterministic and varied across samples (so advantages are non-zero)."""
    a, b = (len(set(t.split())) for t in completions.values())
    return (b - a) / 10.0


# ----------------------------------------------------------------------------------- workers
class RawStep:
    """The floor: generate the 2 x G rows in one ``generate`` call, one update, nothing else."""

    def __init__(self, args, texts: list[str]):
        import torch

        from teamrl.team.models import load_model, load_tokenizer

        self.torch, self.args, self.texts, self.i = torch, args, texts, 0
        self.tok = load_tokenizer(args.model)
        self.tok.padding_side = "left"  # generate continues every row from its last column
        self.model = load_model(args.model, dtype=args.dtype, device=args.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-6, fused=True)

    def step(self) -> dict[str, float]:
        torch, g, new = self.torch, self.args.num_generations, self.args.new_tokens
        p = self.args.prompts_per_step
        i, self.i = self.i, self.i + 1
        rows = [t for t in self.texts[i * p : (i + 1) * p] for _ in range(2 * g)]
        batch = self.tok(rows, return_tensors="pt", padding=True)
        batch = batch.to(self.args.device)
        sync(self.args.device)
        t0 = time.perf_counter()
        with torch.no_grad():
            seqs = self.model.generate(
                **batch,
                do_sample=True,
                max_new_tokens=new,
                min_new_tokens=new,
                pad_token_id=self.tok.pad_token_id,
            )
        sync(self.args.device)
        t1 = time.perf_counter()
        ones = torch.ones(seqs.shape[0], new, dtype=torch.long, device=seqs.device)
        attn = torch.cat([batch["attention_mask"], ones], dim=1)
        adv = torch.randn(seqs.shape[0], device=seqs.device)
        micro = self.args.micro_batch_size or seqs.shape[0]
        for lo in range(0, seqs.shape[0], micro):  # gradient accumulation, as the trainer's
            part = slice(lo, lo + micro)
            logits = self.model(
                input_ids=seqs[part], attention_mask=attn[part], logits_to_keep=new + 1
            ).logits
            logp = torch.log_softmax(logits[:, :-1].float(), -1)
            token_logp = logp.gather(-1, seqs[part, -new:, None]).squeeze(-1)
            loss = -(token_logp.mean(-1) * adv[part]).sum() / seqs.shape[0]
            loss.backward()
            del logits, logp, token_logp, loss
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        sync(self.args.device)
        t2 = time.perf_counter()
        return {"step_s": t2 - t0, "generate_s": t1 - t0, "update_s": t2 - t1}


class TeamrlStep:
    """``Trainer.train_step`` with the given policies (and generation backend)."""

    def __init__(
        self,
        args,
        texts: list[str],
        policies: str,
        backend: str | None,
        one_pass: bool = False,
        extra: list[str] = (),
    ):
        from teamrl.config import load_config
        from teamrl.envs.base import Task
        from teamrl.envs.functional import FunctionEnv
        from teamrl.trainer import Trainer

        self.args = args
        agents = ["helper", "writer"]
        task = Task(
            name="bench",
            make_env=lambda: FunctionEnv(agents, reward),
            train=[{"prompt": t} for t in texts],
        )
        n = args.new_tokens
        overrides = [
            f"model.name_or_path={args.model}",
            f"model.device={args.device}",
            f"model.dtype={args.dtype}",
            f"team.policies={policies}",
            "team.chat_template=false",  # CoMLRL sends the raw prompt
            "team.ignore_eos=true",
            f"team.agents=[{{name: helper, system: '', max_completion_length: {n}}}, "
            f"{{name: writer, system: '', max_completion_length: {n}}}]",
            f"algorithm.num_generations={args.num_generations}",
            f"train.prompts_per_step={args.prompts_per_step}",
            "train.learning_rate=1e-6",
            "train.shuffle=false",
            "log.progress_bar=false",
        ]
        if args.micro_batch_size:
            overrides.append(f"train.micro_batch_size={args.micro_batch_size}")
        if one_pass:
            overrides.append("train.one_pass_lora=true")
        if backend:
            # A prompt plus 64 tokens fits 1024 positions; a 0.5 GiB KV cache keeps the engine
            # (one per base model, beside the trainer's own copy) small on a shared machine.
            overrides += [
                f"generation.backend={backend}",
                "generation.vllm_max_model_length=1024",
                "generation.vllm_kv_cache_gb=0.5",
            ]
        overrides += list(extra)  # a contender's own (KIND@KEY=VALUE), last: they win
        self.trainer = Trainer(load_config(None, overrides), task=task, run_dir=tempfile.mkdtemp())
        self.policies = policies
        self.model = next(iter(self.trainer.team.policies.values())).model

    def step(self) -> dict[str, float]:
        device = self.args.device
        sync(device)
        t0 = time.perf_counter()
        m = self.trainer.train_step()
        sync(device)
        wall = time.perf_counter() - t0
        if m["completion_length/mean"] != self.args.new_tokens:
            raise RuntimeError(
                f"completion length {m['completion_length/mean']}, expected "
                f"{self.args.new_tokens}: not the benchmark's work"
            )
        if device.startswith("cuda"):
            # The trainer's own clocks do not wait for queued GPU work (the optimizer step may
            # still run when time/update is read), so on CUDA the step is the synchronised wall
            # time and the update is everything after the rollout.
            return {
                "step_s": wall,
                "generate_s": m["time/generate"],
                "update_s": wall - m["time/rollout"],
            }
        return {
            "step_s": m["time/step"],
            "generate_s": m["time/generate"],
            "update_s": m["time/update"],
        }


def model_shape(model) -> dict:
    """The base model's size for FLOP counts: parameters (a tied matrix once, adapters not
    counted), layers and hidden width."""
    seen, n = set(), 0
    for name, param in model.named_parameters(remove_duplicate=False):
        if "lora_" in name or id(param) in seen:
            continue
        seen.add(id(param))
        n += param.numel()
    cfg = model.config
    return {"n_params": n, "n_layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size}


def flops_per_token(ready: dict, seq: int) -> float:
    """Model FLOPs of the update per trained token (PaLM's count): 6 N for a full fine-tune (2 N
    forward, 4 N backward), 4 N for LoRA (no weight gradients of the frozen base), plus the
    attention's score and value products, 12 L d T per token over fwd + bwd at an average
    attended length T = seq / 2 (causal). The adapters' own FLOPs are left out (under 1 %)."""
    weights = (6 if ready.get("full", True) else 4) * ready["n_params"]
    return weights + 12 * ready["n_layers"] * ready["hidden"] * (seq / 2)


# Dense bf16 tensor-core peak (FLOP/s) of the cards MFU is reported against: the SXM parts'
# datasheet figure (H200 has the H100's arithmetic).
PEAK_BF16 = {"H100": 989e12, "H200": 989e12}


def peak_flops(gpu: str | None) -> float | None:
    return next((v for k, v in PEAK_BF16.items() if gpu and k in gpu), None)


def sync(device: str) -> None:
    """Wait for the GPU's queued work, so that a wall-clock interval covers it (no-op on CPU)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def serve(args) -> int:
    """Worker mode: build ``args.worker`` once, then answer step commands (see rounds.py)."""
    channel = rounds.protocol_stdout()
    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    from teamrl.team.models import load_tokenizer

    tok = load_tokenizer(args.model)
    texts = prompts(
        (args.warmup + args.rounds) * args.prompts_per_step, args.prompts, tok, args.prompt_tokens
    )
    t0 = time.perf_counter()
    kind, *overrides = args.worker.split("@")  # "lora@generation.fast_decode=off"
    if kind == "raw":
        contender = RawStep(args, texts)
    else:
        # "lora", "shared", "separate"; "vllm" is lora on vLLM, "vllm-shared" shared on vLLM...
        backend = "vllm" if kind.startswith("vllm") else None
        one_pass = kind == "lora-1pass"
        policies = "lora" if one_pass else kind.removeprefix("vllm").removeprefix("-")
        contender = TeamrlStep(
            args, texts, policies or "lora", backend, one_pass=one_pass, extra=overrides
        )
    rounds.send(
        channel,
        {
            "ready": True,
            "load_s": time.perf_counter() - t0,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "threads": torch.get_num_threads(),
            "prompt_tokens": len(tok(texts[0]).input_ids),
            **model_shape(contender.model),
            # Full fine-tuning computes weight gradients (6 N FLOPs a token); LoRA only the
            # activations' gradients through the frozen base (4 N).
            "full": kind in ("raw", "shared", "separate", "vllm-shared", "vllm-separate"),
        },
    )
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        timings = contender.step()
        if args.device.startswith("cuda"):  # with every step: a run cut short still has it
            timings["peak_cuda_gib"] = torch.cuda.max_memory_allocated() / 2**30
        rounds.send(channel, timings)
    final = {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}
    if args.device.startswith("cuda"):
        final["peak_cuda_gib"] = torch.cuda.max_memory_allocated() / 2**30
    rounds.send(channel, final)
    return 0


# ------------------------------------------------------------------------------------ parent
def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform()}


def worker_cmd(args, kind: str, python: str) -> list[str]:
    common = [
        "--rounds",
        str(args.rounds),
        "--warmup",
        str(args.warmup),
        "--model",
        args.model,
        "--new-tokens",
        str(args.new_tokens),
        "--num-generations",
        str(args.num_generations),
        "--prompts",
        args.prompts,
        "--prompts-per-step",
        str(args.prompts_per_step),
        "--prompt-tokens",
        str(args.prompt_tokens),
        "--micro-batch-size",
        str(args.micro_batch_size),
        "--threads",
        str(args.threads),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
    ]
    return [python, str(Path(__file__).resolve()), "--worker", kind, *common]


def comlrl_cmd(args, python: str, tmp: Path) -> list[str]:
    from teamrl.team.models import resolve

    pfile = tmp / "prompts.json"
    pfile.write_text(json.dumps(prompts(args.warmup + args.rounds, args.prompts)))
    return [
        python,
        str(HERE / "comlrl_worker.py"),
        "--serve",
        "--model-dir",
        resolve(args.model),
        "--prompts",
        str(pfile),
        "--steps",
        str(args.warmup + args.rounds),
        "--warmup",
        "0",
        "--num-generations",
        str(args.num_generations),
        "--max-new-tokens",
        str(args.new_tokens),
        "--threads",
        str(args.threads),
        "--out",
        str(tmp / "c.json"),
    ]


def checkout(rev: str, tmp: Path) -> Path:
    """teamrl's source at git revision ``rev``, extracted under ``tmp/<full sha>`` (the
    repository's worktrees and index are left alone)."""
    import subprocess

    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        raise SystemExit(f"--contenders: #{rev}: not a commit of {ROOT}")
    dest = tmp / found.stdout.strip()
    if not dest.exists():
        dest.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", dest.name, "teamrl"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def start_contenders(args, tmp: Path) -> tuple[dict, dict[str, str]]:
    """Start every wanted contender; those that cannot run are returned as notes instead."""
    wanted = [c.strip() for c in args.contenders.split(",") if c.strip()]
    revisions = {}  # contender -> the folder holding teamrl at its #REV
    for c in wanted:
        spec, _, rev = c.partition("#")
        kind, *overrides = spec.split("@")
        if rev:
            if kind not in TEAMRL + EXTRA or kind.startswith("vllm"):
                raise SystemExit(f"--contenders: {c!r}: #REV applies to teamrl contenders only")
            revisions[c] = checkout(rev, tmp)
        if kind not in ALL + EXTRA:
            choices = ", ".join(ALL + EXTRA)
            raise SystemExit(f"--contenders: unknown {kind!r}; choose from {choices}")
        if overrides and kind in ("raw", "comlrl"):
            raise SystemExit(f"--contenders: {c!r}: overrides apply to teamrl contenders only")
        if any("=" not in o for o in overrides):
            raise SystemExit(f"--contenders: {c!r}: each override after '@' is KEY=VALUE")
    if args.skip_comlrl and "comlrl" in wanted:
        wanted.remove("comlrl")
    if "comlrl" in wanted and (args.prompts_per_step != 1 or args.prompt_tokens):
        raise SystemExit("--contenders comlrl runs one prompt a step of --prompts short or long")
    if args.skip_vllm:
        wanted = [c for c in wanted if not c.startswith("vllm")]
    # The checkout first, then whatever PYTHONPATH already held (wheels carried to a machine
    # without network are often put on it).
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}
    started, notes = {}, {}
    for kind in wanted:
        env_k = dict(env)
        name = "comlrl 1.4.3" if kind == "comlrl" else kind if kind == "raw" else f"teamrl {kind}"
        if kind == "comlrl":
            py = HERE / ".venv-comlrl" / "bin" / "python"
            if not py.exists():
                import subprocess

                subprocess.run(["bash", str(HERE / "setup_comlrl.sh")], check=True)
            env_k.pop("PYTHONPATH")  # the worker never imports teamrl
            cmd = comlrl_cmd(args, str(py), tmp)
        elif kind.startswith("vllm"):
            py = Path(args.vllm_python)
            if not py.exists():
                notes[name] = f"skipped: no {py} (build it with `make test-vllm`)"
                continue
            env_k["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process engine
            cmd = worker_cmd(args, kind, str(py))
        elif kind in revisions:
            env_k["PYTHONPATH"] = os.pathsep.join([str(revisions[kind]), env["PYTHONPATH"]])
            notes[name] = f"teamrl as at commit {revisions[kind].name}"
            cmd = worker_cmd(args, kind.partition("#")[0], sys.executable)
        else:
            cmd = worker_cmd(args, kind, sys.executable)
        print(f"starting {name} ...", flush=True)
        try:
            started[name] = rounds.WorkerProcess(
                name,
                cmd,
                tmp / f"{kind.replace('/', '_')}.log",
                env=env_k,
                wait=not args.parallel_start,
            )
        except RuntimeError as err:
            if not kind.startswith("vllm"):
                raise
            notes[name] = "skipped: " + str(err).splitlines()[-1][:300]
    for name, worker in list(started.items()):  # --parallel-start: they loaded side by side
        try:
            worker.wait_ready()
        except RuntimeError as err:
            if not name.startswith("teamrl vllm"):
                raise
            notes[name] = "skipped: " + str(err).splitlines()[-1][:300]
            started.pop(name).close()
    return started, notes


def parallel_warmup(contenders: dict, warmup: int, on_step) -> dict[str, str]:
    """The untimed warm-up rounds with every worker stepping at once (their compiles overlap);
    a worker that fails is dropped with its reason, as in the timed rounds."""
    dropped = {}
    for w in range(warmup):
        for worker in contenders.values():
            worker.send_step()
        for name, worker in list(contenders.items()):
            try:
                on_step(w - warmup, name, worker.read())
            except RuntimeError as err:
                dropped[name] = rounds.why_dropped(err)
                contenders.pop(name).close()
    return dropped


def short(name: str) -> str:
    """'teamrl lora' -> 'lora', 'comlrl 1.4.3' -> 'comlrl'."""
    return name.removeprefix("teamrl ").split()[0]


def spread(s: dict) -> tuple[str, str, str]:
    return (
        f"{s['median']:.2f}",
        f"{s['min']:.2f}–{s['max']:.2f}",
        f"{s['q1']:.2f}–{s['q3']:.2f} ({s['iqr']:.2f})",
    )


def markdown(result: dict) -> str:
    m, rep, ref = result["meta"], result["report"], result["reference"]
    # Without raw or CoMLRL there is nothing to divide by: the ratio column says so.
    vs = f"speed-up vs {ref} (median of per-round)" if ref else "speed-up (no raw or comlrl)"
    gpu = f" on {m['gpu']}" if m.get("gpu") else ""
    lines = [
        f"MAGRPO step, 2 agents x G={m['num_generations']} x {m['new_tokens']} tokens, "
        f"{Path(m['model']).name} {m.get('dtype', 'float32')}{gpu}, {m['prompts']} prompts. "
        f"{m['date']} UTC; {m['machine']['cores']} "
        f"cores ({m['machine']['cpu']}); torch {m['torch']}; load average "
        f"{m['loadavg_start'][0]:.2f} at start, {m['loadavg_end'][0]:.2f} at end; "
        f"{m.get('rounds_done', m['rounds'])} interleaved rounds ({m['order']} order) after "
        f"{m['warmup']} warm-up; {m.get('prompts_per_step', 1)} prompt(s) a step"
        + (f" of {m['prompt_tokens']} tokens" if m.get("prompt_tokens") else "")
        + (f", {m['micro_batch_size']} rows per forward" if m.get("micro_batch_size") else "")
        + ".",
        "",
        f"| contender | s/step median | min–max | IQR (Q1–Q3) | generate s | update s | "
        f"peak RSS GiB | {vs} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rep.items():
        med, rng, iqr = spread(row["step_s"])
        gen = f"{row['generate_s']['median']:.2f}" if "generate_s" in row else ""
        upd = f"{row['update_s']['median']:.2f}" if "update_s" in row else ""
        rss = result["peak_rss_gib"].get(name)
        ratio = f"{row['ratio_vs_reference']:.2f}x" if "ratio_vs_reference" in row else ""
        ratio = "1.00x" if name == ref else ratio
        rss_s = f"{rss:.1f}" if rss else ""
        lines.append(f"| {name} | {med} | {rng} | {iqr} | {gen} | {upd} | {rss_s} | {ratio} |")
    names = list(rep)
    lines += [
        "",
        "Per round (s/step" + (f"; speed-up vs {ref} in brackets):" if ref else "):"),
        "",
        "| round | order | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for r, order in enumerate(result["orders"]):
        cells = []
        for name in names:
            s = result["steps"][name][r]["step_s"]
            ratio = rep[name].get("ratios")
            cells.append(f"{s:.2f}" + (f" ({ratio[r]:.2f}x)" if ratio else ""))
        lines.append(
            f"| {r + 1} | {' '.join(short(n) for n in order)} | " + " | ".join(cells) + " |"
        )
    lines += ab_markdown(result)
    lines += throughput_markdown(result)
    gpu_peaks = {n: g for n, g in result.get("peak_cuda_gib", {}).items() if g is not None}
    if gpu_peaks:
        peaks = ", ".join(f"{n} {g:.1f}" for n, g in gpu_peaks.items())
        lines.append(f"\nPeak GPU memory (torch.cuda.max_memory_allocated, GiB): {peaks}.")
    for name, note in result["notes"].items():
        lines.append(f"\n{name}: {note}")
    return "\n".join(lines) + "\n"


def ab_markdown(result: dict) -> list[str]:
    """Each ``KIND@overrides`` or ``KIND#REV`` contender (B) against its plain ``KIND`` (A):
    the ratio of their medians and in how many rounds B was the faster, for the step,
    generation and update (the two stepped in the same rounds, so a slow spell of the machine
    hits both)."""
    steps, lines = result["steps"], []
    for b in steps:
        a = b.split("@")[0].split("#")[0]
        if b == a or a not in steps:
            continue
        if not lines:
            lines = ["", "A/B (B: with overrides or at a revision, A: its plain kind):", ""]
            lines += [
                "| B | step B / A | B faster | generate B / A | B faster | update B / A | B faster |"
            ]
            lines += ["|---|---|---|---|---|---|---|"]
        cells = [rounds.ab(steps[a], steps[b], k) for k in ("step_s", "generate_s", "update_s")]
        lines.append(f"| {b.removeprefix('teamrl ')} | " + " | ".join(cells) + " |")
    return lines


def throughput(result: dict) -> dict[str, dict]:
    """Per contender, from the medians: generated tokens/s, update tokens/s (every prompt and
    completion token scored), the update's model FLOP/s and MFU (None off the known cards)."""
    m = result["meta"]
    rows = 2 * m["num_generations"] * m["prompts_per_step"]
    peak = peak_flops(m.get("gpu"))
    out = {}
    for name, row in result["report"].items():
        ready = m["workers"].get(name, {})
        seq = ready.get("prompt_tokens", 0) + m["new_tokens"]
        t = {"rows": rows, "seq": seq, "first_step_s": result["first_step_s"].get(name)}
        if "generate_s" in row:
            t["generate_tokens_s"] = rows * m["new_tokens"] / row["generate_s"]["median"]
        if "update_s" in row and "n_params" in ready:
            tokens = rows * seq
            t["update_tokens_s"] = tokens / row["update_s"]["median"]
            t["update_flops_s"] = flops_per_token(ready, seq) * t["update_tokens_s"]
            t["mfu"] = t["update_flops_s"] / peak if peak else None
        out[name] = t
    return out


def throughput_markdown(result: dict) -> list[str]:
    rows = result["throughput"]
    peak = peak_flops(result["meta"].get("gpu"))
    lines = [
        "",
        f"Throughput (medians; {next(iter(rows.values()))['rows'] if rows else 0} sequences of "
        f"{next(iter(rows.values()))['seq'] if rows else 0} tokens a step; model FLOPs: "
        "`flops_per_token`; MFU against "
        + (f"{peak / 1e12:.0f} TFLOP/s dense bf16" if peak else "no known peak")
        + "):",
        "",
        "| contender | generated tokens/s | update tokens/s | update TFLOP/s | MFU | "
        "first step s (compiles) |",
        "|---|---|---|---|---|---|",
    ]
    for name, t in rows.items():
        gen = f"{t['generate_tokens_s']:.0f}" if "generate_tokens_s" in t else ""
        upd = f"{t['update_tokens_s']:.0f}" if "update_tokens_s" in t else ""
        tf = f"{t['update_flops_s'] / 1e12:.1f}" if "update_flops_s" in t else ""
        mfu = f"{100 * t['mfu']:.1f} %" if t.get("mfu") is not None else ""
        first = f"{t['first_step_s']:.1f}" if t.get("first_step_s") is not None else ""
        lines.append(f"| {name} | {gen} | {upd} | {tf} | {mfu} | {first} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds (>= 5 for a report)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    ap.add_argument("--model", default="smollm2-135m", help="teamrl model name (tiny-llama...)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--num-generations", type=int, default=4)
    ap.add_argument("--prompts", choices=["short", "long"], default="short")
    ap.add_argument("--prompts-per-step", type=int, default=1, help="dataset prompts per step")
    ap.add_argument(
        "--prompt-tokens", type=int, default=0, help="prompts of this many tokens (0: --prompts)"
    )
    ap.add_argument(
        "--micro-batch-size", type=int, default=0, help="rows per forward of the update (0: all)"
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=0,
        help="start no round that would end past this (0: none)",
    )
    ap.add_argument(
        "--parallel-start",
        action="store_true",
        help="load the workers and run the warm-up side by side (their compiles overlap)",
    )
    ap.add_argument("--order", choices=["rotate", "fixed"], default="rotate")
    ap.add_argument("--contenders", default=",".join(ALL), help=f"subset of {','.join(ALL)}")
    ap.add_argument("--skip-comlrl", action="store_true")
    ap.add_argument("--skip-vllm", action="store_true")
    ap.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--threads", type=int, default=0, help="torch threads per worker (0: default)")
    ap.add_argument("--device", default="cpu", help="model.device of every contender (cpu, cuda)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--out", default=None, help="output stem (default results/magrpo_step_<p>)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rounds < 1 or args.warmup < 0:
        raise SystemExit(f"--rounds >= 1 and --warmup >= 0, got {args.rounds}, {args.warmup}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.worker:
        return serve(args)

    import torch

    meta = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
        "machine": machine(),
        "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None,
        "torch": torch.__version__,
        "loadavg_start": os.getloadavg(),
        **{
            k: getattr(args, k)
            for k in (
                "model",
                "new_tokens",
                "num_generations",
                "prompts",
                "prompts_per_step",
                "prompt_tokens",
                "micro_batch_size",
                "budget_s",
                "rounds",
                "warmup",
                "order",
                "threads",
                "device",
                "dtype",
            )
        },
    }
    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="magrpo-bench-"))
    stem = Path(args.out) if args.out else HERE / "results" / f"magrpo_step_{args.prompts}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    contenders, notes = start_contenders(args, tmp)
    round_load, first_step, round_s, peak_cuda = [], {}, [], {}
    Path(f"{stem}.steps.jsonl").write_text("")

    def on_step(r, name, t):
        tag = "warm-up" if r < 0 else f"round {r + 1}"
        if r == -args.warmup:
            first_step[name] = t["step_s"]
        if "peak_cuda_gib" in t:
            peak_cuda[name] = max(peak_cuda.get(name, 0.0), t["peak_cuda_gib"])
        # Every step as it ends (warm-ups: round < 0), so that a run stopped mid-round keeps it.
        with open(f"{stem}.steps.jsonl", "a") as f:
            f.write(json.dumps({"round": r, "contender": name, **t}) + "\n")
        print(
            f"  {tag:<8} {name:<16} {t['step_s']:7.2f} s  (generate {t['generate_s']:.2f}, "
            f"update {t['update_s']:.2f})",
            flush=True,
        )

    def keep_going(r: int) -> bool:
        """Under --budget-s, start round r only if a round as long as the longest so far fits."""
        if not args.budget_s or not round_s:
            return True
        left = args.budget_s - (time.monotonic() - t_start)
        if left > 1.2 * max(round_s):
            return True
        notes["budget"] = (
            f"stopped after {r} of {args.rounds} rounds: --budget-s {args.budget_s:.0f} "
            f"(a round takes about {max(round_s):.0f} s, {left:.0f} s were left)"
        )
        return False

    def on_round(r, order):
        round_load.append(os.getloadavg()[0])
        round_s.append(-time.monotonic())

    def on_round_end(partial):
        round_s[-1] += time.monotonic()
        write(partial, {}, partial=True)

    def write(res: dict, finals: dict, partial: bool = False) -> dict:
        result = assemble(args, meta, contenders, res, finals, notes, round_load, first_step)
        result["peak_cuda_gib"] = {
            **peak_cuda,
            **{k: v for k, v in result["peak_cuda_gib"].items() if v},
        }
        if partial:
            result["notes"] = {**result["notes"], "partial": "written after a round; not final"}
        text = markdown(result)
        # .md and .json are appended to the stem, which may hold dots (step_qwen2.5-0.5b).
        Path(f"{stem}.md").write_text(text)
        Path(f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
        return result

    res = {"orders": [], "steps": {}, "dropped": {}}
    try:
        warmup = args.warmup
        if args.parallel_start and warmup:
            for name, why in parallel_warmup(contenders, warmup, on_step).items():
                notes[name] = f"dropped in the warm-up (not in the tables): {why}"
            warmup = 0
        res = rounds.run_rounds(
            contenders,
            args.rounds,
            warmup,
            args.order,
            on_step,
            on_round,
            keep_going=keep_going,
            on_round_end=on_round_end,
        )
    finally:
        finals = {name: c.close() for name, c in contenders.items()}
    result = write(res, finals)
    print("\n" + markdown(result))
    print(f"wrote {stem}.md and .json")
    return 0


def assemble(args, meta, contenders, res, finals, notes, round_load, first_step) -> dict:
    """The result (meta, rounds, report, throughput, memory, notes) of the rounds so far."""
    reference = "comlrl 1.4.3" if "comlrl 1.4.3" in contenders else "raw"
    if reference not in res["steps"]:
        reference = None
    notes = dict(notes)
    for name, why in res["dropped"].items():
        notes[name] = f"dropped during the run (not in the tables): {why}"
    done = len(res["orders"])
    if done < 5:
        notes["rounds"] = f"only {done} rounds: a smoke run, not a measurement (use >= 5)."
    result = {
        "meta": {
            **meta,
            "loadavg_end": os.getloadavg(),
            "loadavg_per_round": round_load,
            "rounds_done": done,
            "workers": {n: c.ready for n, c in contenders.items()},
        },
        "reference": reference,
        "orders": res["orders"],
        "steps": res["steps"],
        "report": rounds.report(res["steps"], reference) if done else {},
        "first_step_s": dict(first_step),
        "peak_rss_gib": {n: f.get("peak_rss_gib") for n, f in finals.items()},
        "peak_cuda_gib": {n: f.get("peak_cuda_gib") for n, f in finals.items()},
        "notes": notes,
    }
    result["throughput"] = throughput(result)
    return result


if __name__ == "__main__":
    sys.exit(main())
