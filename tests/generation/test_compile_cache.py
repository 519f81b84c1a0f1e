"""The compiled decode step's kernels outlive the process: a second run loads them from teamrl's
cache instead of compiling again (inductor's FX graph cache under ``compile_cache_dir``), and
decodes the same tokens. On the CPU with inductor, in two fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, os, torch
from torch._dynamo.utils import counters
from teamrl.generation import fast_decode
from teamrl.generation.types import Request
from teamrl.team.models import load_model

torch.manual_seed(0)
model = load_model("tiny-llama").eval()
reqs = [Request([5, 6, 7, 8], n=2, temperature=0.0, max_new_tokens=4)]
out = fast_decode.generate(model, reqs, [0], 0, ignore_eos=True, compile=True)
print(json.dumps({
    "tokens": [[list(g.completion_ids) for g in gens] for gens in out],
    "inductor": dict(counters["inductor"]),
    "dir": os.environ["TORCHINDUCTOR_CACHE_DIR"],
}))
"""


def run_probe(cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env.update(TEAMRL_CACHE=str(cache), PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_run_loads_the_compiled_decode_step_from_teamrls_cache(tmp_path):
    first, second = run_probe(tmp_path), run_probe(tmp_path)
    folder = tmp_path / "torch-compile"
    assert first["dir"] == second["dir"] == str(folder)
    assert any(folder.rglob("*"))  # the kernels are on disk, under teamrl's cache
    assert first["inductor"].get("fxgraph_cache_miss", 0) >= 1  # compiled the first time
    assert second["inductor"].get("fxgraph_cache_hit", 0) >= 1  # loaded the second time
    assert second["inductor"].get("fxgraph_cache_miss", 0) == 0
    assert first["tokens"] == second["tokens"]
