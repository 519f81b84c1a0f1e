"""3-step MAGRPO and AT-GRPO runs with generation.backend=vllm (phase 2: skipped until Team
builds its generation backends through teamrl.generation.make_backend)."""

from __future__ import annotations

import inspect

import pytest

import teamrl.team


def _team_uses_backends() -> bool:
    return "make_backend" in inspect.getsource(teamrl.team)


pytestmark = pytest.mark.skipif(
    not _team_uses_backends(), reason="Team does not build generation backends yet (phase 2)"
)


def _overrides(policies: str, algorithm: str) -> list[str]:
    items = [
        "model.name_or_path=smollm2-135m",
        f"team.policies={policies}",
        "env.name=digits",
        "team.agents=[{name: alice, max_completion_length: 12}, "
        "{name: bob, max_completion_length: 12}]",
        "train.max_steps=3",
        "train.learning_rate=0.001",
        "algorithm.num_generations=2",
        f"algorithm.name={algorithm}",
        "log.progress_bar=false",
        "generation.backend=vllm",
        "generation.vllm_max_model_length=1024",
        "generation.vllm_kv_cache_gb=0.5",
    ]
    if algorithm == "at_grpo":
        items.append("env.kwargs={sequential: true}")
    return items


@pytest.mark.parametrize(("policies", "algorithm"), [("lora", "magrpo"), ("lora", "at_grpo")])
def test_three_steps_with_vllm(tmp_path, policies, algorithm):
    from teamrl.config import load_config
    from teamrl.trainer import Trainer

    trainer = Trainer(load_config(None, _overrides(policies, algorithm)), run_dir=tmp_path / "r")
    history = trainer.train()
    assert len(history) == 3
    assert all(h["loss"] == h["loss"] for h in history)  # finite, not NaN
