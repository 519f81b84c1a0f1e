"""Two tool-using agents as OpenAI Agents SDK agents, on the SDK's default model class
(``OpenAIResponsesModel``, the Responses API) pointed at the episode's base URL (docs/apps.md).

The team computes ``a x b + c``. The multiplier calls the ``multiply`` function tool with a and
b and reports the product; the adder is given only the number the multiplier reported (never a
and b), calls the ``add`` function tool with it and c, and answers. Neither can score alone:
the adder needs the product the multiplier reports. The team reward gives half for a right
product (multiply called with a and b, the report's last number the product) and half for a
right total (add called with the product and c, the answer's last number the total); the adder
also earns a local reward for adding what it was given, right or wrong, so that its own part
is credited apart from the multiplier's. Tracing is off, so no call leaves the machine.

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

MULTIPLIER = (
    "You multiply two numbers. Call the multiply tool with them, then answer with the "
    "product alone."
)
ADDER = "You add two numbers. Call the add tool with them, then answer with the sum alone."


def problems() -> dict[str, list[dict]]:
    """Every pair of two-digit numbers, shuffled once, each with a two-digit c: disjoint train,
    eval and test splits."""
    rng = random.Random(0)
    pairs = [{"a": a, "b": b} for a in range(11, 100) for b in range(11, 100)]
    rng.shuffle(pairs)
    for pair in pairs[:576]:
        pair["c"] = rng.randrange(11, 100)
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


def rewards(example: dict, multiplied: list, added: list, report: str, total: str):
    """(team reward, {"adder": local reward}). The team: half for a right product (multiply
    called with a and b, the report ending in the product), half for a right total (add called
    with the true product and c, the answer ending in the total: a guess does not score). The
    adder's local reward: 1 when it added the number it was given and c, called add with them
    and answered their sum, whatever the multiplier reported. Without it, the adder's reward
    would move mostly with the multiplier's half, which nothing the adder writes changes."""
    a, b, c = example["a"], example["b"], example["c"]
    given = last_number(report)
    product = {a, b} in multiplied and given == a * b
    summed = {a * b, c} in added and last_number(total) == a * b + c
    own = given is not None and {given, c} in added and last_number(total) == given + c
    return 0.5 * product + 0.5 * summed, {"adder": float(own)}


async def episode(example, base_url, api_key):
    a, b, c = example["a"], example["b"], example["c"]
    multiplied, added = [], []

    @function_tool
    def multiply(x: int, y: int) -> int:
        """Multiply two integers."""
        multiplied.append({x, y})
        return x * y

    @function_tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        added.append({x, y})
        return x + y

    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:

        def agent(name, instructions, tool):
            # The SDK's default model class, on this episode's endpoint. The agent's first call
            # must call its tool (tool_choice); the SDK resets the choice once the tool has run
            # (reset_tool_choice), so its next call answers in text. With
            # endpoint.prefill_tool_calls the endpoint writes the call's opening and the model
            # the arguments: a 135M model does not write a call on its own (docs/apps.md).
            model = OpenAIResponsesModel(model=name, openai_client=client)
            settings = ModelSettings(tool_choice=tool.name)
            return Agent(name=name, instructions=instructions, tools=[tool], model=model,
                         model_settings=settings)  # fmt: skip

        multiplier = agent("multiplier", MULTIPLIER, multiply)
        adder = agent("adder", ADDER, add)
        report = await answer(multiplier, f"What is {a} x {b}?", max_turns=3)
        # The adder is asked the multiplier's question in its own shape, with the number the
        # multiplier reported in place of a x b ("?" when it reported none).
        given = last_number(report)
        ask = f"What is {'?' if given is None else given} + {c}?"
        total = await answer(adder, ask, max_turns=3)
    return rewards(example, multiplied, added, report, total)


@register_task("multiply_add_agents_sdk", "a x b + c by two tool-using Agents SDK agents.")
def multiply_add_agents_sdk():
    return app_task("multiply_add_agents_sdk", episode, ["multiplier", "adder"], **problems())
