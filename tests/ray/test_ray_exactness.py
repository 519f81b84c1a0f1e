"""One step on Ray worker groups of 1 and 2 workers equals the one-process update on the
same samples: MAGRPO and AT-GRPO, for shared, lora and separate policies, and every loss_type
with several minibatches, chunks and passes.

What is compared is exact up to the order of floating-point sums, on any CPU: the update under
plain SGD (``train.optim=sgd``: w <- w - lr * g, linear in the all-reduced gradient), with a
tolerance relative to the update's own scale. Weights after AdamW are not comparable so: its
first step is lr * g / (|g| + eps), so a near-zero gradient entry whose rounding differs between
one process and two ranks (or between AVX2 and AVX-512 kernels) moves by up to lr either way.

The criterion still catches real bugs: a per-rank loss denominator instead of the global one,
or one rank's samples dropped, change the update by a large fraction of its scale (checked by
planting both in teamrl/update/policy.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.util")  # not the tests/ray folder itself

from exactness import SGD  # noqa: E402
from helpers.runs import tiny_overrides  # noqa: E402
from ray_cluster import ray_cluster  # noqa: E402, F401
from ray_helpers import SIGNAL, Replicas, check, moved, one_process_step  # noqa: E402

from teamrl.config import load_config  # noqa: E402

AT_GRPO = {"algorithm.name": "at_grpo", "env.kwargs": "{sequential: true}"}


@pytest.fixture(scope="module")
def replicas(ray_cluster):  # noqa: F811
    cfg = load_config(None, tiny_overrides("shared", 1))
    made = {w: Replicas(cfg, w) for w in (1, 2)}
    yield made
    for r in made.values():
        r.group.shutdown()


@pytest.mark.parametrize("mode", ["shared", "lora", "separate"])
@pytest.mark.parametrize("algorithm", ["magrpo", "at_grpo"])
def test_one_step_on_1_and_2_workers_equals_one_process(replicas, mode, algorithm, tmp_path):
    extra = AT_GRPO if algorithm == "at_grpo" else {}
    cfg = load_config(None, tiny_overrides(mode, 1, **extra, **SGD))
    # Fixed advantages: a tiny model's rewards can tie within every group (then the step is a
    # no-op and proves nothing); the comparison is on the same samples either way.
    by_policy, before, after, max_len = one_process_step(tmp_path, cfg, SIGNAL)
    for w, r in replicas.items():
        got = r.step(cfg, by_policy, max_len, before)
        check(got, after, before, f"{mode}/{algorithm}/{w} workers")
    assert max(moved(before[n], after[n]) for n in before) > 1e-4  # the step did something


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo"])
def test_every_loss_type_with_minibatches_chunks_and_passes(replicas, loss_type, tmp_path):
    extra = {
        "algorithm.loss_type": loss_type,
        "algorithm.num_iterations": 2,  # old log-probs from before the first step, then clipped
        "train.num_mini_batches": 2,
        "train.micro_batch_size": 3,  # chunks of 3 rows, each split over the 2 ranks
        "algorithm.num_generations": 5,
        # ragged rows in one policy (a tiny random model never stops early), so that the four
        # loss types' denominators differ and a per-rank token count would show
        "team.agents": "[{name: alice, max_completion_length: 8}, "
        "{name: bob, max_completion_length: 5}]",
    }
    cfg = load_config(None, tiny_overrides("shared", 1, **extra, **SGD))
    by_policy, before, after, max_len = one_process_step(tmp_path, cfg, SIGNAL)
    got = replicas[2].step(cfg, by_policy, max_len, before)
    check(got, after, before, f"{loss_type}/2 workers")
    assert max(moved(before[n], after[n]) for n in before) > 1e-4


def test_a_token_budget_on_2_workers_equals_one_process_without_it(replicas, tmp_path):
    # train.max_tokens_per_micro_batch: every rank cuts the same chunks from the same samples,
    # splits each over the ranks, and the sum is the uncut one-process update (dapo, default)
    extra = {
        "algorithm.num_iterations": 2,
        "train.num_mini_batches": 2,
        "train.prompts_per_step": 2,
        "team.agents": "[{name: alice, max_completion_length: 8}, "
        "{name: bob, max_completion_length: 5}]",
    }
    whole = load_config(None, tiny_overrides("shared", 1, **extra, **SGD))
    cut = load_config(
        None,
        tiny_overrides("shared", 1, **extra, **SGD, **{"train.max_tokens_per_micro_batch": 40}),
    )
    by_policy, before, after, max_len = one_process_step(tmp_path, whole, SIGNAL)
    got = replicas[2].step(cut, by_policy, max_len, before)
    check(got, after, before, "40-token budget/2 workers")
    assert max(moved(before[n], after[n]) for n in before) > 1e-4


def test_a_rank_without_samples_still_matches(replicas, tmp_path):
    # 2 workers, minibatches of one sample: rank 1 has nothing in every step
    extra = {"train.num_mini_batches": 4, "algorithm.num_generations": 2}  # 4 samples
    cfg = load_config(None, tiny_overrides("shared", 1, **extra, **SGD))
    by_policy, before, after, max_len = one_process_step(tmp_path, cfg, [1.0, -0.5, 0.25])
    assert len(by_policy["shared"]) == 4  # 2 agents x 2 samples: 4 minibatches of 1
    got = replicas[2].step(cfg, by_policy, max_len, before)
    check(got, after, before, "single-sample minibatches")
    assert moved(before["shared"], after["shared"]) > 1e-4
