"""Plain helpers the tests/ray modules share (the ray_cluster fixture is in ray_cluster.py;
not named helpers.py, which would clash with tests/helpers on sys.path): a Ray run's config,
metrics and checkpointed weights; one step in this process against one on a worker group; the
log-probs of a fixed sequence."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
import torch
from exactness import RTOL, assert_same_update, snapshot
from helpers.runs import tiny_overrides, train_in_subprocess
from ray_cluster import CPU

from teamrl.config import load_config
from teamrl.credit.advantages import compute_advantages
from teamrl.scale.group import WorkerGroup
from teamrl.scale.placement import placement_plan
from teamrl.trainer import Trainer

VOLATILE = ("time/", "tokens_per_second", "memory/")  # measurements of the machine


def ray_cfg(address: str, policies: str, steps: int, workers: int, **extra):
    items = {
        "distributed.backend": "ray",
        "distributed.address": address,
        "distributed.num_workers_per_policy": workers,
        "log.save_steps": 1,
        "log.save_total_limit": "null",
        **CPU,
        **extra,
    }
    return load_config(None, tiny_overrides(policies, steps, **items))


def metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def weights(run_dir: Path, step: int) -> dict:
    """Each policy's weights in a checkpoint: the PEFT adapter one process writes."""
    from safetensors.torch import load_file

    root = run_dir / "checkpoints" / f"step-{step}" / "policies"
    return {p.name: load_file(p / "adapter_model.safetensors") for p in sorted(root.iterdir())}


def cli(cfg_path: Path, run_dir: Path, *flags: str) -> subprocess.Popen:
    return train_in_subprocess(cfg_path, run_dir, *flags)


SIGNAL = [1.0, -0.5, 0.25, -0.75, 0.5]  # advantages cycled over the samples


def one_process_step(tmp_path, cfg, advantages=None):
    """Samples of one rollout (advantages computed once) and each policy's weights before and
    after one update in this process."""
    tr = Trainer(cfg, run_dir=tmp_path)
    result = tr.rollout(tr.data.next(cfg.train.prompts_per_step))
    a = cfg.algorithm
    compute_advantages(result.samples, a.baseline, a.scale_rewards)
    for i, s in enumerate(result.samples if advantages else []):
        s.advantage = advantages[i % len(advantages)]  # a signal whatever the rewards were
    before = {n: snapshot(p) for n, p in tr.team.policies.items()}
    max_len = {n: 8 for n in tr.team.policies}
    by_policy = {n: [s for s in result.samples if s.policy == n] for n in tr.team.policies}
    norms = {n: tr.update(p, by_policy[n])["grad_norm"] for n, p in tr.team.policies.items()}
    after = {n: snapshot(p) for n, p in tr.team.policies.items()}
    after["grad_norm"] = norms
    return by_policy, before, after, max_len


def assert_identical(got: dict, want: dict, what: str):
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want), f"{what}: not identical"


def moved(before: dict, after: dict) -> float:
    return max(float((after[k] - before[k]).abs().max()) for k in before)


class Replicas:
    """One worker group of W workers, rebuilt for each config's placement plan in turn (for
    'separate', one plan per agent: the groups of one step are independent)."""

    def __init__(self, cfg, workers: int):
        self.workers = workers
        first = placement_plan(self.with_workers(cfg))[0]
        self.group = WorkerGroup(first, self.with_workers(cfg))

    def with_workers(self, cfg):
        d = dataclasses.replace(cfg.distributed, num_workers_per_policy=self.workers, **_cpu())
        return dataclasses.replace(cfg, distributed=d)

    def step(self, cfg, by_policy, max_len, before) -> dict:
        """Each policy's weights after one update on the workers, built afresh from the seed
        (their initial weights must be this process's)."""
        cfg = self.with_workers(cfg)
        out = {"grad_norm": {}}
        for plan in placement_plan(cfg):
            self.group.configure(plan, cfg)
            for name in plan.policies:
                start = self.group.state(name, "weights")
                assert_identical(start, before[name], f"initial weights of {name}")
                metrics, _ = self.group.update(name, by_policy[name], cfg, 0, max_len[name])
                out["grad_norm"][name] = metrics["grad_norm"]
                out[name] = self.group.state(name, "weights")
        return out


def _cpu():
    return {"num_cpus_per_worker": CPU["distributed.num_cpus_per_worker"]}


def check(got: dict, want: dict, before: dict, what: str) -> None:
    """The same SGD update, and the same gradient norm (the mean over the optimizer steps)."""
    for name, norm in want["grad_norm"].items():
        assert_same_update(got[name], want[name], before[name], f"{what}, policy {name}")
        assert got["grad_norm"][name] == pytest.approx(norm, rel=RTOL), f"{what}: grad_norm"


IDS = [5, 17, 3, 42, 8, 9, 11]


def logprobs(model, ids: list[int]) -> torch.Tensor:
    """log p(ids[t] | ids[:t]) for t >= 1."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
