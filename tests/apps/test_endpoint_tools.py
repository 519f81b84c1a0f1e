"""Tool calls and streaming on the endpoint, with the real ``openai`` client (sync, async,
``stream=True``) on a tiny team: a call round-trips (the client gets ``tool_calls`` with JSON
string arguments, the tool's result renders and is answered, the tokens trained are the ones
sampled), a reply that does not read as a call is text and counted, streamed chunks add up to
the non-streamed reply, and every refusal is OpenAI's JSON.

A tiny random model never writes a tool call, so the replies are scripted: the engine's
backend answers each request with the next scripted text's tokens (then EOS), as a sampler
would, and samples for real once the script is spent."""

from __future__ import annotations

import json
import urllib.request

import openai
import pytest
from helpers.apps import AGENTS, run, user
from helpers.scripted import ADD, CALL_ADD, scripted_backend

from teamrl.algorithms.app import app_rollout, episode_samples
from teamrl.apps.task import AppEnv
from teamrl.apps.tools import FALLBACK_HEADER, FALLBACK_HOW, example_call

NEG = {"type": "function", "function": {"name": "neg", "parameters": {"type": "object"}}}


@pytest.fixture
def scripted(team):
    with scripted_backend(team) as backend:  # lora: one engine for both agents
        yield backend


def chatml(*turns: tuple[str, str]) -> str:
    """The tiny models' ChatML rendering of (role, content) turns, with the generation prompt."""
    return (
        "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in turns) + "<|im_start|>assistant\n"
    )


def fallback_system(*tools: dict) -> str:
    schemas = "\n".join(json.dumps(t) for t in tools)
    example = example_call(tools[0])
    return f"{FALLBACK_HEADER}\n<tools>\n{schemas}\n</tools>\n\n{FALLBACK_HOW}\n{example}"


def prompt_text(team, rec, k: int) -> str:
    return team.engine_of("alice").tokenizer.decode(rec.calls[k].prompt_ids)


# --- a call round-trips -------------------------------------------------------------------------


def test_a_tool_call_round_trips_and_trains_the_tokens_sampled(team, scripted):
    scripted.script = [f"Let me add.\n{CALL_ADD}", "The sum is 5."]
    replies = []

    def episode(client, example):
        messages = user("What is 2+3?")
        first = client.chat.completions.create(model="alice", messages=messages, tools=[ADD])
        replies.append(first)
        message = first.choices[0].message
        (call,) = message.tool_calls
        result = sum(json.loads(call.function.arguments).values())
        messages += [message, {"role": "tool", "tool_call_id": call.id, "content": str(result)}]
        second = client.chat.completions.create(model="alice", messages=messages, tools=[ADD])
        replies.append(second)
        return 1.0 if second.choices[0].message.content == "The sum is 5." else 0.0

    (rec,) = run(team, episode)
    first, second = replies
    assert first.choices[0].finish_reason == "tool_calls"
    message = first.choices[0].message
    assert message.content == "Let me add."
    (call,) = message.tool_calls
    assert call.type == "function" and call.function.name == "add"
    assert isinstance(call.function.arguments, str)
    assert json.loads(call.function.arguments) == {"a": 2, "b": 3}
    assert call.id.startswith("call_")
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.tool_calls is None
    assert rec.team_reward == 1.0 and rec.unparsed_tool_calls == 0

    # the prompts: the fallback format of a template without tools (the tiny models' ChatML)
    tok = team.engine_of("alice").tokenizer
    system, asked = ("system", fallback_system(ADD)), ("user", "What is 2+3?")
    follow_up = chatml(
        system,
        asked,
        ("assistant", f"Let me add.\n{CALL_ADD}"),
        ("user", "<tool_response>\n5\n</tool_response>"),
    )
    assert prompt_text(team, rec, 0) == chatml(system, asked)
    assert prompt_text(team, rec, 1) == follow_up
    assert rec.calls[1].prompt_ids == tok(follow_up, add_special_tokens=False)["input_ids"]

    # what trains is what was sampled, call and all
    samples = episode_samples(team, rec, "call", 1.0, False)
    assert [s.completion_ids for s in samples] == scripted.sampled
    assert [s.prompt_ids for s in samples] == [c.prompt_ids for c in rec.calls]
    assert samples[0].text == f"Let me add.\n{CALL_ADD}"


def test_parallel_calls_with_the_async_client_and_their_results_in_one_turn(team, scripted):
    two = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 1}}</tool_call>\n' + (
        '<tool_call>{"name": "neg", "arguments": {"x": 4}}</tool_call>'
    )
    scripted.script = [two, "2 and -4."]
    seen = []

    async def episode(client, example):
        assert isinstance(client, openai.AsyncOpenAI)
        messages = [{"role": "system", "content": "Use the tools."}, *user("1+1, and -4?")]
        first = await client.chat.completions.create(
            model="bob", messages=messages, tools=[ADD, NEG], tool_choice="required"
        )
        message = first.choices[0].message
        seen.append(first)
        messages.append(message.model_dump(exclude_none=True))  # as a dict, this time
        for call, result in zip(message.tool_calls, ["2", "-4"]):
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        second = await client.chat.completions.create(
            model="bob", messages=messages, tools=[ADD, NEG]
        )
        seen.append(second)
        return 0.0

    (rec,) = run(team, episode)
    first = seen[0].choices[0]
    assert first.finish_reason == "tool_calls" and first.message.content is None
    calls = first.message.tool_calls
    assert [c.function.name for c in calls] == ["add", "neg"]
    assert [json.loads(c.function.arguments) for c in calls] == [{"a": 1, "b": 1}, {"x": 4}]
    assert len({c.id for c in calls}) == 2
    assert seen[1].choices[0].message.content == "2 and -4."
    assert prompt_text(team, rec, 1) == chatml(
        ("system", "Use the tools.\n\n" + fallback_system(ADD, NEG)),
        ("user", "1+1, and -4?"),
        ("assistant", two),
        ("user", "<tool_response>\n2\n</tool_response>\n<tool_response>\n-4\n</tool_response>"),
    )
    assert rec.unparsed_tool_calls == 0


# A template that renders tools, written for this test in the way tool-aware templates such
# as Qwen2.5's are: the schemas in the system turn, a call's arguments rendered as an object
# in a <tool_call> line, a tool result in its own role. OTHER_CALLS reads tools too, but asks
# for calls in a format the endpoint does not read back: it gets the fallback format.
TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- for c in m.tool_calls or [] %}{{ '\\n' }}<tool_call>"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</tool_call>"
    "{% endfor %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
OTHER_CALLS = TOOLS_TEMPLATE.replace("<tool_call>", "[CALL]").replace("</tool_call>", "[/CALL]")


@pytest.fixture(params=["tool_call", "other"])
def tools_template(team, request):
    tok = team.engine_of("alice").tokenizer
    before = tok.chat_template
    tok.chat_template = TOOLS_TEMPLATE if request.param == "tool_call" else OTHER_CALLS
    yield request.param
    tok.chat_template = before


def test_a_template_that_renders_tool_calls_gets_them_as_they_came(team, scripted, tools_template):
    scripted.script = [CALL_ADD, "5"]

    def episode(client, example):
        messages = user("2+3?")
        first = client.chat.completions.create(model="alice", messages=messages, tools=[ADD])
        (call,) = first.choices[0].message.tool_calls
        answer = {"role": "tool", "tool_call_id": call.id, "content": "5"}
        messages += [first.choices[0].message, answer]
        client.chat.completions.create(model="alice", messages=messages, tools=[ADD])
        return 0.0

    (rec,) = run(team, episode)
    if tools_template == "tool_call":
        expected = chatml(
            ("system", json.dumps(ADD) + "\n"),
            ("user", "2+3?"),
            ("assistant", "\n" + CALL_ADD),  # the arguments as an object, not a string
            ("tool", "5"),
        )
    else:
        expected = chatml(
            ("system", fallback_system(ADD)),
            ("user", "2+3?"),
            ("assistant", CALL_ADD),
            ("user", "<tool_response>\n5\n</tool_response>"),
        )
    assert prompt_text(team, rec, 1) == expected


def test_the_fallback_example_calls_the_first_tool_with_a_placeholder_per_type():
    typed = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {
                "type": "object",
                "properties": {
                    "n": {"type": "integer"}, "x": {"type": "number"}, "s": {"type": "string"},
                    "b": {"type": "boolean"}, "l": {"type": "array"}, "o": {"type": "object"},
                    "any": {},
                },
            },
        },
    }  # fmt: skip
    args = '{"n": <integer>, "x": <number>, "s": <string>, "b": <boolean>, "l": <array>, "o": <object>, "any": <value>}'  # fmt: skip
    assert example_call(typed) == f'For example:\n<tool_call>{{"name": "f", "arguments": {args}}}</tool_call>'  # fmt: skip
    assert example_call(ADD) == (
        'For example:\n<tool_call>{"name": "add", "arguments": {"a": <integer>, "b": <integer>}}</tool_call>'
    )  # fmt: skip
    assert example_call(NEG).endswith('{"name": "neg", "arguments": {}}</tool_call>')


def test_a_reply_that_copies_the_fallback_example_calls_no_tool(team, scripted):
    """Copied, the example runs no tool on values nobody chose: the app is told text, and the
    reply is counted unparsed."""
    copied = example_call(ADD).removeprefix("For example:\n")
    scripted.script = [copied]

    def episode(client, example):
        reply = client.chat.completions.create(model="alice", messages=user("2+3?"), tools=[ADD])
        assert reply.choices[0].message.tool_calls is None
        assert reply.choices[0].message.content == copied
        return 0.0

    (rec,) = run(team, episode)
    assert rec.unparsed_tool_calls == 1


def test_a_reply_ends_where_the_model_writes_a_tool_result(team, scripted):
    """Where a chat uses tools, a tool result's tag ends the reply (the tools' turn, never the
    model's): the tag is left out of the text, and what was sampled through it is trained."""
    scripted.script = [CALL_ADD, "5\n</tool_response>\n</tool_response>", "7</tool_response>", "8END9"]  # fmt: skip
    seen = []

    def episode(client, example):
        messages = user("2+3?")
        first = client.chat.completions.create(model="alice", messages=messages, tools=[ADD])
        (call,) = first.choices[0].message.tool_calls
        messages += [first.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": "5"}]  # fmt: skip
        second = client.chat.completions.create(model="alice", messages=messages, tools=[ADD])
        plain = client.chat.completions.create(model="bob", messages=user("7?"))  # no tools
        own = client.chat.completions.create(model="bob", messages=user("8?"), stop=["END"])
        seen.extend(r.choices[0] for r in (second, plain, own))
        return 0.0

    (rec,) = run(team, episode)
    second, plain, own = seen
    assert second.message.content == "5\n" and second.finish_reason == "stop"
    assert plain.message.content == "7</tool_response>"  # no tools: nothing added
    assert own.message.content == "8"  # the call's own stop string, left out too
    tags = ("<tool_response>", "</tool_response>")
    assert [set(tags) <= set(r.stop) for r in scripted.requests] == [True, True, False, False]
    tok = team.engine_of("alice").tokenizer
    trained = tok.decode(rec.calls[1].generation.completion_ids)
    assert trained == "5\n</tool_response>"  # through the tag, not beyond it


def test_prefill_writes_the_call_a_tool_choice_demands_and_trains_what_was_sampled(team, scripted):
    from teamrl.config.endpoint import EndpointConfig

    named = {"type": "function", "function": {"name": "add"}}
    opening_named = '<tool_call>{"name": "add", "arguments": {'
    opening_required = '<tool_call>{"name": "'
    asks = [  # (what the request adds to tools=[add, neg], the scripted continuation)
        ({"tool_choice": named}, '"a": 2, "b": 3}}</tool_call>'),
        ({"tool_choice": "required"}, 'neg", "arguments": {"x": 4}}</tool_call>'),
        ({"tool_choice": "required"}, "No call."),  # the opening, then text: not a call
        ({}, "Just text."),  # auto: nothing is written
        ({"tool_choice": "none"}, "Plain."),
    ]
    scripted.script = [text for _, text in asks]
    replies = []

    def episode(client, example):
        for extra, _ in asks:
            replies.append(
                client.chat.completions.create(
                    model="alice", messages=user("2+3?"), tools=[ADD, NEG], **extra
                )
            )
        return 0.0

    (rec,) = run(team, episode, limits=EndpointConfig(prefill_tool_calls=True))
    calls = [r.choices[0].message.tool_calls for r in replies]
    assert [c.function.name for c in calls[0]] == ["add"]
    assert json.loads(calls[0][0].function.arguments) == {"a": 2, "b": 3}
    assert [c.function.name for c in calls[1]] == ["neg"]
    assert json.loads(calls[1][0].function.arguments) == {"x": 4}
    assert [r.choices[0].finish_reason for r in replies[:2]] == ["tool_calls", "tool_calls"]
    assert calls[2:] == [None, None, None]
    contents = [r.choices[0].message.content for r in replies[2:]]
    assert contents == [opening_required + "No call.", "Just text.", "Plain."]
    assert rec.unparsed_tool_calls == 1
    # the opening is prompt: each prompt ends with it, and what is trained is what was sampled
    openings = [opening_named, opening_required, opening_required, "", ""]
    for k, opening in enumerate(openings):
        assert prompt_text(team, rec, k).endswith("<|im_start|>assistant\n" + opening)
        assert rec.calls[k].text == opening + asks[k][1]
    assert [c.generation.completion_ids for c in rec.calls] == scripted.sampled


def test_without_prefill_a_demanded_call_is_left_to_the_model(team, scripted):
    scripted.script = ["No call."]

    def episode(client, example):
        reply = client.chat.completions.create(
            model="alice", messages=user("2+3?"), tools=[ADD], tool_choice="required"
        )
        return float(reply.choices[0].message.content == "No call.")

    (rec,) = run(team, episode)  # the default endpoint section: prefill_tool_calls off
    assert prompt_text(team, rec, 0).endswith("<|im_start|>assistant\n")
    assert rec.team_reward == 1.0 and rec.unparsed_tool_calls == 1


# --- replies that are not calls ---------------------------------------------------------------


def test_a_reply_that_does_not_parse_is_text_and_counted_and_still_trained(team, scripted):
    named = {"type": "function", "function": {"name": "add"}}
    asks = [  # (scripted reply, what the request adds to tools=[add, neg], counted)
        ('<tool_call>{"name": "add", "arguments": {</tool_call>', {}, True),  # bad JSON
        ('<tool_call>{"name": "mul", "arguments": {}}</tool_call>', {}, True),  # no such tool
        ('<tool_call>{"name": "add", "arguments": [2, 3]}</tool_call>', {}, True),
        (f"{CALL_ADD}\n<tool_call>", {}, True),  # a tag left open
        ("I will not.", {"tool_choice": "required"}, True),
        ('<tool_call>{"name": "neg", "arguments": {}}</tool_call>', {"tool_choice": named}, True),
        (CALL_ADD + CALL_ADD, {"parallel_tool_calls": False}, True),  # one call at most
        (CALL_ADD, {"tool_choice": "none"}, False),  # none: no call is read
        ("Just text.", {}, False),
    ]
    scripted.script = [text for text, _, _ in asks]
    replies = []

    def episode(client, example):
        for _, extra, _ in asks:
            replies.append(
                client.chat.completions.create(
                    model="alice", messages=user("go"), tools=[ADD, NEG], **extra
                )
            )
        return 0.0

    # the rollout a training step runs: its metrics are the step's logged row
    result = app_rollout(
        team, lambda: AppEnv(list(AGENTS), episode), [(0, {})], num_generations=1,
        keep_small_groups=True,
    )  # fmt: skip
    for reply, (text, _, _) in zip(replies, asks, strict=True):
        choice = reply.choices[0]
        assert choice.message.content == text and choice.message.tool_calls is None
        assert choice.finish_reason == "stop"
    assert result.metrics["app/unparsed_tool_calls"] == sum(c for _, _, c in asks) == 7
    assert [s.completion_ids for s in result.samples] == scripted.sampled
    assert [s.text for s in result.samples] == [text for text, _, _ in asks]


# --- streaming ----------------------------------------------------------------------------------


def accumulate(stream) -> dict:
    """The streamed chunks added up: content, tool calls by index, finish_reason, usage,
    log-probs, and the chunks' shapes."""
    out: dict = {"content": None, "calls": {}, "finish": None, "usage": None, "logprobs": []}
    out["chunks"] = chunks = list(stream)
    for chunk in chunks:
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            out["usage"] = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content is not None:
                out["content"] = (out["content"] or "") + delta.content
            for tc in delta.tool_calls or ():
                slot = out["calls"].setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] += tc.id or ""
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
            if choice.finish_reason:
                out["finish"] = choice.finish_reason
            if choice.logprobs is not None:
                out["logprobs"] += [t.logprob for t in choice.logprobs.content]
    return out


def calls_of(message) -> dict:
    return {
        j: {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for j, c in enumerate(message.tool_calls or ())
    }


def test_streamed_text_adds_up_to_the_reply_sampled_alike_with_a_usage_chunk(team):
    ask = dict(model="alice", messages=user("Hello"), logprobs=True)
    got = {}

    def plain(client, example):
        got["plain"] = client.chat.completions.create(**ask)
        return 0.0

    def streamed(client, example):
        stream = client.chat.completions.create(
            **ask, stream=True, stream_options={"include_usage": True}
        )
        got["streamed"] = accumulate(stream)
        return 0.0

    run(team, plain, greedy=True)
    (rec,) = run(team, streamed, greedy=True)
    reply, acc = got["plain"].choices[0], got["streamed"]
    assert acc["content"] == reply.message.content
    assert acc["finish"] == reply.finish_reason and acc["calls"] == {}
    assert acc["logprobs"] == [t.logprob for t in reply.logprobs.content]
    assert acc["usage"] == got["plain"].usage
    assert acc["usage"].completion_tokens == len(rec.calls[0].generation.completion_ids)
    chunks = acc["chunks"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1 and chunks[0].model == "alice"


def test_streamed_tool_calls_add_up_to_the_reply_with_both_clients(team, scripted):
    text = f"Adding.\n{CALL_ADD}\n" + CALL_ADD.replace('"b": 3', '"b": 4')
    ask = dict(model="bob", messages=user("2+3, 2+4?"), tools=[ADD])
    got = {}

    async def plain(client, example):
        got["plain"] = await client.chat.completions.create(**ask)
        return 0.0

    async def streamed(client, example):
        stream = await client.chat.completions.create(**ask, stream=True)
        got["streamed"] = accumulate([chunk async for chunk in stream])
        return 0.0

    def helper(client, example):  # the sync client's own accumulator of a stream
        with client.chat.completions.stream(**ask) as stream:
            got["helper"] = stream.get_final_completion()
        return 0.0

    for episode in (plain, streamed, helper):
        scripted.script = [text]
        run(team, episode)
    reply, acc = got["plain"].choices[0], got["streamed"]
    assert acc["content"] == reply.message.content == "Adding."
    assert acc["calls"] == calls_of(reply.message) and len(acc["calls"]) == 2
    assert acc["finish"] == reply.finish_reason == "tool_calls"
    assert acc["usage"] is None  # not asked for
    final = got["helper"].choices[0]
    assert final.message.content == "Adding." and final.finish_reason == "tool_calls"
    assert calls_of(final.message) == acc["calls"]
    deltas = [c.choices[0].delta for c in acc["chunks"] if c.choices]
    calls = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert [c.index for c in calls] == [0, 1] and all(c.type == "function" for c in calls)


def test_a_stream_is_server_sent_events_ending_done(team):
    seen = {}

    def episode(example, base_url, api_key):
        body = {"model": "alice", "messages": user("hi"), "stream": True}
        request = urllib.request.Request(
            f"{base_url}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"authorization": f"Bearer {api_key}", "content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as r:
            seen["type"], seen["text"] = r.headers["content-type"], r.read().decode()
        return 0.0

    run(team, episode)
    assert seen["type"].startswith("text/event-stream")
    events = [e for e in seen["text"].split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    first = json.loads(events[0][6:])
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}


# --- refusals -------------------------------------------------------------------------------


def refusal(call) -> tuple[int, str, str | None, str]:
    with pytest.raises(openai.APIStatusError) as info:
        call()
    err = info.value.body
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["type"] == "invalid_request_error"
    return info.value.status_code, err["code"], err["param"], err["message"]


def test_every_tool_or_stream_request_it_cannot_serve_is_an_openai_error(team):
    seen: dict[str, tuple] = {}
    answer = {"role": "tool", "tool_call_id": "call_x", "content": "5"}
    asked = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_y", "type": "function", "function": {"name": "add", "arguments": "{}"}}
        ],
    }

    def episode(client, example):
        create = client.chat.completions.create
        ok = dict(model="alice", messages=user("hi"))
        seen["orphan"] = refusal(lambda: create(model="alice", messages=[*user("hi"), answer], tools=[ADD]))  # fmt: skip
        seen["wrong id"] = refusal(lambda: create(model="alice", messages=[*user("hi"), asked, answer]))  # fmt: skip
        named = {"type": "function", "function": {"name": "mul"}}
        seen["named"] = refusal(lambda: create(**ok, tools=[ADD], tool_choice=named))
        seen["required"] = refusal(lambda: create(**ok, tool_choice="required"))
        seen["choice"] = refusal(lambda: create(**ok, tools=[ADD], tool_choice="always"))
        seen["custom"] = refusal(lambda: create(**ok, tools=[{"type": "custom", "custom": {"name": "f"}}]))  # fmt: skip
        bad_name = {"type": "function", "function": {"name": "add two"}}
        seen["name"] = refusal(lambda: create(**ok, tools=[bad_name]))
        seen["twice"] = refusal(lambda: create(**ok, tools=[ADD, ADD]))
        legacy = {"role": "function", "name": "add", "content": "5"}
        seen["legacy"] = refusal(lambda: create(model="alice", messages=[*user("hi"), legacy]))
        seen["stream model"] = refusal(lambda: create(model="carol", messages=user("hi"), stream=True))  # fmt: skip
        seen["stream long"] = refusal(lambda: create(model="alice", messages=user("word " * 3000), stream=True))  # fmt: skip
        create(**ok)
        return 0.0

    (rec,) = run(team, episode)
    assert len(rec.calls) == 1
    assert seen["orphan"][:3] == (400, "invalid_messages", "messages[1].tool_call_id")
    assert "'call_x'" in seen["orphan"][3] and "no calls before it" in seen["orphan"][3]
    assert seen["wrong id"][:3] == (400, "invalid_messages", "messages[2].tool_call_id")
    assert "'call_y'" in seen["wrong id"][3]
    assert seen["named"][:3] == (400, "invalid_value", "tool_choice")
    assert "'mul'" in seen["named"][3] and "(add)" in seen["named"][3]
    assert seen["required"][:3] == (400, "invalid_value", "tool_choice")
    assert seen["choice"][:3] == (400, "invalid_value", "tool_choice")
    assert seen["custom"][:3] == (400, "invalid_value", "tools[0]")
    assert seen["name"][:3] == (400, "invalid_value", "tools[0].function.name")
    assert seen["twice"][:3] == (400, "invalid_value", "tools[1].function.name")
    assert seen["legacy"][:3] == (400, "invalid_messages", "messages[1].role")
    assert seen["stream model"][:3] == (404, "model_not_found", "model")
    assert seen["stream long"][:2] == (400, "context_length_exceeded")
