"""The update dispatches a number of tensor operations that does not grow with its samples, and
reads the device once per optimizer step (the NaN check) and once at its end (the metrics).

Counted with a ``TorchDispatchMode`` over one whole ``update_policy`` at G = 3 and G = 8 samples
per prompt, with the same passes, minibatches and chunks: every per-sample or per-token Python
loop that touches a tensor (a row copied into place, a float read per chunk) would show up as a
difference between the two counts. The two batches have the same structure, so that no
data-dependent branch differs: two prompts of different lengths (left pads), every minibatch
holding some prompt twice (its KV cache is copied to its samples), completions of one length
(every chunk as wide as the longest).

Syncs inside the model's own forward are counted apart: transformers' mask construction asks
whether a prefix's padding mask is all ones (``fast_all``, once or twice per prompt forward),
which is the model's, the same at every batch size, and not the update loop's.
"""

from __future__ import annotations

import random
import traceback

import pytest
import torch
from helpers.runs import tiny_overrides
from torch.utils._python_dispatch import TorchDispatchMode

from teamrl.config import load_config
from teamrl.sample import Sample
from teamrl.team.optim import make_optimizer
from teamrl.team.policies import Team
from teamrl.update.policy import update_policy
from teamrl.update.settings import update_settings

# ops that hand a tensor's value to the host (``.item()``, ``bool(t)``, ``torch.equal``): on a
# GPU each waits for the device to finish everything queued before it
SYNCS = {"_local_scalar_dense", "equal", "is_nonzero", "item"}


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0
        self.syncs = 0  # outside the model's forward
        self.model_syncs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        if func.__name__.split(".")[0] in SYNCS:
            files = [f.filename for f in traceback.extract_stack()]
            if any("/transformers/" in f for f in files):
                self.model_syncs += 1
            else:
                self.syncs += 1
        return func(*args, **(kwargs or {}))


def samples(team: Team, group: int, seed: int = 0) -> list[Sample]:
    """Two prompts x ``group`` completions of 5 tokens for agent alice."""
    rng = random.Random(seed)
    out = []
    for p in range(2):
        prompt = [rng.randrange(3, 60) for _ in range(4 + p)]
        for _ in range(group):
            n = 5
            out.append(
                Sample(
                    agent="alice",
                    policy=team.policy_of["alice"],
                    turn=0,
                    group=p,
                    prompt_ids=prompt,
                    completion_ids=[rng.randrange(3, 60) for _ in range(n)],
                    sampler_logprobs=[-rng.random() for _ in range(n)],
                    advantage=rng.uniform(-1, 1),
                )
            )
    return out


def counted_update(policies: str, group: int, **extra) -> Count:
    torch.manual_seed(0)
    overrides = {"train.num_mini_batches": 2, "algorithm.num_iterations": 2, **extra}
    cfg = load_config(None, tiny_overrides(policies, 1, **overrides))
    team = Team(cfg)
    pol = team.policies[team.policy_of["alice"]]
    make_optimizer(pol, cfg)
    settings = update_settings(cfg, pol.agents)
    work = samples(team, group)
    update_policy(pol, work, settings, step=0, max_completion_length=8)  # warm: lazy inits
    with Count() as count:
        update_policy(pol, work, settings, step=1, max_completion_length=8)
    return count


@pytest.mark.parametrize(
    "policies,extra",
    [
        ("shared", {}),
        ("lora", {"algorithm.beta": 0.1}),
        ("shared", {"algorithm.truncated_scoring": "true", "team.agents.0.top_p": 0.9}),
    ],
)
def test_dispatched_ops_do_not_grow_with_the_batch(policies, extra):
    small, large = counted_update(policies, 3, **extra), counted_update(policies, 8, **extra)
    assert small.ops == large.ops
    # 2 passes x 2 minibatches: one NaN check per optimizer step and one read of the metrics
    assert small.syncs == large.syncs <= 2 * 2 + 1
    assert small.model_syncs == large.model_syncs
