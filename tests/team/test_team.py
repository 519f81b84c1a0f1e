"""Team construction: which parameters a LoRA policy trains."""

from __future__ import annotations

import re

import pytest
from helpers.runs import tiny_overrides

from teamrl.config import load_config
from teamrl.team.policies import Team, cut_at_stop
from teamrl.tensors import is_adapter_param


def test_is_adapter_param_matches_peft_lora_names_only():
    assert is_adapter_param("m.layers.0.mlp.up_proj.lora_A.mlp.weight", "mlp")
    assert is_adapter_param("m.layers.0.mlp.up_proj.lora_B.mlp.weight", "mlp")
    assert is_adapter_param("m.embed_tokens.lora_embedding_A.mlp", "mlp")
    assert not is_adapter_param("m.layers.0.mlp.up_proj.base_layer.weight", "mlp")
    assert not is_adapter_param("m.layers.0.mlp.up_proj.lora_A.other.weight", "mlp")
    assert not is_adapter_param("m.layers.0.self_attn.q_proj.lora_A.mlp.weight", "q_proj")
    assert not is_adapter_param("m.layers.0.mlp.up_proj.lora_A.mlp.weight", "0")


@pytest.mark.parametrize("names", [("mlp", "q_proj"), ("0", "model")])
def test_lora_agents_named_like_modules_keep_the_base_frozen(names):
    agents = ", ".join(f"{{name: {n!r}, max_completion_length: 8}}" for n in names)
    overrides = tiny_overrides("lora") + [f"team.agents=[{agents}]", "model.device=cpu"]
    team = Team(load_config(None, overrides))
    model = team.policies[names[0]].model
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable, "no adapter is trainable"
    assert all(".lora_" in n for n in trainable), sorted(n for n in trainable if ".lora_" not in n)
    ids = {id(p): n for n, p in model.named_parameters()}
    for a in names:
        mine = {ids[id(p)] for p in team.policies[a].parameters()}
        # exactly this adapter's LoRA weights (PEFT names them <module>.lora_A.<adapter>.weight)
        own = re.compile(rf"\.lora_[A-Za-z_]+\.{re.escape(a)}(\.|$)")
        assert mine and mine == {n for n in trainable if own.search(n)}
    assert len(trainable) == sum(len(team.policies[a].parameters()) for a in names)


def test_response_prefix_ends_the_prompt_and_starts_the_reply_the_env_sees():
    from teamrl.algorithms.magrpo import joint_rollout
    from teamrl.envs.base import Task
    from teamrl.envs.functional import FunctionEnv

    seen: list[str] = []

    def reward(completions, example):
        seen.append(completions["alice"])
        return float(len(completions["bob"]))

    overrides = tiny_overrides() + [
        "model.device=cpu",
        "team.agents=[{name: alice, max_completion_length: 6, response_prefix: '#### ['},"
        " {name: bob, max_completion_length: 6}]",
    ]
    team = Team(load_config(None, overrides))
    tok = team.engine_of("alice").tokenizer
    plain = team.encode_prompt("bob", "3 + 4")
    prefixed = team.encode_prompt("alice", "3 + 4")
    assert tok.decode(prefixed, skip_special_tokens=False).endswith("assistant\n#### [")
    assert not tok.decode(plain, skip_special_tokens=False).endswith("#### [")

    task = Task("t", lambda: FunctionEnv(["alice", "bob"], reward), train=[{"prompt": "3 + 4"}])
    result = joint_rollout(
        team, task.make_env, [(0, task.train[0])], num_generations=2, max_turns=1
    )
    alice = [s for s in result.samples if s.agent == "alice"]
    assert seen and all(text.startswith("#### [") for text in seen)
    for s in alice:
        # the prefix is prompt, not action: never in the completion ids the loss scores
        assert list(s.prompt_ids) == prefixed
        assert s.text.startswith("#### [")
        assert tok.decode(s.completion_ids, skip_special_tokens=True) == s.text[len("#### [") :]


def test_cut_at_stop_ends_the_text_where_generation_stopped():
    # the token that completes a stop string may carry more text: "]))." in one token
    assert cut_at_stop("R', 'D'])).", ["'])"]) == "R', 'D'])"
    # several stops: the earliest end wins (generation stopped at the first one completed)
    assert cut_at_stop("x])y", ["])", "]"]) == "x]"
    assert cut_at_stop("ab]c])", ["])"]) == "ab]c])"
    assert cut_at_stop("no stop here", ["])"]) == "no stop here"
    assert cut_at_stop("anything", []) == "anything"


def test_the_env_reads_a_stopped_reply_through_its_stop_string_only():
    overrides = tiny_overrides() + [
        "model.device=cpu",
        "team.agents=[{name: tool, max_completion_length: 8, response_prefix: 'print([', "
        'stop: ["\'])"]}, {name: plan, max_completion_length: 8}]',
    ]
    team = Team(load_config(None, overrides))
    tok = team.engine_of("tool").tokenizer
    tail = "'R', 'D']).\n```\nmore"
    ids = tok.encode(tail, add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == tail  # the stand-in round-trips
    assert team.decode("tool", ids) == "print(['R', 'D'])"
    # an agent without stop strings reads everything it sampled
    assert team.decode("plan", ids) == tail
