"""FSDP2 inside a policy's worker group (distributed.sharding=fsdp, teamrl/scale/sharding.py):
one step on 2 sharded CPU workers (gloo) makes the update one process makes, in every policy
mode, under the criterion of test_ray_exactness (plain SGD, within 1e-3 of the update's scale);
with several minibatches, micro-batches and passes, where ranks with no sample in a chunk run a
ghost row; and the sharded optimizer state round-trips through the full-state format."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("ray.util")  # not the tests/ray folder itself

from conftest import tiny_overrides  # noqa: E402
from ray_cluster import ray_cluster  # noqa: E402, F401
from test_ray_exactness import SGD, SIGNAL, Replicas, check, moved, one_process_step  # noqa: E402

from teamrl.config import load_config  # noqa: E402
from teamrl.models import resolve  # noqa: E402
from teamrl.scale.placement import placement_plan  # noqa: E402


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
