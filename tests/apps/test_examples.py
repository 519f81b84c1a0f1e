"""The app examples run as the docs say: ``teamrl train examples/tldr_app.yaml --import
examples/tldr_app.py``, here on tiny-llama for one step."""

from __future__ import annotations

from pathlib import Path

import pytest

from teamrl.cli import main as cli_main
from teamrl.run import files as run_files

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def forget_tasks():
    """The examples' tasks are forgotten afterwards (docs/apps.md registers the same name)."""
    from teamrl.envs import base
    from teamrl.tasks.registry import registered_tasks

    registered_tasks()
    before = dict(base._REGISTRY)
    yield
    base._REGISTRY.clear()
    base._REGISTRY.update(before)


def test_the_tldr_app_trains_from_the_command_line(tmp_path):
    overrides = [
        "model.name_or_path=tiny-llama",
        "team.agents.0.max_completion_length=6",
        "team.agents.1.max_completion_length=6",
        "algorithm.num_generations=2",
        "train.max_steps=1",
        "log.progress_bar=false",
    ]
    code = cli_main(
        ["train", str(EXAMPLES / "tldr_app.yaml"), "--import", str(EXAMPLES / "tldr_app.py"),
         *overrides, "--run-dir", str(tmp_path / "run")]
    )  # fmt: skip
    assert code == 0
    (row,) = run_files.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert row["turns/mean"] == 2.0 and "loss/concise" in row and "loss/detailed" in row
