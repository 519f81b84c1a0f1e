"""LangChain's Responses mode behind the endpoint: langchain-openai's ``ChatOpenAI`` with
``use_responses_api=True`` runs a tool round trip (``bind_tools``, the call's ``ToolMessage``
sent back) and a stream on scripted replies. Its own tier (TEAMRL_TEST_FRAMEWORKS=1, the
apps-langgraph extra; .ci/run)."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_openai", reason="pip install 'teamrl[apps-langgraph]'")

from helpers.apps import run, tiny_cfg  # noqa: E402
from helpers.scripted import ADD, CALL_ADD, scripted_backend  # noqa: E402
from langchain_core.messages import ToolMessage  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402


@pytest.fixture(scope="module")
def team():
    from teamrl.team.policies import Team

    return Team(tiny_cfg())


def test_chatopenai_in_responses_mode_round_trips_a_tool_call_and_streams(team, monkeypatch):
    monkeypatch.setenv("LANGSMITH_TRACING", "false")  # nothing leaves the machine
    got = {}

    def episode(example, base_url, api_key):
        llm = ChatOpenAI(
            model="alice", base_url=base_url, api_key=api_key, max_retries=0,
            use_responses_api=True,
        )  # fmt: skip
        tools = llm.bind_tools([ADD])
        first = tools.invoke([("system", "Use add."), ("user", "2+3?")])
        (call,) = first.tool_calls
        answer = ToolMessage(content=str(call["args"]["a"] + call["args"]["b"]), tool_call_id=call["id"])  # fmt: skip
        got["second"] = tools.invoke([("system", "Use add."), ("user", "2+3?"), first, answer])
        got["first"], got["streamed"] = first, "".join(c.text for c in llm.stream("hi"))
        return 0.0

    with scripted_backend(team) as scripted:
        scripted.script = [f"Adding.\n{CALL_ADD}", "It is 5.", "Streamed text."]
        (rec,) = run(team, episode)
    first = got["first"]
    assert first.text == "Adding." and first.response_metadata["status"] == "completed"
    assert [(c["name"], c["args"]) for c in first.tool_calls] == [("add", {"a": 2, "b": 3})]
    assert got["second"].text == "It is 5." and got["streamed"] == "Streamed text."
    prompt = team.engine_of("alice").tokenizer.decode(rec.calls[1].prompt_ids)
    assert prompt.startswith("<|im_start|>system\nUse add.\n\n# Tools")
    assert prompt.endswith(
        f"<|im_start|>assistant\nAdding.\n{CALL_ADD}<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert rec.unparsed_tool_calls == 0 and len(rec.calls) == 3
