"""One step on Ray worker groups of 1 and 2 workers equals the one-process update on the
same samples (resulting weights within float tolerance): MAGRPO and AT-GRPO, for shared,
lora and separate policies, and every loss_type with several minibatches, chunks and passes."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("ray")

from conftest import tiny_overrides  # noqa: E402
from ray_cluster import CPU, ray_cluster  # noqa: E402, F401

from teamrl.algorithms.advantages import compute_advantages  # noqa: E402
from teamrl.config import load_config  # noqa: E402
from teamrl.scale.group import WorkerGroup  # noqa: E402
from teamrl.scale.placement import placement_plan  # noqa: E402
from teamrl.trainer import Trainer  # noqa: E402

AT_GRPO = {"algorithm.name": "at_grpo", "env.kwargs": "{sequential: true}"}


def one_process_step(tmp_path, cfg):
    """Samples of one rollout (advantages computed once) and each policy's weights before and
    after one update in this process."""
    tr = Trainer(cfg, run_dir=tmp_path)
    result = tr.rollout(tr.data.next(cfg.train.prompts_per_step))
    a = cfg.algorithm
    compute_advantages(result.samples, a.baseline, a.scale_rewards)
    before = {n: p.state_dict() for n, p in tr.team.policies.items()}
    max_len = {n: 8 for n in tr.team.policies}
    by_policy = {n: [s for s in result.samples if s.policy == n] for n in tr.team.policies}
    for name, pol in tr.team.policies.items():
        tr.update(pol, by_policy[name])
    after = {n: p.state_dict() for n, p in tr.team.policies.items()}
    return by_policy, before, after, max_len


def assert_same(got: dict, want: dict, what: str, atol=2e-6):
    assert got.keys() == want.keys()
    worst = max(float((got[k] - want[k]).abs().max()) for k in want)
    assert worst <= atol, f"{what}: max |diff| {worst:.3g}"


def moved(before: dict, after: dict) -> float:
    return max(float((after[k] - before[k]).abs().max()) for k in before)


class Groups:
    """The worker groups of one config with W workers, reset to their initial state on demand."""

    def __init__(self, cfg, workers: int):
        d = dataclasses.replace(cfg.distributed, num_workers_per_policy=workers, **_cpu())
        self.cfg = dataclasses.replace(cfg, distributed=d)
        self.groups = {}
        for plan in placement_plan(self.cfg):
            group = WorkerGroup(plan, self.cfg)
            for name in plan.policies:
                self.groups[name] = group
        self.initial = {
            (n, part): g.state(n, part)
            for n, g in self.groups.items()
            for part in ("weights", "optimizer", "scheduler")
        }

    def reset(self):
        for (name, part), value in self.initial.items():
            self.groups[name].load_state(name, part, value)

    def step(self, cfg, by_policy, max_len) -> dict:
        self.reset()
        for name, samples in by_policy.items():
            self.groups[name].update(name, samples, cfg, 0, max_len[name])
        return {n: g.state(n, "weights") for n, g in self.groups.items()}

    def close(self):
        for g in set(self.groups.values()):
            g.shutdown()


def _cpu():
    return {"num_cpus_per_worker": CPU["distributed.num_cpus_per_worker"]}


@pytest.fixture(scope="module", params=["shared", "lora", "separate"])
def groups(request, ray_cluster):  # noqa: F811
    cfg = load_config(None, tiny_overrides(request.param, 1))
    made = {w: Groups(cfg, w) for w in (1, 2)}
    yield request.param, made
    for g in made.values():
        g.close()


@pytest.mark.parametrize("algorithm", ["magrpo", "at_grpo"])
def test_one_step_on_1_and_2_workers_equals_one_process(groups, algorithm, tmp_path):
    mode, made = groups
    extra = AT_GRPO if algorithm == "at_grpo" else {}
    cfg = load_config(None, tiny_overrides(mode, 1, **extra))
    by_policy, before, after, max_len = one_process_step(tmp_path, cfg)
    for w, g in made.items():
        # the same seed gives the workers the weights this process started from
        for name in before:
            assert_same(g.initial[(name, "weights")], before[name], f"{mode} init", atol=0)
        assert_same(g.step(cfg, by_policy, max_len), after, f"{mode}/{algorithm}/{w} workers")
    assert min(moved(before[n], after[n]) for n in before) > 1e-4  # the step did something


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo"])
def test_every_loss_type_with_minibatches_chunks_and_passes(groups, loss_type, tmp_path):
    mode, made = groups
    if mode != "lora":
        pytest.skip("every loss_type on one mode (lora) keeps the suite short")
    extra = {
        "algorithm.loss_type": loss_type,
        "algorithm.num_iterations": 2,  # old log-probs from before the first step, then clipped
        "train.num_mini_batches": 2,
        "train.micro_batch_size": 3,  # chunks of 3 rows, each split over the 2 ranks
        "algorithm.num_generations": 5,
    }
    cfg = load_config(None, tiny_overrides(mode, 1, **extra))
    by_policy, before, after, max_len = one_process_step(tmp_path, cfg)
    got = made[2].step(cfg, by_policy, max_len)
    assert_same(got, after, f"{loss_type}/2 workers")
    assert min(moved(before[n], after[n]) for n in before) > 1e-4


def test_a_rank_without_samples_still_matches(groups, tmp_path):
    # 2 workers, minibatches of one sample: rank 1 has nothing in half the steps
    mode, made = groups
    if mode != "shared":
        pytest.skip("one mode is enough")
    extra = {"train.num_mini_batches": 8, "algorithm.num_generations": 2}
    cfg = load_config(None, tiny_overrides(mode, 1, **extra))
    by_policy, before, after, max_len = one_process_step(tmp_path, cfg)
    assert max(len(v) for v in by_policy.values()) == 4  # 2 agents x 2: some minibatches empty
    assert_same(made[2].step(cfg, by_policy, max_len), after, "single-sample minibatches")
    assert moved(before["shared"], after["shared"]) > 1e-4
