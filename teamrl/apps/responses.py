"""OpenAI's Responses API on the endpoint: ``POST /e/<episode>/v1/responses``.

The subset that the OpenAI Agents SDK's default model class (``OpenAIResponsesModel``) and
LangChain's Responses mode send, served by translation: a Responses request becomes the
chat-completions request of the same conversation (``parse_responses``), which the endpoint's
``parse_call`` makes the same ``ChatCall`` the chat route would, so it is batched, rendered
through the agent's chat template with its tools (``teamrl.apps.tools``), sampled and recorded
as a chat call is; the chat completion the session answers becomes a Response object
(``as_response``), and with ``stream=true`` the Responses stream events (``events``). This
module checks what only the Responses API has, each refusal a ``RequestError`` naming its
field as the Responses request spells it (``input[2].call_id``, ``tools[0].name``).

The request:

- ``input``: a string (one user message) or a list of input items: messages (``role``
  user, system, developer or assistant; ``content`` a string or ``input_text`` /
  ``output_text`` parts), ``function_call`` items (a call the model made earlier: consecutive
  calls, and the assistant message just before them, are one assistant turn, as the model
  wrote them) and ``function_call_output`` items (a call's result: a tool message);
- ``instructions``: the system message, before the input;
- ``tools``: function tools in the Responses' flat shape (``{"type": "function", "name",
  "description", "parameters", "strict"}``; ``strict`` is accepted and not enforced: a reply
  that is not a call of a tool is text, as on the chat route); ``tool_choice``,
  ``parallel_tool_calls``, ``max_output_tokens``, ``stream``;
- ``include: ["message.output_text.logprobs"]``: the sampler's log-prob of every token;
- ``temperature``, ``top_p`` and a few bookkeeping fields: accepted and ignored, as on the
  chat route (the agent's config sets its sampling).

Refused with a 400, one line naming the field: what needs state kept on OpenAI's servers
(``previous_response_id``, ``conversation``, ``background``, a stored ``prompt``,
``store=true``: the endpoint keeps nothing beyond the episode, so the app sends the whole
conversation each call, as the chat-completions model classes do), tools OpenAI's servers run
(web search, file search, computer use, ...), non-text content, a ``text.format`` other than
text, ``truncation=auto`` (the endpoint never drops input to fit: a prompt over the context is
refused), and any field it does not know.

The reply: a ``message`` item with one ``output_text`` part for the text (none when the reply
is calls only), then one ``function_call`` item per call, its ``call_id`` unique in the episode;
``usage`` in input and output tokens. A reply cut at the token limit is ``status: incomplete``
with ``incomplete_details.reason: max_output_tokens`` (its stream ends ``response.incomplete``),
as OpenAI answers it. Whatever the reading, the tokens trained are the ones sampled.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from teamrl.apps.tools import ToolChoice, ToolError, check_tool_choice, check_tools

CHAT_CLASS = (
    "send the whole conversation as input, or use a chat-completions model class "
    "(the Agents SDK's OpenAIChatCompletionsModel)"
)
STATEFUL = {  # fields that need state kept on OpenAI's servers, which the endpoint has not
    "previous_response_id": "the endpoint keeps no responses between calls",
    "conversation": "the endpoint keeps no conversations",
    "background": "the endpoint runs no responses in the background",
    "prompt": "stored prompts live on OpenAI's servers",
}
IGNORED = (  # accepted, with no effect: the agent's config sets its sampling (docs/apps.md)
    "temperature", "top_p", "metadata", "user", "safety_identifier", "service_tier",
    "prompt_cache_key", "prompt_cache_retention", "prompt_cache_options", "reasoning",
    "stream_options",
)  # fmt: skip
KNOWN = (
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
    "max_output_tokens", "stream", "store", "include", "text", "truncation", "top_logprobs",
)  # fmt: skip
LOGPROBS = "message.output_text.logprobs"
TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}


class RequestError(ValueError):
    """A Responses request the endpoint cannot serve: ``param`` names the field, ``code`` is
    the OpenAI error code. The endpoint answers it 400, as it does ``tools.ToolError``."""

    def __init__(self, message: str, param: str | None, code: str = "invalid_value"):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


@dataclass(frozen=True)
class ResponsesCall:
    """A Responses request, translated: the chat-completions request it is served as (the
    endpoint's ``parse_call`` makes it the ``ChatCall``), and what the Response echoes."""

    chat: dict[str, Any]  # a chat-completions request body
    stream: bool
    instructions: str | None
    max_output_tokens: int | None
    tools: tuple[dict, ...]  # checked, in the chat shape
    tool_choice: ToolChoice
    parallel_tool_calls: bool


# --- the request ---------------------------------------------------------------------------------


def parse_responses(body: Any) -> ResponsesCall:
    """The Responses request ``body`` translated, or a ``RequestError`` naming the field it
    cannot serve. The agent (``model``) is checked with the chat request, by ``parse_call``."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object", None, "invalid_body")
    _refuse_state(body)
    unknown = sorted(set(body) - set(KNOWN) - set(STATEFUL) - set(IGNORED))
    if unknown:
        raise unsupported(
            unknown[0], f"unsupported parameter(s) of the Responses API: {', '.join(unknown)}"
        )
    _check_output_options(body)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise RequestError("instructions must be a string", "instructions")
    try:
        tool_choice = _chat_tool_choice(body.get("tool_choice"))
        tools = check_tools(_chat_tools(body.get("tools")))
        choice = check_tool_choice(tool_choice, tools)
    except ToolError as err:
        raise RequestError(_flat(err.message), _flat(err.param), err.code) from None
    messages = _messages(body.get("input"))
    if instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    cap = body.get("max_output_tokens")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise RequestError(f"max_output_tokens must be a positive integer: {cap!r}", "max_output_tokens")  # fmt: skip
    parallel, stream = _flag(body, "parallel_tool_calls", True), _flag(body, "stream", False)
    chat = {
        "model": body.get("model"),
        "messages": messages,
        "tools": list(tools) or None,
        "tool_choice": tool_choice,
        "parallel_tool_calls": parallel,
        "max_completion_tokens": cap,
        "logprobs": LOGPROBS in (body.get("include") or ()),
        "stream": stream,
    }
    return ResponsesCall(chat, stream, instructions, cap, tools, choice, parallel)


def unsupported(param: str, message: str) -> RequestError:
    return RequestError(message, param, "unsupported_parameter")


def bad_input(param: str, message: str) -> RequestError:
    return RequestError(message, param, "invalid_input")


def _refuse_state(body: dict) -> None:
    for name, why in STATEFUL.items():
        if body.get(name) not in (None, False):
            raise unsupported(name, f"{name}: {why} (no state beyond the episode): {CHAT_CLASS}")
    if body.get("store") not in (None, False):
        raise unsupported(
            "store",
            f"store={json.dumps(body['store'])}: the endpoint stores no responses (no state "
            f"beyond the episode): leave store false or unset, and {CHAT_CLASS}",
        )


def _check_output_options(body: dict) -> None:
    """``include``, ``text``, ``truncation`` and ``top_logprobs``: only what changes nothing
    but the log-probs."""
    include = body.get("include")
    if include is not None:
        if not isinstance(include, list):
            raise RequestError("include must be a list", "include")
        for value in include:
            if value != LOGPROBS:
                raise unsupported("include", f"include: {value!r} is not served, only {LOGPROBS!r}")
    text = body.get("text")
    if text is not None:
        fmt = text.get("format") if isinstance(text, dict) else None
        if not isinstance(text, dict) or (fmt is not None and fmt != {"type": "text"}):
            raise unsupported("text.format", 'text.format: only {"type": "text"} is supported')
    if body.get("truncation") not in (None, "disabled"):
        raise unsupported(
            "truncation",
            "truncation: only 'disabled': the endpoint never drops input to fit the context "
            "(a prompt over it is refused, context_length_exceeded)",
        )
    if body.get("top_logprobs"):
        raise unsupported(
            "top_logprobs", f"top_logprobs is not supported (include {LOGPROBS!r} is)"
        )


def _flag(body: dict, name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"{name} must be true or false, got {value!r}", name)
    return value


def _flat(text: str) -> str:
    """A tools.py message or field about the chat shape (``tools[0].function.name``) said of
    the Responses' flat shape (``tools[0].name``)."""
    return text.replace("].function.", "].").replace("].function must", "] must")


def _chat_tools(raw: Any) -> Any:
    """The Responses' flat function tools in the chat shape that ``check_tools`` reads; a
    tool of another type (one OpenAI's servers run) is refused here, named."""
    if not isinstance(raw, list):
        return raw  # None, or a shape check_tools refuses
    out = []
    for i, tool in enumerate(raw):
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        if kind != "function":
            raise unsupported(
                f"tools[{i}]",
                f"tools[{i}]: a {kind!r} tool runs on OpenAI's servers; the endpoint serves "
                "function tools only (the app runs them)",
            )
        fn = {k: tool[k] for k in ("name", "description", "parameters") if tool.get(k) is not None}
        out.append({"type": "function", "function": fn})
    return out


def _chat_tool_choice(raw: Any) -> Any:
    """The Responses' ``tool_choice`` (``{"type": "function", "name": ...}`` names a function)
    in the chat shape that ``check_tool_choice`` reads."""
    if raw is None or raw in ("auto", "none", "required"):
        return raw
    name = raw.get("name") if isinstance(raw, dict) and raw.get("type") == "function" else None
    if isinstance(name, str):
        return {"type": "function", "function": {"name": name}}
    raise RequestError(
        "tool_choice must be 'auto', 'none', 'required' or "
        f'{{"type": "function", "name": ...}} (function tools only), got {json.dumps(raw)}',
        "tool_choice",
    )


def _messages(raw: Any) -> list[dict[str, Any]]:
    """The input as chat messages: role and text, an assistant's ``tool_calls``, a tool
    message's ``tool_call_id`` (the chat request's shapes, which ``tools.tool_fields`` reads)."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise bad_input("input", "input must be a string or a non-empty list of input items")
    out: list[dict[str, Any]] = []
    calls: dict[str, str] = {}  # the calls so far (id: function), which results must answer
    turn: dict[str, Any] | None = None  # the assistant turn the next function_call joins
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_input(where, f"{where} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message(item, where))
            turn = out[-1] if out[-1]["role"] == "assistant" else None
        elif kind == "function_call":
            call = _function_call(item, where)
            calls[call["id"]] = call["function"]["name"]
            if turn is None:
                turn = {"role": "assistant", "content": ""}
                out.append(turn)
            turn.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            out.append(_function_result(item, where, calls))
            turn = None
        else:
            raise bad_input(
                f"{where}.type",
                f"{where}: a {kind!r} item is not served (messages, function_call and "
                "function_call_output items are)",
            )
    return out


def _message(item: dict, where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise bad_input(
            f"{where}.role",
            f"{where}.role must be user, system, developer or assistant, got {role!r}",
        )
    return {"role": role, "content": _text(item.get("content"), f"{where}.content")}


def _text(content: Any, where: str) -> str:
    """Text content: a string, or text parts (``input_text``, ``output_text``) joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            key = TEXT_PARTS.get(kind) if isinstance(kind, str) else None
            if key is None or not isinstance(part.get(key), str):
                raise bad_input(
                    f"{where}[{j}]", f"{where}[{j}]: only text is supported, got {kind!r}"
                )
            texts.append(part[key])
        return "".join(texts)
    raise bad_input(where, f"{where} must be a string or a list of text parts")


def _function_call(item: dict, where: str) -> dict[str, Any]:
    for key in ("call_id", "name", "arguments"):
        if not isinstance(item.get(key), str):
            raise bad_input(
                f"{where}.{key}",
                f"{where}.{key} must be a string (a function_call has call_id, name and arguments)",
            )
    function = {"name": item["name"], "arguments": item["arguments"]}
    return {"id": item["call_id"], "type": "function", "function": function}


def _function_result(item: dict, where: str, calls: dict[str, str]) -> dict[str, Any]:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or call_id not in calls:
        raise bad_input(
            f"{where}.call_id",
            f"{where}: a function_call_output must answer a function_call before it, and "
            f"call_id={call_id!r} is none of theirs "
            f"({', '.join(map(repr, calls)) or 'no calls before it'})",
        )
    content = _text(item.get("output"), f"{where}.output")
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# --- the reply -----------------------------------------------------------------------------------


def as_response(reply: dict[str, Any], asked: ResponsesCall) -> dict[str, Any]:
    """The session's chat completion ``reply`` to ``asked`` as a Response object."""
    (choice,) = reply["choices"]
    message = choice["message"]
    base = reply["id"].removeprefix("chatcmpl-")  # "<episode>-<k>": unique in the episode
    cut = choice["finish_reason"] == "length"
    output: list[dict[str, Any]] = []
    if message["content"] is not None:
        part: dict[str, Any] = {
            "type": "output_text",
            "text": message["content"],
            "annotations": [],
        }
        if choice.get("logprobs") is not None:
            part["logprobs"] = choice["logprobs"]["content"]
        status = "incomplete" if cut else "completed"
        item = {"type": "message", "id": f"msg-{base}", "role": "assistant", "status": status}
        output.append(item | {"content": [part]})
    for j, c in enumerate(message.get("tool_calls") or ()):
        output.append(
            {"type": "function_call", "id": f"fc-{base}-{j}", "call_id": c["id"],
             "name": c["function"]["name"], "arguments": c["function"]["arguments"],
             "status": "completed"}
        )  # fmt: skip
    usage = reply["usage"]
    return {
        "id": f"resp-{base}",
        "object": "response",
        "created_at": reply["created"],
        "completed_at": reply["created"],
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "model": reply["model"],
        "instructions": asked.instructions,
        "max_output_tokens": asked.max_output_tokens,
        "output": output,
        "parallel_tool_calls": asked.parallel_tool_calls,
        "tool_choice": _echo_choice(asked.tool_choice),
        "tools": [{"type": "function", **t["function"], "strict": False} for t in asked.tools],
        "previous_response_id": None,
        "store": False,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        # OpenAI's Response has no system_fingerprint: the weights that answered (the chat
        # reply's stamp, teamrl.apps.provenance) ride in its metadata under that name
        "metadata": {"system_fingerprint": fp} if (fp := reply.get("system_fingerprint")) else {},
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"],
        },
    }


def _echo_choice(choice: ToolChoice) -> Any:
    return {"type": "function", "name": choice.name} if choice.mode == "function" else choice.mode


# --- the stream ----------------------------------------------------------------------------------


def stream_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The Responses stream of ``response``: ``response.created`` and ``.in_progress`` (no
    output yet); for the message, its item added, its text part added, the text as one
    ``response.output_text.delta`` (none when empty), the text and the part done, the item
    done; for each call, its item added with empty arguments, the arguments as one
    ``response.function_call_arguments.delta``, their ``.done``, the item done; last
    ``response.completed`` (``response.incomplete`` when cut at the token limit) with the whole
    response. Computed from the reply, never sampled apart: the deltas add up to it."""
    events: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    pending = response | {"status": "in_progress", "output": [], "usage": None,
                          "incomplete_details": None, "completed_at": None}  # fmt: skip
    emit("response.created", response=pending)
    emit("response.in_progress", response=pending)
    for i, item in enumerate(response["output"]):
        at = {"item_id": item["id"], "output_index": i}
        if item["type"] == "message":
            (part,) = item["content"]
            text, logprobs = part["text"], part.get("logprobs", [])
            empty = part | {"text": ""} | ({"logprobs": []} if "logprobs" in part else {})
            opening = item | {"status": "in_progress", "content": []}
            emit("response.output_item.added", output_index=i, item=opening)
            emit("response.content_part.added", **at, content_index=0, part=empty)
            if text:
                emit("response.output_text.delta", **at, content_index=0, delta=text, logprobs=logprobs)  # fmt: skip
            emit("response.output_text.done", **at, content_index=0, text=text, logprobs=logprobs)
            emit("response.content_part.done", **at, content_index=0, part=part)
        else:
            name, arguments = item["name"], item["arguments"]
            opening = item | {"arguments": "", "status": "in_progress"}
            emit("response.output_item.added", output_index=i, item=opening)
            emit("response.function_call_arguments.delta", **at, delta=arguments)
            emit("response.function_call_arguments.done", **at, name=name, arguments=arguments)
        emit("response.output_item.done", output_index=i, item=item)
    emit(f"response.{response['status']}", response=response)
    return events


async def events(response: dict[str, Any]) -> AsyncIterator[bytes]:
    """``stream_events`` as server-sent events, each named by its type (the Responses stream
    ends with its last event: no ``[DONE]``)."""
    for e in stream_events(response):
        data = json.dumps(e, ensure_ascii=False)
        yield f"event: {e['type']}\ndata: {data}\n\n".encode()
