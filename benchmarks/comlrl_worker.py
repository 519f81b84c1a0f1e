"""Time CoMLRL 1.4.3's MAGRPOTrainer on the benchmark's MAGRPO step.

Runs inside the venv that ``benchmarks/setup_comlrl.sh`` builds; it never imports teamrl.
The work per step is one MAGRPO step as CoMLRL does it: 2 agents (two full copies of the
model, each with its own AdamW), single turn, G completions per agent from one prompt, one
optimiser step per agent per prompt (``rollout_buffer_size=1``).

Every completion is forced to exactly ``--max-new-tokens`` tokens with ``min_new_tokens``,
which CoMLRL forwards from ``trainer.train(**kwargs)`` to ``model.generate``: EOS is masked
until the length is reached, so the model never stops early and no pads are produced. The
worker checks each generated batch and raises if a completion has another length or an EOS.

Timing wraps three of the trainer's methods on the instance (the package files are not
touched): ``_train_step_returns`` (one dataset item = one step, generation + reward + update),
``_generate_completions`` (one call per agent) and ``_drain_ready_buffers`` (the updates),
plus each optimiser's ``step`` (the AdamW share of the update).

Usage (inside the comlrl venv):
    python benchmarks/comlrl_worker.py --model-dir DIR --prompts prompts.json \\
        --steps 3 --warmup 1 --out comlrl.json

``--serve`` makes it a long-lived contender for magrpo_step.py's interleaved rounds (the
protocol of benchmarks/rounds.py): it prints ``{"ready": true}`` once the trainer is built,
then runs one dataset item per ``step`` line on stdin and answers its timings as one JSON line.
CoMLRL's own ``train()`` loop drives the items; the wrapper around ``_train_step_returns``
blocks on stdin before each item. A step's answer is sent only when the worker is idle again
(at the next item, or when ``train()`` returns), so CoMLRL's bookkeeping between items never
overlaps another contender's timed step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

# CoMLRL imports wandb at module level; make sure it never tries to log in or reach a host.
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

PEER = "comlrl 1.4.3"


@dataclass
class WorkerArgs:
    """The benchmark's settings, as the CLI gives them."""

    model_dir: str = field(metadata={"help": "Plain HF folder of SmolLM2-135M-Instruct (fp32)."})
    prompts: str = field(metadata={"help": "JSON file: a list of prompt strings, one per step."})
    out: str = field(metadata={"help": "Where to write the result JSON."})
    steps: int = field(default=3, metadata={"help": "Timed steps (dataset items)."})
    warmup: int = field(default=1, metadata={"help": "Untimed steps run first."})
    num_generations: int = field(default=4, metadata={"help": "G, completions per agent."})
    max_new_tokens: int = field(default=64, metadata={"help": "Exact length of each completion."})
    chat_template: bool = field(
        default=False,
        metadata={
            "help": "Wrap each prompt as one user message in the tokenizer's chat template "
            "(default: send it verbatim, as CoMLRL's default formatter does)."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed for python, numpy and torch."})
    threads: int = field(
        default=0, metadata={"help": "torch.set_num_threads (0 = torch's default)."}
    )
    serve: bool = field(
        default=False,
        metadata={"help": "Answer 'step' commands on stdin (see the module docstring)."},
    )


def parse_args(argv: list[str] | None = None) -> WorkerArgs:
    """Parse the CLI; ``--model-dir`` defaults to ``$TEAMRL_CACHE/smollm2-135m-instruct``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cache = os.environ.get("TEAMRL_CACHE")
    default_dir = str(Path(cache) / "smollm2-135m-instruct") if cache else None
    p.add_argument("--model-dir", default=default_dir, required=default_dir is None)
    p.add_argument("--prompts", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--chat-template", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--serve", action="store_true")
    args = WorkerArgs(**vars(p.parse_args(argv)))
    if args.steps < 1:
        raise ValueError(f"--steps: expected >= 1, got {args.steps}")
    if args.warmup < 0:
        raise ValueError(f"--warmup: expected >= 0, got {args.warmup}")
    if args.num_generations < 2:
        raise ValueError(f"--num-generations: expected >= 2, got {args.num_generations}")
    if args.threads < 0:
        raise ValueError(f"--threads: expected >= 0, got {args.threads}")
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens: expected >= 1, got {args.max_new_tokens}")
    if not (Path(args.model_dir) / "config.json").is_file():
        raise ValueError(f"--model-dir: no config.json in {args.model_dir!r}")
    return args


def load_prompts(path: str, n: int) -> list[str]:
    """``n`` prompts from a JSON list of strings, cycling through the list if it is shorter."""
    prompts = json.loads(Path(path).read_text())
    if not isinstance(prompts, list) or not prompts:
        raise ValueError(f"--prompts: expected a non-empty JSON list in {path!r}")
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise ValueError(f"--prompts[{i}]: expected a string, got {type(p).__name__}")
    return [prompts[i % len(prompts)] for i in range(n)]


def distinct_word_reward(completions_1: list[str], completions_2: list[str]) -> list[float]:
    """Team reward of one joint action: 0.1 * (distinct words of agent 2 - of agent 1).

    Cheap and deterministic, and it varies across samples so the advantages are non-zero.
    CoMLRL calls it once per joint action with one-element lists (its N-positional form).
    """
    c1, c2 = completions_1[0], completions_2[0]
    return [0.1 * (len(set(c2.split())) - len(set(c1.split())))]


def peak_rss_gib() -> float:
    """Peak resident set size of this process (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


class StepTimer:
    """Wraps the trainer's per-item, generation and update methods (and the AdamW steps).

    The wrappers are instance attributes, so CoMLRL's ``self._method(...)`` calls hit them
    while the installed package stays as it is.
    """

    def __init__(
        self,
        trainer: MAGRPOTrainer,
        max_new_tokens: int,
        eos_ids: set[int],
        before_step=None,
    ):
        self.before_step = before_step  # serve mode: wait for the next "step" command
        self.max_new_tokens = max_new_tokens
        self.eos_ids = eos_ids
        self.step_s: list[float] = []
        self.generate_s: list[float] = []
        self.update_s: list[float] = []
        self.optimizer_s: list[float] = []  # the AdamW steps alone, inside update_s
        self.completion_lengths: list[list[int]] = []  # per step, per agent x sample
        self.prompt_tokens: list[list[int]] = []  # per step, per agent
        self._gen = 0.0
        self._upd = 0.0
        self._opt = 0.0
        self._lens: list[int] = []
        self._ptoks: list[int] = []

        step, gen, drain = (
            trainer._train_step_returns,
            trainer._generate_completions,
            trainer._drain_ready_buffers,
        )

        def timed_step(batch_item, **kwargs):
            if self.before_step:
                self.before_step(self)
            self._gen = self._upd = self._opt = 0.0
            self._lens, self._ptoks = [], []
            t0 = time.perf_counter()
            out = step(batch_item, **kwargs)
            self.step_s.append(time.perf_counter() - t0)
            self.generate_s.append(self._gen)
            self.update_s.append(self._upd)
            self.optimizer_s.append(self._opt)
            self.completion_lengths.append(self._lens)
            self.prompt_tokens.append(self._ptoks)
            return out

        def timed_generate(*args, **kwargs):
            t0 = time.perf_counter()
            out = gen(*args, **kwargs)
            self._gen += time.perf_counter() - t0
            self._check_lengths(out)
            return out

        def timed_drain(ready_agents):
            t0 = time.perf_counter()
            out = drain(ready_agents)
            self._upd += time.perf_counter() - t0
            return out

        trainer._train_step_returns = timed_step
        trainer._generate_completions = timed_generate
        trainer._drain_ready_buffers = timed_drain
        for opt in trainer.optimizers:
            opt.step = self._timed_optimizer_step(opt.step)

    def _timed_optimizer_step(self, step):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            out = step(*args, **kwargs)
            self._opt += time.perf_counter() - t0
            return out

        return timed

    def _check_lengths(self, out: dict) -> None:
        # completion_input_ids holds what CoMLRL later scores in its loss: the generated
        # tokens after the prompt, pads included. Every one must be max_new_tokens real tokens.
        self._ptoks.append(int(out["prompt_input_ids"].shape[1]))
        for i, toks in enumerate(out["completion_input_ids"][0]):
            n, eos = len(toks), sum(int(t) in self.eos_ids for t in toks.tolist())
            if n != self.max_new_tokens or eos:
                raise RuntimeError(
                    f"completion {i}: expected {self.max_new_tokens} tokens and no EOS, "
                    f"got {n} tokens with {eos} EOS"
                )
            self._lens.append(n)


class Quit(Exception):
    """The parent sent ``quit`` (or closed stdin) before the dataset ran out."""


class Server:
    """Serve mode's end of the protocol in benchmarks/rounds.py."""

    def __init__(self):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import rounds  # stdlib only: safe in this venv, and it never imports teamrl

        self.rounds = rounds
        self.channel = rounds.protocol_stdout()
        self.answered = 0
        self.quit = False

    def send(self, obj: dict) -> None:
        self.rounds.send(self.channel, obj)

    def answer_done(self, timer: StepTimer) -> None:
        """Send the timings of every finished step not answered yet."""
        for i in range(self.answered, len(timer.step_s)):
            keys = ("step_s", "generate_s", "update_s", "optimizer_s")
            self.send({k: getattr(timer, k)[i] for k in keys})
        self.answered = len(timer.step_s)

    def before_step(self, timer: StepTimer) -> None:
        self.answer_done(timer)  # the previous step's answer: the worker is idle from here
        if sys.stdin.readline().strip() != "step":
            self.quit = True
            raise Quit

    def finish(self, timer: StepTimer) -> None:
        self.answer_done(timer)
        while not self.quit:  # the dataset ran out: refuse further steps until quit
            line = sys.stdin.readline().strip()
            if line in ("quit", ""):
                break
            self.send({"error": "comlrl worker: dataset exhausted; pass a larger --steps"})
        self.send({"peak_rss_gib": peak_rss_gib()})


def versions() -> dict[str, str]:
    """Versions of the packages that do the work, and of the interpreter."""
    names = ["comlrl", "torch", "transformers", "datasets", "tokenizers", "numpy"]
    out = {name: metadata.version(name) for name in names}
    out["python"] = platform.python_version()
    return out


def run(args: WorkerArgs) -> dict:
    """Build the trainer, run ``warmup + steps`` items, and return the result dict."""
    server = Server() if args.serve else None
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    tok = AutoTokenizer.from_pretrained(args.model_dir)
    # SmolLM2's pad token is <|im_end|>, which CoMLRL (1.4.3) looks for inside the prompt to
    # find the prompt's end; with the chat template that cuts the prompt after the system
    # message. <|endoftext|> never occurs in the prompts, so CoMLRL sees the whole prompt.
    tok.pad_token = "<|endoftext|>"

    def formatter(item: dict) -> str:
        if not args.chat_template:
            return item["prompt"]
        msgs = [{"role": "user", "content": item["prompt"]}]
        return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    n_items = args.warmup + args.steps
    dataset = Dataset.from_list([{"prompt": p} for p in load_prompts(args.prompts, n_items)])
    config = MAGRPOConfig(
        num_train_epochs=1,
        num_agents=2,
        num_turns=1,
        num_generations=args.num_generations,
        max_new_tokens=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,  # 0 disables top-k; None would fall back to generate's default of 50
        rollout_buffer_size=1,
        train_batch_size=1,
        eval_interval=0,  # no evaluation inside the timed loop
        logging_steps=1,
    )
    t0 = time.perf_counter()
    trainer = MAGRPOTrainer(
        agent_model=args.model_dir,  # CoMLRL loads one full copy per agent
        num_agents=2,
        tokenizer=tok,
        train_dataset=dataset,
        reward_func=distinct_word_reward,
        formatters=formatter,
        args=config,
    )
    load_s = time.perf_counter() - t0
    for i, agent in enumerate(trainer.agents):
        dtype = next(agent.parameters()).dtype
        if dtype != torch.float32:
            raise RuntimeError(f"agent {i}: expected float32 weights, got {dtype}")
    if trainer.agents[0] is trainer.agents[1]:
        raise RuntimeError("agents: expected two separate model copies, got one shared")

    # A completion that stopped early would hold an EOS (and pads equal to EOS for SmolLM2).
    eos_ids = {tok.eos_token_id}
    gen_eos = trainer.agents[0].generation_config.eos_token_id
    eos_ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
    eos_ids.discard(None)
    timer = StepTimer(
        trainer, args.max_new_tokens, eos_ids, before_step=server.before_step if server else None
    )
    if server:
        server.send(
            {
                "ready": True,
                "load_s": load_s,
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
            }
        )

    # CoMLRL forwards train(**kwargs) to generate(); min_new_tokens masks EOS until then.
    try:
        trainer.train(min_new_tokens=args.max_new_tokens)
    except Quit:
        pass
    if server:
        server.finish(timer)
    elif len(timer.step_s) != n_items:
        raise RuntimeError(f"steps: expected {n_items} dataset items, timed {len(timer.step_s)}")

    timed = slice(args.warmup, None)
    s_per_step = timer.step_s[timed]
    return {
        "peer": PEER,
        "s_per_step": s_per_step,
        "median_s_per_step": statistics.median(s_per_step) if s_per_step else None,
        "peak_rss_gib": peak_rss_gib(),
        "generate_s": timer.generate_s[timed],
        "update_s": timer.update_s[timed],
        "optimizer_s": timer.optimizer_s[timed],
        "warmup_s_per_step": timer.step_s[: args.warmup],
        "load_s": load_s,
        "completion_lengths": timer.completion_lengths[timed],
        "prompt_tokens": timer.prompt_tokens[timed],
        "settings": {
            "agents": 2,
            "num_generations": args.num_generations,
            "max_new_tokens": args.max_new_tokens,
            "min_new_tokens": args.max_new_tokens,
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": 0,
            "rollout_buffer_size": 1,
            "chat_template": args.chat_template,
            "steps": args.steps,
            "warmup": args.warmup,
            "torch_threads": torch.get_num_threads(),
            "device": str(trainer.device),
        },
        # 1/5/15-minute load averages: the 2 cores are shared, so a busy machine inflates times.
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
        "versions": versions(),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = run(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if not result["s_per_step"]:
        return
    print(
        f"{PEER}: median {result['median_s_per_step']:.2f} s/step "
        f"(generate {statistics.median(result['generate_s']):.2f} s, "
        f"update {statistics.median(result['update_s']):.2f} s, of which AdamW "
        f"{statistics.median(result['optimizer_s']):.2f} s), "
        f"peak RSS {result['peak_rss_gib']:.2f} GiB",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
