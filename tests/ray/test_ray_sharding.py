"""FSDP2 inside a policy's worker group (distributed.sharding=fsdp, teamrl/scale/sharding.py):
one step on 2 sharded CPU workers (gloo) makes the update one process makes, in every policy
mode, under the criterion of test_ray_exactness (plain SGD, within 1e-3 of the update's scale);
with several minibatches, micro-batches and passes, where ranks with no sample in a chunk run a
ghost row; and the sharded optimizer state round-trips through the full-state format."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

pytest.importorskip("ray.util")  # not the tests/ray folder itself

import torch  # noqa: E402
from exactness import SGD  # noqa: E402
from helpers.runs import kill_at_checkpoint, tiny_overrides  # noqa: E402
from ray_cluster import ray_cluster  # noqa: E402, F401
from ray_helpers import (  # noqa: E402
    IDS,
    SIGNAL,
    Replicas,
    check,
    cli,
    logprobs,
    metrics,
    moved,
    one_process_step,
    ray_cfg,
    weights,
)

from teamrl.cli import main as cli_main  # noqa: E402
from teamrl.config import dump_config, load_config  # noqa: E402
from teamrl.scale import shutdown_team  # noqa: E402
from teamrl.scale.placement import placement_plan  # noqa: E402
from teamrl.team.models import resolve  # noqa: E402
from teamrl.team.policies import Team  # noqa: E402
from teamrl.trainer import Trainer  # noqa: E402


def sharded(cfg):
    d = dataclasses.replace(cfg.distributed, sharding="fsdp", backend="ray")
    return dataclasses.replace(cfg, distributed=d)


@pytest.fixture(scope="module")
def shards(ray_cluster):  # noqa: F811
    cfg = sharded(load_config(None, tiny_overrides("shared", 1)))
    resolve(cfg.model.name_or_path, cfg.seed)  # built once here, not by two workers at once
    made = Replicas(cfg, 2)
    yield made
    made.group.shutdown()


@pytest.mark.parametrize("mode", ["shared", "lora", "separate"])
def test_a_sharded_step_equals_one_process(shards, mode, tmp_path):
    cfg = load_config(None, tiny_overrides(mode, 1, **SGD))
    by_policy, before, after, max_len = one_process_step(tmp_path, cfg, SIGNAL)
    got = shards.step(sharded(cfg), by_policy, max_len, before)
    check(got, after, before, f"{mode}/fsdp on 2 workers")
    assert max(moved(before[n], after[n]) for n in before) > 1e-4
    # sharded CPU workers fix glibc's mmap threshold (teamrl.scale.cpu_malloc)
    assert [w["mmap_threshold_kib"] for w in shards.group._call("memory")] == [128, 128]


@pytest.mark.parametrize("mode", ["lora", "shared"])
def test_gradient_checkpointing_under_sharding(shards, mode, tmp_path):
    extra = {"model.gradient_checkpointing": True, **SGD}
    cfg = load_config(None, tiny_overrides(mode, 1, **extra))
    by_policy, before, after, max_len = one_process_step(tmp_path, cfg, SIGNAL)
    got = shards.step(sharded(cfg), by_policy, max_len, before)
    check(got, after, before, f"{mode}/fsdp with gradient checkpointing")


def test_ghost_rows_minibatches_chunks_and_passes(shards, tmp_path):
    extra = {
        "algorithm.num_iterations": 2,
        "train.num_mini_batches": 2,
        "train.micro_batch_size": 1,  # chunks of one row: the other rank runs a ghost row
        "algorithm.num_generations": 3,
    }
    cfg = load_config(None, tiny_overrides("lora", 1, **extra, **SGD))
    by_policy, before, after, max_len = one_process_step(tmp_path, cfg, SIGNAL)
    got = shards.step(sharded(cfg), by_policy, max_len, before)
    check(got, after, before, "ghost rows")


def test_the_sharded_optimizer_state_round_trips(shards, tmp_path):
    cfg = load_config(None, tiny_overrides("lora", 1, **{"train.learning_rate": 0.1}))
    by_policy, _, _, max_len = one_process_step(tmp_path, cfg, SIGNAL)
    plan = shards.with_workers(sharded(cfg))
    (group_plan,) = placement_plan(plan)
    shards.group.configure(group_plan, plan)
    shards.group.update("alice", by_policy["alice"], plan, 0, max_len["alice"])
    full = shards.group.state("alice", "optimizer")
    assert full["state"], "AdamW keeps moments after a step"
    shards.group.load_state("alice", "optimizer", full)
    again = shards.group.state("alice", "optimizer")
    for key, moments in full["state"].items():
        for name, value in moments.items():
            assert (again["state"][key][name] == value).all(), (key, name)


# --- sharded checkpoints: kill -9 and resume, other worker counts, one process, export -------


def test_a_killed_sharded_run_resumes_exactly_and_on_other_worker_counts(ray_cluster, tmp_path):  # noqa: F811
    fsdp = {"distributed.sharding": "fsdp", "train.learning_rate": 0.05}
    cfg = ray_cfg(ray_cluster, "lora", 3, 2, **fsdp)
    whole = Trainer(cfg, run_dir=tmp_path / "whole")
    try:
        whole.train()
    finally:
        shutdown_team(whole.team)
    step1 = tmp_path / "whole" / "checkpoints" / "step-1" / "policies" / "alice"
    assert (step1 / "optimizer").is_dir() and not (step1 / "optimizer.pt").exists()
    assert len(list((step1 / "optimizer").glob("*.distcp"))) == 2  # one file per worker

    cfg_path = tmp_path / "config.yaml"
    dump_config(cfg, cfg_path)
    run = tmp_path / "killed"
    kill_at_checkpoint(cli(cfg_path, run), run, 1)
    assert not (run / "checkpoints" / "step-3").exists()
    resumed = cli(cfg_path, run, "--resume")
    assert resumed.wait(timeout=240) == 0, resumed.stderr.read()
    assert metrics(run) == metrics(tmp_path / "whole")
    got, want = weights(run, 3), weights(tmp_path / "whole", 3)
    for name in want:
        for k in want[name]:
            assert torch.equal(got[name][k], want[name][k]), (name, k)

    # the same 2-worker checkpoint resumes on 1 worker, and in one process without Ray
    for label, backend, workers in (("one-worker", "ray", 1), ("one-process", "none", 1)):
        folder = tmp_path / label
        shutil.copytree(
            tmp_path / "whole", folder, ignore=shutil.ignore_patterns("step-2", "step-3")
        )
        extra = {"distributed.backend": backend, "distributed.num_workers_per_policy": workers}
        other = Trainer(dataclasses.replace(cfg, distributed=dataclasses.replace(
            cfg.distributed, **{k.split(".")[1]: v for k, v in extra.items()},
            sharding="none" if backend == "none" else "fsdp")), run_dir=folder)  # fmt: skip
        try:
            history = other.train(resume=True)
        finally:
            shutdown_team(other.team)
        assert [h["step"] for h in history] == [2, 3], label


def test_export_of_a_sharded_run_loads_in_transformers(ray_cluster, tmp_path):  # noqa: F811
    from transformers import AutoModelForCausalLM

    cfg = ray_cfg(ray_cluster, "shared", 1, 2, **{"distributed.sharding": "fsdp",
                                                  "train.weight_decay": 0.5})  # fmt: skip
    tr = Trainer(cfg, run_dir=tmp_path / "run")
    try:
        tr.train()
        live = tr.team.policies["shared"].state_dict()  # rank 0's replica, gathered after the step
    finally:
        shutdown_team(tr.team)
    out = tmp_path / "team"
    assert cli_main(["export", str(tr.run_dir), str(out)]) == 0
    local = Team(load_config(None, tiny_overrides("shared", 1)))
    base = logprobs(local.policies["shared"].model, IDS)
    local.policies["shared"].load_state_dict(live)
    mine = logprobs(local.policies["shared"].model, IDS)
    plain = AutoModelForCausalLM.from_pretrained(out / "shared").eval()
    assert torch.allclose(logprobs(plain, IDS), mine, atol=1e-5)
    assert not torch.allclose(base, mine, atol=1e-4)
