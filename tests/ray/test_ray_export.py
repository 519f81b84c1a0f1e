"""A user's path from a Ray run: ``teamrl export RUN_DIR OUT`` writes standard weights that
plain PEFT/transformers reload with the trained policy's log-probs, and ``teamrl eval RUN_DIR``
shows a progress bar."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray.util")  # not the tests/ray folder itself

import torch  # noqa: E402
import yaml  # noqa: E402
from helpers.runs import ROOT  # noqa: E402
from ray_cluster import ray_cluster  # noqa: E402, F401
from ray_helpers import IDS, logprobs, ray_cfg  # noqa: E402

from teamrl.cli import main as cli_main  # noqa: E402
from teamrl.scale import shutdown_team  # noqa: E402
from teamrl.team.policies import Team  # noqa: E402
from teamrl.team.weights import base_fingerprint  # noqa: E402
from teamrl.trainer import Trainer  # noqa: E402


def ray_run(address: str, tmp_path: Path, policies: str, steps: int, **extra):
    """Train under Ray; return the config, the run folder, and each policy's live weights
    (rank 0's, fetched before the workers go away). ``Trainer.export`` writes ``direct/``."""
    cfg = ray_cfg(address, policies, steps, 1, **{"train.learning_rate": 0.05, **extra})
    tr = Trainer(cfg, run_dir=tmp_path / "run")
    try:
        tr.train()
        live = {name: pol.state_dict() for name, pol in tr.team.policies.items()}
        tr.export(tmp_path / "direct")
    finally:
        shutdown_team(tr.team)
    return cfg, tr.run_dir, live


@pytest.fixture(scope="module")
def lora_run(ray_cluster, tmp_path_factory):  # noqa: F811
    """`teamrl train ... distributed.backend=ray train.max_steps=2` on tiny LoRA agents."""
    return ray_run(ray_cluster, tmp_path_factory.mktemp("ray-lora"), "lora", 2)


def test_lora_ray_run_exports_adapters_that_plain_peft_loads(lora_run, tmp_path):
    from peft import AutoPeftModelForCausalLM

    cfg, run, live = lora_run
    out = tmp_path / "team"
    assert cli_main(["export", str(run), str(out)]) == 0  # was: "written before ... formats"
    assert not list(run.rglob("weights.pt"))  # the checkpoints hold the standard formats
    # the trained policies, rebuilt in this process from the workers' live weights
    local = Team(cfg)
    model = local.policies["alice"].model
    team_yaml = yaml.safe_load((out / "team.yaml").read_text())
    want_fp = base_fingerprint(model)  # the workers' base, as one process fingerprints it
    for agent, entry in zip(("alice", "bob"), team_yaml["agents"]):
        assert (entry["weights"], entry["format"]) == (f"{agent}/", "peft_adapter")
        assert entry["base_fingerprint"] == want_fp  # was "" for a Ray run
        local.policies[agent].load_state_dict(live[agent])
        local.policies[agent].activate()
        mine = logprobs(model, IDS)
        plain = AutoPeftModelForCausalLM.from_pretrained(out / agent).eval()
        assert torch.allclose(logprobs(plain, IDS), mine, atol=1e-5)
        with model.disable_adapter():  # the adapter matters: the base alone differs
            assert not torch.allclose(logprobs(model, IDS), mine, atol=1e-4)
        # Trainer.export of the live Ray team writes the same files (it wrote weights.pt)
        direct = run.parent / "direct" / agent / "adapter_model.safetensors"
        assert direct.read_bytes() == (out / agent / "adapter_model.safetensors").read_bytes()


def test_full_model_ray_run_exports_a_model_transformers_loads(ray_cluster, tmp_path):  # noqa: F811
    from transformers import AutoModelForCausalLM

    # the tiny model's rewards can tie in every group (no gradient); weight decay still moves
    # every weight in the step, so the export differs from the base in any case
    cfg, run, live = ray_run(ray_cluster, tmp_path, "shared", 1, **{"train.weight_decay": 0.5})
    out = tmp_path / "team"
    assert cli_main(["export", str(run), str(out)]) == 0
    local = Team(cfg)
    base = logprobs(local.policies["shared"].model, IDS)
    local.policies["shared"].load_state_dict(live["shared"])
    mine = logprobs(local.policies["shared"].model, IDS)
    plain = AutoModelForCausalLM.from_pretrained(out / "shared").eval()
    assert torch.allclose(logprobs(plain, IDS), mine, atol=1e-5)
    assert not torch.allclose(base, mine, atol=1e-4)  # one step moved the weights


def test_eval_of_a_ray_run_shows_a_progress_bar(lora_run, tmp_path):
    _, run, _ = lora_run
    rep = tmp_path / "rep"
    cmd = [sys.executable, "-m", "teamrl.cli", "eval", str(run), "log.progress_bar=true"]
    cmd += ["--split", "eval", "--limit", "2", "--num-samples", "1", "--ks", "1"]
    cmd += ["--no-baseline", "--output-dir", str(rep)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    # 2 problems x (1 greedy + 1 sampled episode) = 4 episodes; the bar's last state says so
    frames = [f for f in proc.stderr.replace("\r", "\n").splitlines() if "eval eval" in f]
    assert frames and "4/4" in frames[-1], proc.stderr
    assert list(json.loads((rep / "eval.json").read_text())) == ["digits (step-2)"]
