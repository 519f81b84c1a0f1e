"""A real agent framework behind the endpoint's Responses API: the OpenAI Agents SDK on its
default model class (``OpenAIResponsesModel``). A solver's function tool round-trips through
``Runner.run`` and ``Runner.run_streamed`` on scripted replies, and the example
(examples/agents_sdk_app.py: a solver with a tool and a checker) trains two steps from the
command line. Its own tier (TEAMRL_TEST_FRAMEWORKS=1, the apps-agents extra; .ci/run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("agents", reason="pip install 'teamrl[apps-agents]'")

from agents import (  # noqa: E402
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from helpers.apps import run, tiny_cfg  # noqa: E402
from helpers.scripted import scripted_backend  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from teamrl.algorithms.app import episode_samples  # noqa: E402
from teamrl.cli import main as cli_main  # noqa: E402
from teamrl.run import files as run_files  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


@pytest.fixture(scope="module")
def team():
    from teamrl.team.policies import Team

    return Team(tiny_cfg())


@pytest.fixture
def scripted(team):
    with scripted_backend(team) as backend:
        yield backend


def adder():
    """An ``add`` function tool for the SDK and the list of the results it returned."""
    results: list[int] = []

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        results.append(a + b)
        return a + b

    return results, add


def agent_on(client, tool, **settings) -> Agent:
    """Agent ``alice`` with ``tool`` on the SDK's default model class, on the episode's client."""
    model = OpenAIResponsesModel(model="alice", openai_client=client)
    return Agent(name="alice", instructions="Use add.", tools=[tool], model=model, **settings)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_the_sdks_default_model_class_runs_a_tool_round_trip(team, scripted, streamed):
    set_tracing_disabled(True)  # nothing leaves the machine
    results, add = adder()

    async def episode(example, base_url, api_key):
        async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            agent = agent_on(client, add)
            if streamed:
                result = Runner.run_streamed(agent, "What is 2+3?")
                async for _ in result.stream_events():
                    pass
            else:
                result = await Runner.run(agent, "What is 2+3?")
        return float(result.final_output == "It is 5.")

    scripted.script = [f"Adding.\n{CALL}", "It is 5."]
    (rec,) = run(team, episode)
    assert results == [5] and rec.team_reward == 1.0  # the tool ran; the answer came back
    assert [c.agent for c in rec.calls] == ["alice", "alice"] and rec.unparsed_tool_calls == 0
    prompt = team.engine_of("alice").tokenizer.decode(rec.calls[1].prompt_ids)
    # the SDK sent back the model's message and call as one turn, then the tool's result
    assert f"<|im_start|>assistant\nAdding.\n{CALL}<|im_end|>\n" in prompt
    assert "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n" in prompt
    assert prompt.startswith("<|im_start|>system\nUse add.\n\n# Tools")
    tools = prompt.split("<tools>\n")[1].split("\n</tools>")[0]
    assert json.loads(tools)["function"]["name"] == "add"
    samples = episode_samples(team, rec, "call", 1.0, False)
    assert [s.completion_ids for s in samples] == scripted.sampled  # trained as sampled


def test_a_tool_choice_the_sdk_forces_is_written_and_then_reset(team, scripted):
    """The SDK's ``ModelSettings(tool_choice=...)`` arrives as the Responses' named choice; with
    endpoint.prefill_tool_calls the reply opens the call and the model writes the arguments; the
    SDK then resets the choice (``reset_tool_choice``), so the answer is free text."""
    from teamrl.config.endpoint import EndpointConfig

    set_tracing_disabled(True)
    results, add = adder()

    async def episode(example, base_url, api_key):
        async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            agent = agent_on(client, add, model_settings=ModelSettings(tool_choice="add"))
            result = await Runner.run(agent, "What is 2+3?")
        return float(result.final_output == "It is 5.")

    scripted.script = ['"a": 2, "b": 3}}</tool_call>', "It is 5."]
    (rec,) = run(team, episode, limits=EndpointConfig(prefill_tool_calls=True))
    assert results == [5] and rec.team_reward == 1.0 and rec.unparsed_tool_calls == 0
    first, second = (team.engine_of("alice").tokenizer.decode(c.prompt_ids) for c in rec.calls)
    assert first.endswith('<|im_start|>assistant\n<tool_call>{"name": "add", "arguments": {')
    assert second.endswith("<|im_start|>assistant\n")  # the choice was reset: nothing written
    assert rec.calls[0].text == CALL
    samples = episode_samples(team, rec, "call", 1.0, False)
    assert [s.completion_ids for s in samples] == scripted.sampled  # trained as sampled


def test_the_agents_sdk_app_trains_from_the_command_line(tmp_path):
    overrides = [
        "model.name_or_path=tiny-llama",
        "team.agents.0.max_completion_length=6",
        "team.agents.1.max_completion_length=6",
        "algorithm.num_generations=2",
        "train.prompts_per_step=2",
        "train.max_steps=2",
        "log.progress_bar=false",
    ]
    code = cli_main(
        ["train", str(EXAMPLES / "agents_sdk_app.yaml"), "--import",
         str(EXAMPLES / "agents_sdk_app.py"), *overrides, "--run-dir", str(tmp_path / "run")]
    )  # fmt: skip
    assert code == 0
    rows = run_files.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert len(rows) == 2
    for row in rows:
        # 4 episodes; a tiny random model completes no call, so each agent is called once (its
        # reply is its answer, or cut at 6 tokens: an incomplete response, caught)
        assert row["turns/mean"] == 2.0 and row["app/refused_calls"] == 0.0
        assert row["app/dropped_samples"] == 0.0
        assert "loss/multiplier" in row and "loss/adder" in row


@pytest.fixture(scope="module")
def example():
    """examples/agents_sdk_app.py, loaded under its own name (its task is registered once per
    process, and the command-line test may have imported it already), and a team of its two
    agents on the tiny model."""
    import importlib.util

    from teamrl.envs import base
    from teamrl.team.policies import Team

    saved = base._REGISTRY
    base._REGISTRY = {k: v for k, v in saved.items() if k != "multiply_add_agents_sdk"}
    try:
        spec = importlib.util.spec_from_file_location(
            "agents_sdk_app_under_test", EXAMPLES / "agents_sdk_app.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        base._REGISTRY = saved
    agents = "team.agents=[{name: multiplier, max_completion_length: 32}, {name: adder}]"
    return module, Team(tiny_cfg(agents))


def args(x: int, y: int) -> str:
    """What the model writes after the endpoint's written opening of a call."""
    return f'"x": {x}, "y": {y}}}}}</tool_call>'


@pytest.mark.parametrize(
    ("script", "team", "adder"),
    [
        ([args(86, 12), "1032", args(1032, 7), "1039"], 1.0, 1.0),
        ([args(86, 12), "1032", args(1032, 7), "1040"], 0.5, 0.0),  # the total misread
        ([args(86, 12), "1000", args(1000, 7), "1007"], 0.0, 1.0),  # a wrong report, added
        ([args(86, 21), "1806", args(1806, 7), "1813"], 0.0, 1.0),  # multiply on other numbers
        ([args(86, 12), "1032", args(1000, 39), "1039"], 0.5, 0.0),  # the right total, guessed
        (['"x": 86', args(1032, 7), "1039"], 0.5, 0.0),  # no multiply call: no product half
    ],
    ids=["right", "total-misread", "wrong-report", "other-numbers", "guessed-total", "no-call"],
)
def test_the_examples_rewards_need_both_tools_and_credit_the_adder_apart(
    example, script, team, adder
):
    """The example's episode on scripted replies, a = 86, b = 12, c = 7: each agent's first call
    is written open by the endpoint (``prefill_tool_calls``) and the script gives the rest, then
    its answer. The team: half for a right product, half for a right total, the total's half
    only through an add call on the true product. The adder's local reward: it added the number
    it was given and c, whatever the multiplier reported."""
    from teamrl.apps.episodes import run_episodes
    from teamrl.apps.task import AppEnv
    from teamrl.config.endpoint import EndpointConfig
    from teamrl.rollout.common import RolloutClock

    module, team_ = example
    env = AppEnv(["multiplier", "adder"], module.episode)
    with scripted_backend(team_) as backend:
        backend.script = list(script)
        (rec,) = run_episodes(
            team_, env, [(0, {"a": 86, "b": 12, "c": 7})], 1, greedy=False, ignore_eos=False,
            clock=RolloutClock(), timeout=0.0, limits=EndpointConfig(prefill_tool_calls=True),
        )  # fmt: skip
    called = [c.agent for c in rec.calls]
    if script[0].endswith("</tool_call>"):
        assert called == ["multiplier", "multiplier", "adder", "adder"]
    else:  # the unfinished call reads as text: the multiplier's answer
        assert called == ["multiplier", "adder", "adder"] and rec.unparsed_tool_calls == 1
    prompt = team_.engine_of("adder").tokenizer.decode(rec.calls[-2].prompt_ids)
    given = "86" if script[0] == '"x": 86' else script[1]
    assert f"<|im_start|>user\nWhat is {given} + 7?<|im_end|>" in prompt
    assert (rec.team_reward, rec.local_rewards) == (team, {"adder": adder})
