"""A solver and a checker as OpenAI Agents SDK agents, on the SDK's default model class
(``OpenAIResponsesModel``, the Responses API) pointed at the episode's base URL (docs/apps.md).

The solver multiplies two numbers and scores only when it has called the ``multiply`` function
tool with them and its answer is the product; the checker reads the solver's answer and says
CORRECT or WRONG, and earns its own reward when it is right about it. Tracing is off, so no
call leaves the machine.

    pip install 'teamrl[apps-agents]'
    teamrl train examples/agents_sdk_app.yaml --import examples/agents_sdk_app.py
"""

import random
import re

from agents import (
    Agent,
    AgentsException,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from teamrl.apps import app_task
from teamrl.envs.base import register_task

set_tracing_disabled(True)  # the SDK would send every run's trace to OpenAI's servers

SOLVER = (
    "You multiply two numbers. Call the multiply tool with them, then answer with the "
    "product alone."
)
CHECKER = "You check a multiplication. Answer CORRECT if the proposed answer is right, else WRONG."


def problems() -> dict[str, list[dict]]:
    """Every pair of two-digit numbers, shuffled once: disjoint train, eval and test splits."""
    pairs = [{"a": a, "b": b} for a in range(11, 100) for b in range(11, 100)]
    random.Random(0).shuffle(pairs)
    return {"train": pairs[:512], "eval": pairs[512:544], "test": pairs[544:576]}


def last_number(text: str) -> int | None:
    found = re.findall(r"-?\d+", text.replace(",", ""))
    return int(found[-1]) if found else None


async def answer(agent: Agent, prompt: str, max_turns: int) -> str:
    """The agent's final output, or "" when the run fails: a reply cut at the agent's token
    limit (an incomplete response) or too many turns is the model's failure, worth nothing."""
    try:
        return str((await Runner.run(agent, prompt, max_turns=max_turns)).final_output)
    except AgentsException:
        return ""


async def episode(example, base_url, api_key):
    a, b = example["a"], example["b"]
    called = []

    @function_tool
    def multiply(x: int, y: int) -> int:
        """Multiply two integers."""
        called.append({x, y})
        return x * y

    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:

        def model(name):  # the SDK's default model class, on this episode's endpoint
            return OpenAIResponsesModel(model=name, openai_client=client)

        # The solver's first call must call multiply (tool_choice); the SDK resets the choice
        # once the tool has run (reset_tool_choice), so its next call answers in text. With
        # endpoint.prefill_tool_calls the endpoint writes the call's opening and the model the
        # arguments: a 135M model does not write a call on its own (docs/apps.md).
        solver = Agent(
            name="solver",
            instructions=SOLVER,
            tools=[multiply],
            model=model("solver"),
            model_settings=ModelSettings(tool_choice="multiply"),
        )
        checker = Agent(name="checker", instructions=CHECKER, model=model("checker"))
        question = f"What is {a} x {b}?"
        proposed = await answer(solver, question, max_turns=3)
        verdict = await answer(checker, f"{question}\nProposed answer: {proposed}", max_turns=1)
    right = {a, b} in called and last_number(proposed) == a * b
    says_right = verdict.strip().upper().startswith("CORRECT")
    return float(right), {"checker": float(says_right == right)}


@register_task("multiply_agents_sdk", "A solver with a tool and a checker, as Agents SDK agents.")
def multiply_agents_sdk():
    return app_task("multiply_agents_sdk", episode, ["solver", "checker"], **problems())
