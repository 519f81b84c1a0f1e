"""Asynchronous training on Ray (algorithm.max_staleness; teamrl/execution/asynchronous.py with a
RayExecution learner): the generator thread samples on a second set of worker groups while the
learner's groups update. At staleness 0 that reproduces the synchronous Ray trainer exactly
(MAGRPO and AT-GRPO, 2 workers per group); at staleness 1 the run trains with its batches at
most one version behind, and the sampler groups end with the learner's (shutdown_team)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.util")  # not the tests/ray folder itself

import torch  # noqa: E402
from ray_cluster import ray_cluster  # noqa: E402, F401
from ray_helpers import ray_cfg  # noqa: E402

from teamrl.execution.asynchronous import AsyncExecution  # noqa: E402
from teamrl.execution.protocol import TrainingRollout  # noqa: E402
from teamrl.execution.remote import RayExecution  # noqa: E402
from teamrl.scale import shutdown_team  # noqa: E402
from teamrl.trainer import Trainer  # noqa: E402

AT_GRPO = {"algorithm.name": "at_grpo", "env.kwargs": "{sequential: true}"}


def async_factory(cfg, task, data, recipe):
    """The asynchronous machinery on Ray whatever max_staleness says (0 here: synchronous)."""
    return AsyncExecution(RayExecution(cfg, TrainingRollout(recipe, task, cfg), data), cfg)


def train(cfg, run_dir, execution=None):
    """(history, each policy's weights as its learner group's rank 0 holds them, the number
    of worker groups the run had); the run's groups are shut down before it returns."""
    tr = Trainer(cfg, run_dir=run_dir, execution=execution)
    try:
        history = tr.train()
        weights = {n: p.state_dict() for n, p in tr.team.policies.items()}
        groups = len(tr.team.worker_groups)
    finally:
        shutdown_team(tr.team)
    assert tr.team.worker_groups == []
    return history, weights, groups


@pytest.mark.parametrize("algorithm", [{}, AT_GRPO], ids=["magrpo", "at_grpo"])
def test_staleness_0_on_sampler_groups_equals_the_synchronous_ray_trainer(
    ray_cluster,  # noqa: F811
    tmp_path,
    algorithm,
):
    cfg = ray_cfg(ray_cluster, "lora", 3, 2, **algorithm)
    h_sync, w_sync, groups = train(cfg, tmp_path / "sync")
    h_async, w_async, async_groups = train(cfg, tmp_path / "async", execution=async_factory)
    assert async_groups == 2 * groups  # the learner's groups and the sampler's
    assert [m["async/staleness"] for m in h_async] == [0.0, 0.0, 0.0]
    assert [m["reward/mean"] for m in h_async] == [m["reward/mean"] for m in h_sync]
    for name, state in w_sync.items():
        for key, value in state.items():
            assert torch.equal(w_async[name][key], value), (name, key)


def test_staleness_1_on_ray_trains_within_its_bound(ray_cluster, tmp_path):  # noqa: F811
    cfg = ray_cfg(ray_cluster, "lora", 3, 2, **{"algorithm.max_staleness": 1})
    untrained = Trainer(cfg, run_dir=tmp_path / "untrained")
    try:
        before = {n: p.state_dict() for n, p in untrained.team.policies.items()}
    finally:
        shutdown_team(untrained.team)
    history, after, groups = train(cfg, tmp_path / "async")  # make_execution's choice
    assert groups == 2  # one learner group (lora: the team's one policy group), one sampler's
    staleness = [m["async/staleness"] for m in history]
    assert all(s in (0.0, 1.0) for s in staleness) and staleness[0] == 0.0
    for m in history:
        for name in after:
            assert 0 < m[f"is_weight/{name}"] < 10  # corrected against the stale sampler
    moved = max(float((after[n][k] - v).abs().max()) for n in before for k, v in before[n].items())
    assert moved > 1e-4  # the learner's groups trained
