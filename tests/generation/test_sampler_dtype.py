"""generation.sampler_dtype=bfloat16: the hf backend samples from a bf16 copy of a float32
model, the copy takes the stepped weights after every optimizer step (a full model's, or one
adapter's and no other's), the importance-sampling correction turns on by itself, and a run
trains with it."""

from __future__ import annotations

import copy

import torch
from helpers.runs import tiny_overrides

from teamrl.config import load_config
from teamrl.generation import hf as eager_loop
from teamrl.generation.types import Request
from teamrl.team.policies import Team
from teamrl.trainer import Trainer
from teamrl.update.settings import update_settings

BF16 = {"generation.sampler_dtype": "bfloat16"}


def team(policies: str, **extra) -> Team:
    torch.manual_seed(0)
    return Team(load_config(None, tiny_overrides(policies, 1, **BF16, **extra)))


def test_the_sampler_runs_a_bf16_copy_and_takes_the_stepped_weights():
    t = team("shared")
    pol = t.policies["shared"]
    backend = pol.engine.backend
    live = pol.model
    assert live.dtype == torch.float32
    assert backend.copy is not None and backend.copy is not live
    assert {p.dtype for p in backend.copy.parameters()} == {torch.bfloat16}
    # greedy tokens are those of the live model cast to bf16 (the reference loop on a cast)
    reqs = [Request([5, 9, 14, 3], n=2, temperature=0.0, max_new_tokens=6)]
    cast = copy.deepcopy(live).to(torch.bfloat16).eval()
    want = eager_loop.generate(cast, reqs, [0], 0, ignore_eos=True)
    got = backend.generate(reqs, ignore_eos=True)
    assert [g.completion_ids for g in got[0]] == [g.completion_ids for g in want[0]]
    # a step moves the live weights; the copy follows at weights_changed, not before
    with torch.no_grad():
        for p in live.parameters():
            p.add_(0.01)
    name, first = next(iter(live.named_parameters()))
    copied = dict(backend.copy.named_parameters())
    assert not torch.equal(copied[name], first.to(torch.bfloat16))
    backend.weights_changed(None)
    for n, p in live.named_parameters():
        assert torch.equal(copied[n], p.detach().to(torch.bfloat16)), n


def test_an_adapters_step_reaches_its_own_weights_in_the_copy_and_no_other():
    t = team("lora")
    alice, bob = t.policies[t.policy_of["alice"]], t.policies[t.policy_of["bob"]]
    backend = alice.engine.backend
    assert backend is bob.engine.backend  # one engine, one copy, both adapters
    with torch.no_grad():
        for p in alice.parameters() + bob.parameters():
            p.add_(0.5)
    backend.weights_changed(alice.adapter)
    copied = dict(backend.copy.named_parameters())
    names = {
        n for n, p in alice.model.named_parameters() if any(p is q for q in alice.parameters())
    }
    bob_names = {
        n for n, p in bob.model.named_parameters() if any(p is q for q in bob.parameters())
    }
    live = dict(alice.model.named_parameters())
    assert names and bob_names
    for n in names:
        assert torch.equal(copied[n], live[n].detach().to(torch.bfloat16)), n
    for n in bob_names:
        assert not torch.equal(copied[n], live[n].detach().to(torch.bfloat16)), n


def test_the_importance_sampling_correction_turns_on_with_a_bf16_sampler():
    def on(**extra) -> bool:
        cfg = load_config(None, tiny_overrides("shared", 1, **extra))
        return update_settings(cfg, ["alice", "bob"]).importance_sampling_correction

    assert not on()  # the live float32 model samples: the trainer's own distribution
    assert on(**BF16)  # a bf16 copy samples a float32 model's agents
    assert not on(**BF16, **{"model.dtype": "bfloat16"})  # already bf16: no copy, no mismatch
    assert not on(**BF16, **{"algorithm.importance_sampling_correction": "false"})


def test_a_run_trains_with_a_bf16_sampler(tmp_path):
    cfg = load_config(None, tiny_overrides("lora", 2, **BF16, **{"log.output_dir": tmp_path}))
    tr = Trainer(cfg, run_dir=tmp_path / "run")
    history = tr.train()
    assert len(history) == 2
    for m in history:  # the correction weighed every token (a finite, positive mean weight)
        assert 0 < m["is_weight/alice"] < float("inf") and 0 < m["is_weight/bob"] < float("inf")
        assert m["kl_sampler_k3/alice"] > 0  # the copy's log-probs are not the trainer's
    pol = tr.team.policies[tr.team.policy_of["alice"]]
    copied = dict(pol.engine.backend.copy.named_parameters())
    for n, p in pol.model.named_parameters():  # the copy holds the weights the run ended with
        assert torch.equal(copied[n], p.detach().to(torch.bfloat16)), n
