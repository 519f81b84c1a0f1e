"""Every shipped config loads and runs one training step on a tiny model, so configs cannot rot."""

from __future__ import annotations

import pytest
from helpers.coding import HE_ROW, MBPP_ROW, _cc_row, _write_jsonl

from teamrl.config import BUILTIN_CONFIGS, load_config
from teamrl.tasks.registry import task_from_config
from teamrl.trainer import Trainer

SHIPPED = sorted(p.stem for p in BUILTIN_CONFIGS.glob("*.yaml"))

# Task families that every algorithm can run: one config per (task, algorithm) pair.
BOTH_ALGORITHMS = ("humaneval", "coophumaneval", "mbpp", "code_contest", "tldr", "arxiv", "math")


def test_there_are_shipped_configs():
    assert {"quickstart", "plan_path_at_grpo", "sudoku_at_grpo", "sokoban_at_grpo"} <= set(SHIPPED)
    for task in BOTH_ALGORITHMS:
        for algorithm in ("magrpo", "at_grpo"):
            name = f"{task}_{algorithm}"
            assert name in SHIPPED, name
            cfg = load_config(name)
            assert (cfg.env.name, cfg.algorithm.name) == (task, algorithm)


def hub_fixture(name: str, folder) -> list[str]:
    """Configs whose data lives on the hub run here on a local folder in the upstream format."""
    if name.startswith("coophumaneval"):
        coop = {k: HE_ROW[k] for k in ("task_id", "prompt", "test", "entry_point")}
        rows = [{**coop, "task_id": f"CoopHumanEval/{i}"} for i in range(30)]
        _write_jsonl(folder, "train.jsonl", rows)
    elif name.startswith("mbpp"):
        for split in ("train", "validation", "test"):
            _write_jsonl(folder, f"{split}.jsonl", [MBPP_ROW])
    elif name.startswith("code_contest"):
        for split in ("train", "valid", "test"):
            _write_jsonl(folder, f"{split}.jsonl", [_cc_row(f"{split} {i}") for i in range(2)])
    else:
        return []
    return [f"env.kwargs.dataset_id={folder}"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_config_runs_one_step(name, tmp_path):
    cfg = load_config(name)
    short = [f"team.agents.{i}.max_completion_length=8" for i in range(len(cfg.team.agents))]
    # Two turns where the task has several, so the feedback path between turns runs too.
    turns = min(2, cfg.env.max_turns)
    horizon = [f"env.max_turns={turns}"]
    if "max_turns" in cfg.env.kwargs:
        horizon.append(f"env.kwargs.max_turns={turns}")
    cfg = load_config(
        name,
        [
            "model.name_or_path=tiny-llama",
            "train.max_steps=1",
            "train.prompts_per_step=1",
            "algorithm.num_generations=2",
            "eval.eval_steps=0",
            "log.progress_bar=false",
            *horizon,
            *short,
            *hub_fixture(name, tmp_path / "data"),
        ],
    )
    trainer = Trainer(cfg, task=task_from_config(cfg.env), run_dir=tmp_path / name)
    history = trainer.train()
    assert len(history) == 1
    assert history[0]["step"] == 1
    assert history[0]["groups"] >= 1
    assert f"reward/turn_{turns - 1}/mean" in history[0]  # the last turn did run
