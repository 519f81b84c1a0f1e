"""The Responses API on the endpoint (``POST .../v1/responses``, teamrl.apps.responses) with
the real ``openai`` client (sync, async, ``stream=True``, ``responses.stream``) on a tiny team:
a request is sampled as the chat call it translates to (the same prompt ids), a function call
round-trips as ``function_call`` and ``function_call_output`` items, the tokens trained are the
ones sampled, streamed events add up to the reply, a reply cut at the token limit is
``incomplete``, and every refusal is OpenAI's JSON naming the field.

A tiny random model never writes a tool call, so the replies are scripted
(tests/helpers/scripted.py): cut at the request's token limit only where a test says so, the
tiny team's agents allowing 6 tokens and the scripts standing for agents that allow more."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest
from helpers.apps import run, user
from helpers.scripted import ADD as SCRIPTED_ADD
from helpers.scripted import CALL_ADD, scripted_backend

from teamrl.algorithms.app import episode_samples
from teamrl.apps.tools import FALLBACK_HEADER, FALLBACK_HOW, example_call

# the chat shape's add tool in the Responses' flat shape, as the Agents SDK sends it (strict
# schemas: no other properties)
ADD = {
    "type": "function",
    **SCRIPTED_ADD["function"],
    "parameters": {**SCRIPTED_ADD["function"]["parameters"], "additionalProperties": False},
    "strict": True,
}
CHAT_ADD = {"type": "function", "function": {k: ADD[k] for k in ("name", "description", "parameters")}}  # fmt: skip
LOGPROBS = ["message.output_text.logprobs"]


@pytest.fixture
def scripted(team):
    with scripted_backend(team) as backend:
        yield backend


def chatml(*turns: tuple[str, str]) -> str:
    """The tiny models' ChatML rendering of (role, content) turns, with the generation prompt."""
    return (
        "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in turns) + "<|im_start|>assistant\n"
    )


def prompt_text(team, rec, k: int) -> str:
    return team.engine_of("alice").tokenizer.decode(rec.calls[k].prompt_ids)


# --- text ------------------------------------------------------------------------------------------


def test_text_is_sampled_as_the_chat_call_it_translates_to_with_both_clients(team, scripted):
    got = {}

    def chat(client, example):
        messages = [{"role": "system", "content": "Be brief."}, *user("Hello")]
        got["chat"] = client.chat.completions.create(model="bob", messages=messages, logprobs=True)
        return 0.0

    def plain(client, example):  # input as a string, instructions as the system message
        got["plain"] = client.responses.create(
            model="bob", input="Hello", instructions="Be brief.", include=LOGPROBS
        )
        return 0.0

    async def parts(client, example):  # input as items with input_text parts, async
        def item(role, *texts):
            parts = [{"type": "input_text", "text": t} for t in texts]
            return {"type": "message", "role": role, "content": parts}

        items = [item("system", "Be brief."), item("user", "Hel", "lo")]
        got["parts"] = await client.responses.create(model="bob", input=items, store=False)
        return 0.0

    records = {}
    for name, episode in (("chat", chat), ("plain", plain), ("parts", parts)):
        scripted.script = ["Hi there."]
        (records[name],) = run(team, episode)
    ids = records["chat"].calls[0].prompt_ids
    assert records["plain"].calls[0].prompt_ids == records["parts"].calls[0].prompt_ids == ids
    assert prompt_text(team, records["plain"], 0) == chatml(("system", "Be brief."), ("user", "Hello"))  # fmt: skip

    reply = got["plain"]
    gen = records["plain"].calls[0].generation
    assert reply.object == "response" and reply.model == "bob" and reply.status == "completed"
    assert reply.output_text == "Hi there." == got["chat"].choices[0].message.content
    (message,) = reply.output
    assert message.type == "message" and message.role == "assistant"
    (part,) = message.content
    assert part.type == "output_text" and part.text == "Hi there."
    assert [t.logprob for t in part.logprobs] == gen.logprobs == [-0.5 - 0.25 * j for j in range(len(gen.logprobs))]  # fmt: skip
    assert reply.usage.input_tokens == len(ids)
    assert reply.usage.output_tokens == len(gen.completion_ids)
    assert reply.usage.total_tokens == len(ids) + len(gen.completion_ids)
    assert reply.instructions == "Be brief." and reply.incomplete_details is None
    assert got["parts"].output_text == "Hi there." and got["parts"].output[0].content[0].logprobs is None  # fmt: skip


def test_a_reply_cut_at_max_output_tokens_is_incomplete(team, scripted):
    got = {}

    def episode(client, example):
        got["reply"] = client.responses.create(model="alice", input="Count.", max_output_tokens=3)
        return 0.0

    scripted.script, scripted.cut = ["one two three four five six"], True
    (rec,) = run(team, episode)
    reply, gen = got["reply"], rec.calls[0].generation
    assert gen.truncated and len(gen.completion_ids) == 3  # the request's cap reached the sampler
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    assert reply.output[0].status == "incomplete" and reply.usage.output_tokens == 3
    assert reply.max_output_tokens == 3
    assert reply.output_text == team.decode("alice", gen.completion_ids)


# --- a function call round-trips ----------------------------------------------------------------


def test_a_function_call_round_trips_and_trains_the_tokens_sampled(team, scripted):
    got = []

    def responses(client, example):
        items = [{"role": "user", "content": "What is 2+3?"}]
        first = client.responses.create(model="alice", input=items, tools=[ADD])
        got.append(first)
        call = next(o for o in first.output if o.type == "function_call")
        result = sum(json.loads(call.arguments).values())
        # the reply's items go back as they came, then the call's result
        items += [*first.output, {"type": "function_call_output", "call_id": call.call_id, "output": str(result)}]  # fmt: skip
        second = client.responses.create(model="alice", input=items, tools=[ADD])
        got.append(second)
        return float(second.output_text == "The sum is 5.")

    def chat(client, example):  # the same conversation on the chat route
        messages = user("What is 2+3?")
        first = client.chat.completions.create(model="alice", messages=messages, tools=[CHAT_ADD])
        (call,) = first.choices[0].message.tool_calls
        messages += [first.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": "5"}]  # fmt: skip
        client.chat.completions.create(model="alice", messages=messages, tools=[CHAT_ADD])
        return 0.0

    scripted.script = [f"Let me add.\n{CALL_ADD}", "The sum is 5."]
    (rec,) = run(team, responses)
    sampled = list(scripted.sampled)
    scripted.script = [f"Let me add.\n{CALL_ADD}", "The sum is 5."]
    (chat_rec,) = run(team, chat)

    first, second = got
    assert first.status == "completed" and [o.type for o in first.output] == ["message", "function_call"]  # fmt: skip
    message, call = first.output
    assert message.content[0].text == "Let me add."
    assert call.name == "add" and json.loads(call.arguments) == {"a": 2, "b": 3}
    assert isinstance(call.arguments, str) and call.call_id.startswith("call_")
    assert call.id != call.call_id and call.status == "completed"
    assert first.tools[0].name == "add" and first.tool_choice == "auto"
    assert [o.type for o in second.output] == ["message"] and rec.team_reward == 1.0
    assert rec.unparsed_tool_calls == 0

    # the prompts: the chat route's, call for call (the fallback format of the tiny ChatML)
    assert [c.prompt_ids for c in rec.calls] == [c.prompt_ids for c in chat_rec.calls]
    tools = json.dumps(CHAT_ADD)
    how = f"{FALLBACK_HOW}\n{example_call(CHAT_ADD)}"
    system = ("system", f"{FALLBACK_HEADER}\n<tools>\n{tools}\n</tools>\n\n{how}")
    follow_up = chatml(
        system,
        ("user", "What is 2+3?"),
        ("assistant", f"Let me add.\n{CALL_ADD}"),  # the message and its call: one turn
        ("user", "<tool_response>\n5\n</tool_response>"),
    )
    assert prompt_text(team, rec, 1) == follow_up
    tok = team.engine_of("alice").tokenizer
    assert rec.calls[1].prompt_ids == tok(follow_up, add_special_tokens=False)["input_ids"]

    # what trains is what was sampled, the call's tokens and all
    samples = episode_samples(team, rec, "call", 1.0, False)
    assert [s.completion_ids for s in samples] == sampled
    assert [s.prompt_ids for s in samples] == [c.prompt_ids for c in rec.calls]
    assert samples[0].text == f"Let me add.\n{CALL_ADD}"


def test_calls_only_parallel_calls_and_a_named_tool_choice(team, scripted):
    two = CALL_ADD + "\n" + CALL_ADD.replace('"b": 3', '"b": 4')
    got = {}

    async def episode(client, example):
        named = {"type": "function", "name": "add"}
        got["two"] = await client.responses.create(model="bob", input="2+3, 2+4?", tools=[ADD], tool_choice=named)  # fmt: skip
        got["one"] = await client.responses.create(model="bob", input="2+3, 2+4?", tools=[ADD], parallel_tool_calls=False)  # fmt: skip
        return 0.0

    scripted.script = [two, two]
    (rec,) = run(team, episode)
    calls = got["two"].output
    assert [o.type for o in calls] == ["function_call", "function_call"]  # no text: no message
    assert [json.loads(o.arguments) for o in calls] == [{"a": 2, "b": 3}, {"a": 2, "b": 4}]
    assert len({o.call_id for o in calls}) == 2 and got["two"].tool_choice.name == "add"
    # one call at most: two are text, counted, and still trained as sampled
    assert [o.type for o in got["one"].output] == ["message"]
    assert got["one"].output_text == two and rec.unparsed_tool_calls == 1


# --- streaming ------------------------------------------------------------------------------------


def added_up(events) -> dict:
    """The streamed events added up: each output item's text or arguments from its deltas."""
    out: dict = {"types": [e.type for e in events], "items": {}, "final": None}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for e in events:
        if e.type == "response.output_item.added":
            out["items"][e.output_index] = {"type": e.item.type, "text": "", "arguments": ""}
        elif e.type == "response.output_text.delta":
            out["items"][e.output_index]["text"] += e.delta
        elif e.type == "response.function_call_arguments.delta":
            out["items"][e.output_index]["arguments"] += e.delta
        elif e.type == "response.output_item.done":
            out["items"][e.output_index]["done"] = e.item.to_dict()
        elif e.type in ("response.completed", "response.incomplete"):
            out["final"] = e.response
    return out


def without_times(response) -> dict:
    """The response as sent, less its clock times and what the client's stream helper adds
    (its own parse of the text and of the arguments)."""
    out = {k: v for k, v in response.to_dict().items() if k not in ("created_at", "completed_at")}
    for item in out["output"]:
        item.pop("parsed_arguments", None)
        for part in item.get("content", ()):
            part.pop("parsed", None)
    return out


def test_streamed_events_add_up_to_the_reply_with_every_client(team, scripted):
    text = f"Adding.\n{CALL_ADD}"
    ask = dict(model="bob", input="2+3?", tools=[ADD], include=LOGPROBS)
    got = {}

    def plain(client, example):
        got["plain"] = client.responses.create(**ask)
        return 0.0

    def streamed(client, example):
        got["streamed"] = added_up(list(client.responses.create(**ask, stream=True)))
        return 0.0

    async def streamed_async(client, example):
        stream = await client.responses.create(**ask, stream=True)
        got["async"] = added_up([e async for e in stream])
        return 0.0

    def helper(client, example):  # the client's own accumulator
        with client.responses.stream(**ask) as stream:
            got["helper"] = stream.get_final_response()
        return 0.0

    for episode in (plain, streamed, streamed_async, helper):
        scripted.script = [text]
        run(team, episode)
    reply = got["plain"]
    message, call = reply.output
    for acc in (got["streamed"], got["async"]):
        assert acc["types"] == [
            "response.created", "response.in_progress",
            "response.output_item.added", "response.content_part.added",
            "response.output_text.delta", "response.output_text.done",
            "response.content_part.done", "response.output_item.done",
            "response.output_item.added", "response.function_call_arguments.delta",
            "response.function_call_arguments.done", "response.output_item.done",
            "response.completed",
        ]  # fmt: skip
        first, second = acc["items"][0], acc["items"][1]
        assert first["text"] == message.content[0].text == "Adding."
        assert second["arguments"] == call.arguments and second["type"] == "function_call"
        assert first["done"] == message.to_dict() and second["done"] == call.to_dict()
        assert without_times(acc["final"]) == without_times(reply)
    final = got["helper"]
    assert without_times(final) == without_times(reply)
    assert final.output_text == "Adding." and final.output[1].call_id == call.call_id


def test_a_stream_is_named_server_sent_events_and_a_cut_one_ends_incomplete(team, scripted):
    seen = {}

    def episode(example, base_url, api_key):
        body = {"model": "alice", "input": "hi", "stream": True, "max_output_tokens": 2}
        request = urllib.request.Request(
            f"{base_url}/responses",
            data=json.dumps(body).encode(),
            headers={"authorization": f"Bearer {api_key}", "content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as r:
            seen["type"], seen["text"] = r.headers["content-type"], r.read().decode()
        return 0.0

    scripted.script, scripted.cut = ["one two three"], True
    run(team, episode)
    assert seen["type"].startswith("text/event-stream")
    events = [e.split("\n") for e in seen["text"].split("\n\n") if e]
    assert all(name.startswith("event: ") and data.startswith("data: ") for name, data in events)
    payloads = [json.loads(data[6:]) for _, data in events]
    assert [name[7:] for name, _ in events] == [p["type"] for p in payloads]
    assert payloads[0]["response"]["status"] == "in_progress"
    last = payloads[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


# --- refusals ---------------------------------------------------------------------------------------


def refusal(call) -> tuple[int, str, str | None, str]:
    with pytest.raises(openai.APIStatusError) as info:
        call()
    err = info.value.body
    assert set(err) == {"message", "type", "param", "code"}, err
    assert "\n" not in err["message"]
    return info.value.status_code, err["code"], err["param"], err["message"]


def test_every_responses_request_it_cannot_serve_is_an_openai_error_naming_the_field(team):
    seen: dict[str, tuple] = {}
    result = {"type": "function_call_output", "call_id": "call_x", "output": "5"}
    image = {"type": "input_image", "image_url": "https://example.invalid/a.png"}
    refused = {  # name: (request fields beyond model and input, or None for a bad input)
        "previous_response_id": dict(previous_response_id="resp_1"),
        "conversation": dict(conversation="conv_1"),
        "background": dict(background=True),
        "store": dict(store=True),
        "prompt": dict(prompt={"id": "pmpt_1"}),
        "web_search": dict(tools=[{"type": "web_search"}]),
        "include": dict(include=["file_search_call.results"]),
        "format": dict(text={"format": {"type": "json_object"}}),
        "truncation": dict(truncation="auto"),
        "top_logprobs": dict(top_logprobs=2),
        "unknown": dict(extra_body={"max_tool_calls": 2}),
        "choice": dict(tools=[ADD], tool_choice={"type": "function", "name": "mul"}),
        "hosted choice": dict(tools=[ADD], tool_choice={"type": "file_search"}),
        "tool name": dict(tools=[ADD | {"name": "add two"}]),
        "cap": dict(max_output_tokens=0),
    }

    def episode(client, example):
        create = client.responses.create
        for name, extra in refused.items():
            seen[name] = refusal(lambda extra=extra: create(model="alice", input="hi", **extra))
        seen["model"] = refusal(lambda: create(model="carol", input="hi"))
        seen["orphan"] = refusal(lambda: create(model="alice", input=[*user("hi"), result]))
        seen["image"] = refusal(lambda: create(model="alice", input=[{"role": "user", "content": [image]}]))  # fmt: skip
        seen["reference"] = refusal(lambda: create(model="alice", input=[{"type": "item_reference", "id": "msg_1"}]))  # fmt: skip
        seen["stream long"] = refusal(lambda: create(model="alice", input="word " * 3000, stream=True))  # fmt: skip
        return 0.0

    (rec,) = run(team, episode)
    assert rec.calls == [] and rec.refused == 1  # the long prompt reached the batch
    for name in ("previous_response_id", "conversation", "background", "store", "prompt"):
        status, code, param, message = seen[name]
        assert (status, code, param) == (400, "unsupported_parameter", name), seen[name]
        assert message.startswith(name) and "OpenAIChatCompletionsModel" in message
    assert seen["web_search"][:3] == (400, "unsupported_parameter", "tools[0]")
    assert "'web_search'" in seen["web_search"][3] and "function tools only" in seen["web_search"][3]  # fmt: skip
    assert seen["include"][:3] == (400, "unsupported_parameter", "include")
    assert seen["format"][:3] == (400, "unsupported_parameter", "text.format")
    assert seen["truncation"][:3] == (400, "unsupported_parameter", "truncation")
    assert seen["top_logprobs"][:3] == (400, "unsupported_parameter", "top_logprobs")
    assert seen["unknown"][:3] == (400, "unsupported_parameter", "max_tool_calls")
    assert seen["choice"][:3] == (400, "invalid_value", "tool_choice")
    assert "'mul'" in seen["choice"][3] and "(add)" in seen["choice"][3]
    assert seen["hosted choice"][:3] == (400, "invalid_value", "tool_choice")
    assert seen["tool name"][:3] == (400, "invalid_value", "tools[0].name")
    assert seen["tool name"][3].startswith("tools[0].name must be")
    assert seen["cap"][:3] == (400, "invalid_value", "max_output_tokens")
    assert seen["model"][:3] == (404, "model_not_found", "model")
    assert seen["orphan"][:3] == (400, "invalid_input", "input[1].call_id")
    assert "'call_x'" in seen["orphan"][3] and "no calls before it" in seen["orphan"][3]
    assert seen["image"][:3] == (400, "invalid_input", "input[0].content[0]")
    assert seen["reference"][:3] == (400, "invalid_input", "input[0].type")
    assert seen["stream long"][:2] == (400, "context_length_exceeded")


def test_the_key_is_checked_on_the_responses_route_too(team):
    seen = {}

    def episode(example, base_url, api_key):
        request = urllib.request.Request(
            f"{base_url}/responses",
            data=json.dumps({"model": "alice", "input": "hi"}).encode(),
            headers={"authorization": "Bearer wrong", "content-type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=60)
        seen["status"], seen["body"] = info.value.code, json.loads(info.value.read())
        return 0.0

    (rec,) = run(team, episode)
    assert rec.calls == [] and seen["status"] == 401
    assert seen["body"]["error"]["code"] == "invalid_api_key"


MALFORMED = [  # (body, the field its RequestError names)
    ([], None),
    ({"model": "alice", "input": []}, "input"),
    ({"model": "alice", "input": [["hi"]]}, "input[0]"),
    ({"model": "alice", "input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    (
        {"model": "alice", "input": [{"role": "user", "content": [{"type": ["t"]}]}]},
        "input[0].content[0]",
    ),
    ({"model": "alice", "input": [{"role": "user", "content": 5}]}, "input[0].content"),
    ({"model": "alice", "input": [{"type": "function_call", "call_id": 1}]}, "input[0].call_id"),
    (
        {"model": "alice", "input": [{"type": "function_call_output", "call_id": ["x"]}]},
        "input[0].call_id",
    ),
    ({"model": "alice", "input": "hi", "tools": {"name": "add"}}, "tools"),
    (
        {"model": "alice", "input": "hi", "tools": [ADD | {"parameters": "x"}]},
        "tools[0].parameters",
    ),
    ({"model": "alice", "input": "hi", "tool_choice": "required"}, "tool_choice"),
    ({"model": "alice", "input": "hi", "stream": "yes"}, "stream"),
    ({"model": "alice", "input": "hi", "instructions": ["be brief"]}, "instructions"),
    ({"model": "alice", "input": "hi", "include": "all"}, "include"),
    ({"model": "alice", "input": "hi", "text": "json"}, "text.format"),
]


@pytest.mark.parametrize(("body", "param"), MALFORMED, ids=[str(p) for _, p in MALFORMED])
def test_a_malformed_request_is_a_request_error_naming_its_field(body, param):
    """Whatever shape a field has, the translation refuses it by name (the endpoint's 400),
    never with another exception (a 500)."""
    from teamrl.apps.responses import RequestError, parse_responses

    with pytest.raises(RequestError) as info:
        parse_responses(body)
    assert info.value.param == param and "\n" not in info.value.message
