"""The Plan-Path ablation script builds valid configs for every condition (it cannot rot)."""

from __future__ import annotations

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
    # the defaults are the setting docs/results.md reports
    args = ablation.parser().parse_args([])
    assert (args.size, args.steps, args.k, args.seeds) == (3, 6, 4, [0, 1, 2])
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
