"""What a step holds (teamrl/config/step_shape.py) and which agents each policy serves
(teamrl/config/policy_map.py), counted by hand; every recipe answers with its algorithm's shape."""

from __future__ import annotations

from helpers.runs import tiny_overrides

from teamrl.algorithms.registry import RECIPES
from teamrl.config import load_config
from teamrl.config.policy_map import (
    adapters_per_model,
    base_of,
    model_copies,
    policy_agents,
    uses_lora,
)
from teamrl.config.step_shape import SHAPES, StepShape, step_shape


def cfg(**extra):
    return load_config(None, tiny_overrides("shared", 1, **extra))


def test_magrpo_tree_by_hand():
    # aligned, G 4, 2 agents, 2 turns, 2 prompts: nodes per prompt 1 then 4
    c = cfg(**{"env.max_turns": 2, "train.prompts_per_step": 2})
    # env steps 2 * (1*4 + 4*4); last turn 2 * 4 nodes * 2 agents * 4; samples 2 * 5 * 2 * 4
    assert step_shape(c) == StepShape(env_steps=40, generation_rows=64, samples=80)
    # cross, G 2: 4 joint actions a node, nodes 1 then 4
    c = cfg(**{"env.max_turns": 2, "algorithm.joint_mode": "cross", "algorithm.num_generations": 2})
    assert step_shape(c) == StepShape(env_steps=4 + 16, generation_rows=16, samples=20)


def test_agent_turn_shape_by_hand():
    # K 4, 2 agents, 3 turns, 2 prompts: 16 rows a turn
    for name in ("at_grpo", "grpo"):
        c = cfg(**{"algorithm.name": name, "env.max_turns": 3, "train.prompts_per_step": 2})
        assert step_shape(c) == StepShape(env_steps=48, generation_rows=16, samples=48)


def test_every_recipe_answers_with_its_shape():
    assert sorted(RECIPES) == sorted(SHAPES)
    for name, recipe in RECIPES.items():
        assert recipe.shape is SHAPES[name]


def test_policy_map_in_each_mode():
    shared = cfg()
    assert policy_agents(shared) == {"shared": ["alice", "bob"]}
    assert (uses_lora(shared), adapters_per_model(shared), model_copies(shared)) == (
        False,
        0,
        ["tiny-llama"],
    )
    lora = load_config(None, tiny_overrides("lora", 1))
    assert policy_agents(lora) == {"alice": ["alice"], "bob": ["bob"]}
    assert (uses_lora(lora), adapters_per_model(lora), model_copies(lora)) == (
        True,
        2,
        ["tiny-llama"],
    )
    team = "[{name: alice, model: tiny-qwen2}, {name: bob}]"
    separate = load_config(None, tiny_overrides("separate", 1, **{"team.agents": team}))
    assert model_copies(separate) == ["tiny-qwen2", "tiny-llama"]
    assert [base_of(separate, a) for a in separate.team.agents] == ["tiny-qwen2", "tiny-llama"]
    assert (
        adapters_per_model(
            load_config(None, tiny_overrides("shared", 1, **{"model.use_peft": True}))
        )
        == 1
    )
