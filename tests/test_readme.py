"""The README's ten-line custom task runs as written (on a tiny model, one step)."""

from __future__ import annotations

import re
from pathlib import Path


def test_readme_custom_task_example_runs(tmp_path, monkeypatch):
    text = (Path(__file__).parents[1] / "README.md").read_text()
    section = text.split("## Your own task in ten lines", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len([ln for ln in code.splitlines() if ln.strip()]) <= 14
    code = code.replace("smollm2-135m", "tiny-llama").replace("max_steps=20", "max_steps=1")
    code = code.replace('"train.max_steps=1"', '"train.max_steps=1", "log.progress_bar=false"')
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "runs" / "run" / "metrics.jsonl").exists()
