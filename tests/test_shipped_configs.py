"""Every shipped config loads and runs one training step on a tiny model, so configs cannot rot."""

from __future__ import annotations

import pytest

from teamrl.config import BUILTIN_CONFIGS, load_config
from teamrl.trainer import Trainer

SHIPPED = sorted(p.stem for p in BUILTIN_CONFIGS.glob("*.yaml"))


def test_there_are_shipped_configs():
    assert {"quickstart", "plan_path_at_grpo", "sudoku_at_grpo", "sokoban_at_grpo"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_config_runs_one_step(name, tmp_path):
    cfg = load_config(name)
    short = [f"team.agents.{i}.max_completion_length=8" for i in range(len(cfg.team.agents))]
    cfg = load_config(
        name,
        [
            "model.name_or_path=tiny-llama",
            "train.max_steps=1",
            "train.prompts_per_step=1",
            "algorithm.num_generations=2",
            "eval.eval_steps=0",
            "log.progress_bar=false",
            *short,
        ],
    )
    trainer = Trainer(cfg, run_dir=tmp_path / name)
    history = trainer.train()
    assert len(history) == 1
    assert history[0]["step"] == 1
    assert history[0]["groups"] >= 1
