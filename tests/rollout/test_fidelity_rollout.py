"""Learning-signal fidelity (issue 10) on the rollout side: multi-LoRA routing of non-Linear
LoRA layers, team.ignore_eos in every recipe, TRL-style reward_funcs for the functional env."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers.rollout_turns import CounterEnv, ScriptedTeam
from helpers.runs import tiny_overrides

from teamrl.algorithms.registry import recipe_for
from teamrl.config import load_config
from teamrl.envs.functional import FunctionEnv
from teamrl.generation import multi_lora
from teamrl.generation.hf import _adapters
from teamrl.trainer import Trainer

# --- defect 3: a LoRA Embedding must be routed per row (or refused) -------------------------


def test_embedding_lora_rows_get_their_own_adapter(tmp_path):
    targets = "model.lora_target_modules=[embed_tokens, q_proj, v_proj]"
    cfg = load_config(None, tiny_overrides("lora", 1) + [targets])
    tr = Trainer(cfg, run_dir=tmp_path / "run")
    model = tr.team.policies["alice"].engine.model
    torch.manual_seed(0)
    with torch.no_grad():  # LoRA B starts at zero: make both adapters do something
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.5)
    assert not multi_lora.supported(model)  # the grouped forward patches linears only
    ids = torch.tensor([[5, 9, 13, 2], [5, 9, 13, 2]])
    model.eval()
    with torch.no_grad():
        with _adapters(model, ["alice", "bob"]) as kw:
            mixed = model(input_ids=ids, **kw).logits
        alone = {}
        for name in ("alice", "bob"):
            model.set_adapter(name)
            alone[name] = model(input_ids=ids[:1]).logits[0]
    assert not torch.allclose(alone["alice"], alone["bob"], atol=1e-3)
    assert torch.allclose(mixed[0], alone["alice"], atol=1e-4)
    assert torch.allclose(mixed[1], alone["bob"], atol=1e-4)


# --- defect 7: team.ignore_eos reaches every recipe's generate calls -----------------------


class RecordingTeam(ScriptedTeam):
    def __init__(self):
        super().__init__()
        self.flags: list[bool] = []

    def generate(self, jobs, ignore_eos=False):
        self.flags.append(ignore_eos)
        return super().generate(jobs, ignore_eos)


@pytest.mark.parametrize("name", ["at_grpo", "grpo"])  # MAGRPO's joint tree already did
def test_ignore_eos_is_honoured_by_sequential_recipes(name):
    cfg = SimpleNamespace(
        seed=0,
        env=SimpleNamespace(max_turns=2, reward_workers=1),
        team=SimpleNamespace(ignore_eos=True),
        algorithm=load_config(None, tiny_overrides()).algorithm,
    )
    team = RecordingTeam()
    recipe_for(name).rollout(team, CounterEnv, [(0, {})], cfg, step=0)
    assert team.flags and all(team.flags)
    recipe_for(name).eval_rollout(team, CounterEnv, [(0, {})], cfg, n=2, greedy=False)
    assert all(team.flags)


# --- item 14: reward_funcs / reward_weights, each component logged ------------------------


def test_reward_funcs_weighted_sum_and_components():
    def has_digit(completions, example):
        return float(any(c.isdigit() for c in completions["a"]))

    def short(completions, example):
        return 1.0 if len(completions["a"]) <= 3 else 0.0

    env = FunctionEnv(
        agents=["a"],
        reward_funcs=[has_digit, short],
        reward_weights=[2.0, 0.5],
        prompt=lambda ex, agent: "go",
    )
    env.reset({})
    step = env.step({"a": "x1"})
    assert step.reward == pytest.approx(2.0 * 1 + 0.5 * 1)
    assert step.reward_components == {"has_digit": 1.0, "short": 1.0}
    step = env.step({"a": "long answer"})
    assert step.reward == 0.0 and step.reward_components == {"has_digit": 0.0, "short": 0.0}
    with pytest.raises(ValueError, match="reward_weights: expected 2"):
        FunctionEnv(agents=["a"], reward_funcs=[has_digit, short], reward_weights=[1.0])
    with pytest.raises(ValueError, match="exactly one of reward= or reward_funcs="):
        FunctionEnv(agents=["a"])
