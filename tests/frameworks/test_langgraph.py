"""A real multi-agent framework behind the endpoint: the LangGraph example
(examples/langgraph_app.py, langchain-openai's ChatOpenAI per node) trained one step from the
command line. Its own tier (TEAMRL_TEST_FRAMEWORKS=1, the apps-langgraph extra; .ci/run)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("langgraph", reason="pip install 'teamrl[apps-langgraph]'")
pytest.importorskip("langchain_openai", reason="pip install 'teamrl[apps-langgraph]'")

from teamrl.cli import main as cli_main  # noqa: E402
from teamrl.run import files as run_files  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_langgraph_app_trains_from_the_command_line(tmp_path, monkeypatch):
    monkeypatch.setenv("LANGSMITH_TRACING", "false")  # nothing leaves the machine
    overrides = [
        "model.name_or_path=tiny-llama",
        "team.agents.0.max_completion_length=6",
        "team.agents.1.max_completion_length=6",
        "algorithm.num_generations=2",
        "train.prompts_per_step=2",
        "train.max_steps=1",
        "log.progress_bar=false",
    ]
    code = cli_main(
        ["train", str(EXAMPLES / "langgraph_app.yaml"), "--import",
         str(EXAMPLES / "langgraph_app.py"), *overrides, "--run-dir", str(tmp_path / "run")]
    )  # fmt: skip
    assert code == 0
    (row,) = run_files.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    # 4 episodes, each node of the graph one call: 2 calls per episode, aligned groups
    assert row["turns/mean"] == 2.0 and row["app/dropped_samples"] == 0.0
    assert row["app/refused_calls"] == 0.0 and "loss/concise" in row and "loss/detailed" in row
