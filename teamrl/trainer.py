"""The training loop, top to bottom:

    for step in range(max_steps):
        examples = data.next(prompts_per_step)
        rollout  = joint_rollout(team, env, examples)        # samples with rewards and returns
        compute_advantages(samples, baseline, scale_rewards)  # per group
        for policy in team.policies: update(policy, its samples)   # clipped PG, AdamW
        log metrics; evaluate every K steps; checkpoint every K steps (atomically)

The trainer is the only module that knows the config, the team, the env and the algorithm.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from teamrl.algorithms.advantages import advantage_warnings, compute_advantages
from teamrl.algorithms.losses import collate, policy_loss, token_logprobs
from teamrl.config import Config, ConfigError, dump_config, from_dict, to_dict
from teamrl.envs.base import Task, task_from_config
from teamrl.envs.sequential import SequentialTurns
from teamrl.logging import RunLogger
from teamrl.rollout.at_tree import agent_turn_rollout
from teamrl.rollout.common import RolloutResult
from teamrl.rollout.joint_tree import joint_rollout
from teamrl.sample import Sample
from teamrl.team import Policy, Team


class DataStream:
    """Examples in a seeded order per epoch; the position (epoch, index) is checkpointed."""

    def __init__(self, examples, seed: int, shuffle: bool):
        if len(examples) == 0:
            raise ValueError("the task's training split is empty")
        self.examples, self.seed, self.shuffle = examples, seed, shuffle
        self.epoch, self.index = 0, 0
        self._order = self._make_order()

    def _make_order(self) -> list[int]:
        order = list(range(len(self.examples)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
        return order

    def next(self, n: int) -> list[tuple[int, dict]]:
        out = []
        for _ in range(n):
            if self.index >= len(self._order):
                self.epoch, self.index = self.epoch + 1, 0
                self._order = self._make_order()
            i = self._order[self.index]
            self.index += 1
            out.append((i, self.examples[i]))
        return out

    def state(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load(self, state: dict) -> None:
        self.epoch, self.index = state["epoch"], state["index"]
        self._order = self._make_order()


def lr_lambda(cfg: Config):
    t = cfg.train

    def f(step: int) -> float:
        if step < t.warmup_steps:
            return (step + 1) / (t.warmup_steps + 1)
        if t.lr_scheduler_type == "constant":
            return 1.0
        span = max(1, t.max_steps - t.warmup_steps)
        progress = min(1.0, (step - t.warmup_steps) / span)
        if t.lr_scheduler_type == "linear":
            shape = 1.0 - progress
        else:
            shape = 0.5 * (1.0 + math.cos(math.pi * progress))
        return t.min_lr_ratio + (1 - t.min_lr_ratio) * shape

    return f


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class Trainer:
    def __init__(self, cfg: Config, task: Task | None = None, run_dir: str | Path | None = None):
        self.cfg = cfg
        set_seed(cfg.seed)
        self.task = task or task_from_config(cfg.env)
        if cfg.env.turn_order:
            inner = self.task.make_env
            order = list(cfg.env.turn_order)
            self.task = dataclasses.replace(
                self.task, make_env=lambda: SequentialTurns(inner(), order)
            )
        env_agents = list(self.task.make_env().agents)
        names = [a.name for a in cfg.team.agents]
        if names != env_agents:
            raise ConfigError(
                f"team.agents: names {names} must match the agents of task "
                f"{self.task.name!r}, in order: {env_agents}"
            )
        for w in advantage_warnings(cfg.algorithm.baseline, cfg.algorithm.scale_rewards):
            warnings.warn(w, stacklevel=2)
        self.team = Team(cfg, self.task.agents)
        for pol in self.team.policies.values():
            self._make_optimizer(pol)
        self.data = DataStream(self.task.train, cfg.seed, cfg.train.shuffle)
        self.step = 0
        self.nan_skips = 0
        self.run_dir = Path(run_dir) if run_dir else Path(cfg.log.output_dir) / cfg.run_name
        self.logger: RunLogger | None = None
        self.last_eval: RolloutResult | None = None  # the latest evaluation's episodes
        self._warned_eval_on_train = False

    # --- optimisation ---------------------------------------------------------------------------

    def _make_optimizer(self, pol: Policy) -> None:
        t = self.cfg.train
        params = pol.parameters()
        if not params:
            raise RuntimeError(f"policy {pol.name!r} has no trainable parameters")
        fused = {"fused": True} if all(p.dtype == torch.float32 for p in params) else {}
        pol.optimizer = torch.optim.AdamW(
            params,
            lr=t.learning_rate,
            betas=(t.adam_beta1, t.adam_beta2),
            weight_decay=t.weight_decay,
            **fused,
        )
        pol.scheduler = torch.optim.lr_scheduler.LambdaLR(pol.optimizer, lr_lambda(self.cfg))

    def update(self, pol: Policy, samples: list[Sample]) -> dict[str, float]:
        """num_iterations passes of num_mini_batches clipped policy-gradient steps on one
        policy's samples.

        The old log-probs are the policy's *before its first optimizer step*. The first minibatch
        of pass 1 takes them from its own forward, detached, so its ratio is exactly 1. When more
        steps follow, pass 1's other minibatches get theirs from a no-grad forward made before
        that first step: taken lazily, after earlier minibatches have stepped, they would give
        ratio 1 against a policy that has already moved, and those steps would never be clipped.
        """
        a, t = self.cfg.algorithm, self.cfg.train
        pol.activate()
        pol.model.train()
        device = next(pol.model.parameters()).device
        pad = pol.engine.pad_id
        max_len = max(self.team.agents[s.agent].max_completion_length for s in samples)
        keys = ["loss", "clip_fraction", "entropy", "grad_norm", "ratio", "logp_diff"]
        keys += ["ratio_dev_first_pass"] + (["kl"] if a.beta > 0 else [])  # no KL when beta == 0
        stats: dict[str, list[float]] = {k: [] for k in keys}

        def chunks(mb: list[Sample]) -> list[list[Sample]]:  # micro-batches (grad accumulation)
            size = t.micro_batch_size or len(mb)
            return [mb[i : i + size] for i in range(0, len(mb), size)]

        # Every pass's minibatches up front, so pass 1's old log-probs can be taken before a step.
        passes: list[list[list[Sample]]] = []
        order = list(range(len(samples)))
        for it in range(a.num_iterations):
            random.Random(self.cfg.seed + 7919 * self.step + it).shuffle(order)
            mbs = [order[i :: t.num_mini_batches] for i in range(t.num_mini_batches)]
            passes.append([[samples[i] for i in mb] for mb in mbs if mb])

        old_logp: dict[int, torch.Tensor] = {}  # id(sample) -> pre-update log-probs, unpadded

        def keep(chunk: list[Sample], logp: torch.Tensor) -> None:
            for s, row in zip(chunk, logp):
                old_logp[id(s)] = row[: len(s.completion_ids)]

        if sum(len(p) for p in passes) > 1:
            with torch.no_grad():
                for mb in passes[0][1:]:
                    for chunk in chunks(mb):
                        keep(chunk, token_logprobs(pol.model, collate(chunk, pad).to(device))[0])

        stepped = False
        for it, minibatches in enumerate(passes):
            for j, mb in enumerate(minibatches):
                first_step = it == 0 and j == 0  # the policy has not moved yet
                step_tokens = float(sum(len(s.completion_ids) for s in mb))
                pol.optimizer.zero_grad(set_to_none=True)
                finite = True
                for chunk in chunks(mb):
                    batch = collate(chunk, pad).to(device)
                    logp, entropy = token_logprobs(pol.model, batch, with_entropy=(it == 0))
                    mask = batch.completion_mask
                    if first_step:
                        keep(chunk, logp.detach())
                    old = logp.detach().clone()  # pads keep ratio 1 (and are masked anyway)
                    for i, s in enumerate(chunk):
                        old[i, : len(s.completion_ids)] = old_logp[id(s)]
                    if it == 0:
                        diff = ((old - batch.sampler_logprobs).abs() * mask).sum() / mask.sum()
                        stats["logp_diff"].append(float(diff))
                        stats["entropy"].append(float((entropy * mask).sum() / mask.sum()))
                    ref = None
                    if a.beta > 0:
                        with torch.no_grad(), pol.reference() as ref_model:
                            ref, _ = token_logprobs(ref_model, batch)
                    out = policy_loss(
                        logp,
                        old,
                        batch.advantages,
                        mask,
                        loss_type=a.loss_type,
                        epsilon=a.epsilon,
                        epsilon_high=a.epsilon_high,
                        ref_logp=ref,
                        beta=a.beta,
                        kl_estimator=a.kl_estimator,
                        max_completion_length=max_len,
                        step_tokens=step_tokens,
                    )
                    # dapo is already normalised by the step's tokens; the others average chunks.
                    loss = out.loss if a.loss_type == "dapo" else out.loss * len(chunk) / len(mb)
                    if not torch.isfinite(loss):
                        if t.nan_policy == "error":
                            raise FloatingPointError(
                                f"non-finite loss for policy {pol.name!r} at step {self.step} "
                                f"(iteration {it}); set train.nan_policy=skip to skip and count "
                                "such updates"
                            )
                        finite = False
                    if not finite:
                        continue  # no backward; the first step's later chunks still keep old logp
                    loss.backward()
                    stats["loss"].append(
                        float(loss.detach())
                        * (1 if a.loss_type == "dapo" else len(mb) / len(chunk))
                    )
                    if out.kl is not None:
                        stats["kl"].append(out.kl)
                    stats["clip_fraction"].append(out.clip_fraction)
                    stats["ratio"].append(out.ratio_mean)
                    if first_step:  # exactly 0 by construction: a check, not a measurement
                        stats["ratio_dev_first_pass"].append(out.ratio_max_dev)
                if not finite:
                    self.nan_skips += 1
                    pol.optimizer.zero_grad(set_to_none=True)
                    continue
                params = pol.parameters()
                if t.max_grad_norm is not None:
                    norm = torch.nn.utils.clip_grad_norm_(params, t.max_grad_norm)
                else:
                    norm = torch.norm(
                        torch.stack([p.grad.norm() for p in params if p.grad is not None])
                    )
                stats["grad_norm"].append(float(norm))
                pol.optimizer.step()
                stepped = True
        # The LR schedule is indexed by trainer step, so it advances even when every step of
        # this update was skipped (NaN): LR(step) does not depend on skips, and the scheduler
        # state is checkpointed, so resume stays exact. torch warns about that order once; here
        # it is intended.
        with warnings.catch_warnings():
            if not stepped:
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step")
            pol.scheduler.step()
        out = {k: (sum(v) / len(v) if v else float("nan")) for k, v in stats.items()}
        out["lr"] = pol.scheduler.get_last_lr()[0]
        return out

    # --- one step -----------------------------------------------------------------------------

    def rollout(self, examples, greedy: bool = False, single_path: bool = False) -> RolloutResult:
        """The configured rollout shape: joint tree (MAGRPO), agent-turn tree, or flat GRPO.

        ``single_path`` (evaluation): one sample per node and no reward-based early stop, so
        no branch is ever chosen by its reward (that would be an oracle at test time).
        """
        a = self.cfg.algorithm
        common = dict(
            num_generations=1 if single_path else a.num_generations,
            max_turns=self.cfg.env.max_turns,
            greedy=greedy,
            reward_workers=self.cfg.env.reward_workers,
        )
        if a.name == "magrpo":
            return joint_rollout(
                self.team,
                self.task.make_env,
                examples,
                joint_mode=a.joint_mode,
                discount=1.0 if a.discount is None else a.discount,
                early_termination_threshold=None if single_path else a.early_termination_threshold,
                ignore_eos=self.cfg.team.ignore_eos,
                **common,
            )
        return agent_turn_rollout(
            self.team,
            self.task.make_env,
            examples,
            tree=(a.name == "at_grpo"),
            selection=a.selection,
            selection_temperature=a.selection_temperature,
            alpha=a.alpha,
            discount=a.discount,
            seed=self.cfg.seed * 100_003 + self.step,
            **common,
        )

    def train_step(self) -> dict[str, float]:
        cfg = self.cfg
        t0 = time.perf_counter()
        examples = self.data.next(cfg.train.prompts_per_step)
        result = self.rollout(examples)
        t_rollout = time.perf_counter() - t0
        metrics: dict[str, float] = {"step": self.step + 1}
        metrics.update(result.metrics)
        metrics.update(
            compute_advantages(result.samples, cfg.algorithm.baseline, cfg.algorithm.scale_rewards)
        )
        train_samples = result.samples
        if cfg.algorithm.filter_groups:
            train_samples = drop_flat_groups(train_samples)
            metrics["filtered_samples_fraction"] = 1 - len(train_samples) / len(result.samples)
        t1 = time.perf_counter()
        for name, pol in self.team.policies.items():
            mine = [s for s in train_samples if s.policy == name]
            if not mine:
                continue
            for k, v in self.update(pol, mine).items():
                metrics[f"{k}/{name}"] = v
        t_update = time.perf_counter() - t1
        self.step += 1
        gen_s = result.stats["time/generate"]
        metrics.update(
            {
                "time/rollout": t_rollout,
                "time/generate": gen_s,
                "time/reward": result.stats["time/reward"],
                "time/update": t_update,
                "time/step": time.perf_counter() - t0,
                "tokens_per_second": result.stats["tokens/generated"] / max(gen_s, 1e-9),
                "nan_skips": float(self.nan_skips),
                "epoch": float(self.data.epoch),
            }
        )
        if self.logger is not None:
            self.logger.log_samples(
                sample_rows(result.samples, self.step, cfg.log.num_completions_to_log)
            )
        return metrics

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Greedy single-path episodes on the held-out split (never the test split).

        A task with no eval split is evaluated on its first training examples instead: never
        silently, but with a warning (once) and ``eval/on_train_split = 1`` in the metrics.
        """
        on_train = not self.task.eval
        split = self.task.train if on_train else self.task.eval
        n = min(self.cfg.eval.num_examples, len(split))
        if on_train and not self._warned_eval_on_train:
            self._warned_eval_on_train = True
            warnings.warn(
                f"task {self.task.name!r} has no eval split: evaluation uses its first {n} "
                "TRAINING examples, so eval/* scores are not held-out (eval/on_train_split=1). "
                "Give the Task an eval split for a held-out score.",
                stacklevel=2,
            )
        examples = [(i, split[i]) for i in range(n)]
        # eval never shifts the training RNG streams (CPU and every CUDA device)
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=cuda):
            result = self.rollout(examples, greedy=self.cfg.eval.greedy, single_path=True)
        self.last_eval = result
        m = result.metrics
        keep = ("reward", "completion", "success", "turns")
        out = {f"eval/{k}": v for k, v in m.items() if k.startswith(keep)}
        out["eval/on_train_split"] = float(on_train)
        return out

    # --- the loop -----------------------------------------------------------------------------

    def train(self, resume: bool = False) -> list[dict]:
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not resume and (self.run_dir / "metrics.jsonl").exists():
            if not cfg.log.overwrite:
                raise FileExistsError(
                    f"{self.run_dir} already holds a run: pass --resume to continue it, "
                    "log.overwrite=true to start afresh, or another run_name"
                )
            shutil.rmtree(self.run_dir / "checkpoints", ignore_errors=True)
        if resume:
            ckpt = latest_checkpoint(self.run_dir)
            if ckpt is None:
                raise FileNotFoundError(
                    f"--resume: no checkpoint in {self.run_dir / 'checkpoints'}"
                )
            self.load_checkpoint(ckpt)
        dump_config(cfg, self.run_dir / "config.yaml")
        self.logger = RunLogger(
            self.run_dir,
            cfg.log.tensorboard,
            cfg.log.wandb,
            cfg.log.wandb_project,
            cfg.run_name,
            to_dict(cfg),
        )
        self.logger.truncate_after(self.step if resume else -1)
        history = []
        bar = None
        if cfg.log.progress_bar:
            from tqdm.auto import tqdm

            bar = tqdm(
                total=cfg.train.max_steps, initial=self.step, desc=cfg.run_name, dynamic_ncols=True
            )
        try:
            if cfg.eval.eval_steps and self.step == 0:
                self.logger.log({"step": 0, **self.evaluate()})
            while self.step < cfg.train.max_steps:
                metrics = self.train_step()
                if cfg.eval.eval_steps and self.step % cfg.eval.eval_steps == 0:
                    metrics.update(self.evaluate())
                self.logger.log(metrics)
                history.append(metrics)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(
                        reward=f"{metrics['reward/mean']:.3f}",
                        s_per_step=f"{metrics['time/step']:.1f}",
                        tok_s=f"{metrics['tokens_per_second']:.0f}",
                    )
                save_every = cfg.log.save_steps
                if (save_every and self.step % save_every == 0) or self.step == cfg.train.max_steps:
                    self.save_checkpoint()
        finally:
            if bar is not None:
                bar.close()
            self.logger.close()
        return history

    # --- checkpoints --------------------------------------------------------------------------

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step-N`` atomically: a temp folder renamed into place."""
        root = self.run_dir / "checkpoints"
        root.mkdir(parents=True, exist_ok=True)
        final = root / f"step-{self.step}"
        tmp = Path(tempfile.mkdtemp(prefix=f".step-{self.step}-", dir=root))
        try:
            for name, pol in self.team.policies.items():
                d = tmp / "policies" / name
                d.mkdir(parents=True)
                torch.save(pol.state_dict(), d / "weights.pt")
                torch.save(pol.optimizer.state_dict(), d / "optimizer.pt")
                torch.save(pol.scheduler.state_dict(), d / "scheduler.pt")
            torch.save(
                {
                    "python": random.getstate(),
                    "numpy": np.random.get_state(),
                    "torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                },
                tmp / "rng.pt",
            )
            state = {"step": self.step, "data": self.data.state(), "nan_skips": self.nan_skips}
            (tmp / "trainer_state.json").write_text(json.dumps(state))
            dump_config(self.cfg, tmp / "config.yaml")
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._prune_checkpoints(root)
        return final

    def _prune_checkpoints(self, root: Path) -> None:
        limit = self.cfg.log.save_total_limit
        if limit is None:
            return
        ckpts = sorted(root.glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
        for old in ckpts[:-limit]:
            shutil.rmtree(old, ignore_errors=True)

    def load_checkpoint(self, path: str | Path) -> None:
        path = Path(path)
        saved = from_dict(Config, _yaml(path / "config.yaml"))
        if to_dict(saved)["algorithm"] != to_dict(self.cfg)["algorithm"]:
            warnings.warn(f"resuming from {path} with a different algorithm config", stacklevel=2)
        for name, pol in self.team.policies.items():
            d = path / "policies" / name
            pol.load_state_dict(torch.load(d / "weights.pt", weights_only=True))
            pol.optimizer.load_state_dict(torch.load(d / "optimizer.pt", weights_only=True))
            pol.scheduler.load_state_dict(torch.load(d / "scheduler.pt", weights_only=True))
        rng = torch.load(path / "rng.pt", weights_only=False)
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        torch.set_rng_state(rng["torch"])
        if rng["cuda"]:
            torch.cuda.set_rng_state_all(rng["cuda"])
        state = json.loads((path / "trainer_state.json").read_text())
        self.step = state["step"]
        self.nan_skips = state["nan_skips"]
        self.data.load(state["data"])

    def export(self, out_dir: str | Path) -> None:
        """save_pretrained each policy (adapter or full model) with its tokenizer."""
        out = Path(out_dir)
        for name, pol in self.team.policies.items():
            d = out / name
            if pol.adapter is not None:
                pol.model.save_pretrained(str(d), selected_adapters=[pol.adapter])
            else:
                pol.model.save_pretrained(str(d))
            pol.engine.tokenizer.save_pretrained(str(d))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    ckpts = sorted(
        Path(run_dir, "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1])
    )
    return ckpts[-1] if ckpts else None


def _yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


# --- metrics ----------------------------------------------------------------------------------


def drop_flat_groups(samples: list[Sample]) -> list[Sample]:
    """DAPO-style dynamic filtering: keep only groups whose returns are not all equal."""
    returns: dict = {}
    for s in samples:
        returns.setdefault(s.group, set()).add(round(s.return_, 12))
    return [s for s in samples if len(returns[s.group]) > 1]


def sample_rows(samples: list[Sample], step: int, k: int) -> list[dict]:
    """A few completions of the step's first problem, for reading in samples.jsonl."""
    if not samples:
        return []
    first = samples[0].group[0]
    rows = []
    per_group: dict = {}
    for s in samples:
        if s.group[0] != first or per_group.get(s.group, 0) >= k:
            continue
        per_group[s.group] = per_group.get(s.group, 0) + 1
        rows.append(
            {
                "step": step,
                "group": list(s.group),
                "agent": s.agent,
                "turn": s.turn,
                "reward": s.reward,
                "return": s.return_,
                "advantage": s.advantage,
                "completion": s.text,
            }
        )
    return rows
