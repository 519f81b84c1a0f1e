"""The Plan-Path ablation script builds valid configs for every condition (it cannot rot)."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from teamrl.config import load_config

SCRIPT = Path(__file__).resolve().parent.parent / "experiments" / "plan_path_ablation.py"


def _ablation():
    spec = importlib.util.spec_from_file_location("plan_path_ablation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_condition_loads_with_the_prefills_it_documents():
    ablation = _ablation()
    args = argparse.Namespace(
        **{
            "seeds": [0],
            "steps": 6,
            "size": 3,
            "turns": 1,
            "k": 4,
            "tool_tokens": 24,
            "plan_tokens": 16,
            "test_problems": 16,
            "runs": "runs",
            "model": "smollm2-135m",
            "prompts_per_step": 1,
            "lr": 1e-3,
            "tool_prefix": "```python\nprint([",
            "plan_prefix": "#### [",
        }
    )
    for name, spec in ablation.CONDITIONS.items():
        task, algo, policies = spec or ("plan_path", "at_grpo", "shared")
        cfg = load_config(None, ablation.overrides(task, algo, policies, 0, args))
        agents = {a.name: a for a in cfg.team.agents}
        assert (cfg.env.name, cfg.algorithm.name, cfg.team.policies) == (task, algo, policies)
        if task.endswith("_single"):
            assert list(agents) == ["solver"] and agents["solver"].response_prefix == "#### ["
        else:
            assert list(agents) == ["tool", "plan"], name
            # the newline survives the YAML round trip of the override
            assert agents["tool"].response_prefix == "```python\nprint(["
            assert agents["plan"].response_prefix == "#### ["
        assert cfg.env.kwargs["size"] == 3 and cfg.model.use_peft
