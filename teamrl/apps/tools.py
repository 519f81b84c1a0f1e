"""Function tools on the endpoint: a request's ``tools``, ``tool_choice`` and tool messages
checked, the chat rendered with them, and a reply read back as OpenAI tool calls.

Checking (``check_tools``, ``check_tool_choice``, ``tool_fields``): pure functions that
raise ``ToolError`` (a message and the request field it names); the endpoint's ``parse_call``,
the one place a request is checked, turns it into its 400.

Rendering (``for_template``). A chat template that renders tools in the format read back
here (its Jinja source reads the variable ``tools`` and writes ``<tool_call>``, as Qwen2.5's
and the Hermes templates do) is given them as they came, with the messages' tool calls and
tool results as Hugging Face's templates take them (a call's arguments as an object). Any other
template (the builtin tiny models' ChatML, SmolLM2's; and one that asks for calls in another
format, such as Llama 3.1's bare JSON, which would be read as text) is given the fallback
format, plain text in the roles it knows:

- the tools as a block at the end of the system message (a system message is added when the
  chat has none): ``FALLBACK_HEADER``, one JSON schema a line between ``<tools>`` tags, and
  how to call them: one ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` line per
  call, said in words, then an example call of the first tool with its parameters named and
  each one's type where its value goes (``example_call``): SmolLM2-135M copied a pattern's
  placeholder text, "<the arguments as a JSON object>", into its calls, and example values
  into its arguments, where the named parameters are what it should copy;
- where a chat uses tools, a reply ends where the model writes a tool result's tag
  (``RESULT_TAGS``, ``reply_stops``);
- an assistant message's tool calls as those lines, after its text;
- the results of consecutive tool messages as one user turn, each result between
  ``<tool_response>`` tags, in the order they came.

This is the format Qwen2.5's own template renders, so one reader serves both.

Reading (``read_reply``): the reply's ``<tool_call>...</tool_call>`` blocks become OpenAI tool
calls (``id``, ``type: function``, ``function: {name, arguments}``, the arguments a JSON
string), several blocks several calls, and the text outside them is the content (None when
nothing is left). A reply that holds a block that does not read as a call of one of the tools
(bad JSON, an unknown name, arguments that are not an object, an unclosed tag) is returned as
plain text and counted as unparsed, and so is a reply with no call when ``tool_choice`` is
``required`` or names a function, a call of another function than the one named, and several
calls when ``parallel_tool_calls`` is false. ``tool_choice=none`` reads no call. Whatever the
reading, the tokens trained are the ones sampled: the reading changes what the app is told,
never the sample.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

FALLBACK_HEADER = "# Tools\n\nYou may call these functions, given as JSON schemas:"
# How to call, in words; the shape is shown by an example call after it (``example_call``), its
# parameters named, never by a pattern with placeholder text, which small models copy.
FALLBACK_HOW = (
    "To call a function, write one line per call, each on its own: a JSON object with the "
    'function\'s "name" and its "arguments" (an object), between <tool_call> and </tool_call>. '
    "The results come back between <tool_response> tags."
)
CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
OPEN_TAG = "<tool_call>"
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for a function's name


class ToolError(ValueError):
    """A request's tools, tool_choice or tool messages that cannot be served: ``param`` names
    the field (``tools[0].function.name``), ``code`` is the OpenAI error code."""

    def __init__(self, message: str, param: str, code: str = "invalid_value"):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


@dataclass(frozen=True)
class ToolChoice:
    mode: str  # "auto" | "none" | "required" | "function" (a named function)
    name: str | None = None  # the function, when mode is "function"


# --- checking what a request asks ------------------------------------------------------------


def check_tools(raw: Any) -> tuple[dict, ...]:
    """The request's ``tools``, each as ``{"type": "function", "function": {name,
    description?, parameters}}`` (parameters default to an object with no properties, which is
    OpenAI's reading of a function without them)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ToolError("tools must be a list of function tools", "tools")
    out, names = [], set()
    for i, tool in enumerate(raw):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise ToolError(
                f"{where}: only function tools are supported "
                f'({{"type": "function", "function": {{...}}}}), got {kind!r}',
                where,
            )
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise ToolError(f"{where}.function must be an object", f"{where}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ToolError(
                f"{where}.function.name must be 1 to 64 letters, digits, '_' or '-', got {name!r}",
                f"{where}.function.name",
            )
        if name in names:
            raise ToolError(f"{where}: a second function named {name!r}", f"{where}.function.name")
        names.add(name)
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise ToolError(
                f"{where}.function.parameters must be a JSON schema object",
                f"{where}.function.parameters",
            )
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise ToolError(
                f"{where}.function.description must be a string", f"{where}.function.description"
            )
        function = {"name": name, **({"description": desc} if desc else {}), "parameters": params}
        out.append({"type": "function", "function": function})
    return tuple(out)


def check_tool_choice(raw: Any, tools: tuple[dict, ...]) -> ToolChoice:
    """The request's ``tool_choice``: ``auto`` when absent and tools are given, ``none``
    without tools. ``required`` or a named function with no tools to call is refused; so is a
    name that is not one of the tools."""
    names = [t["function"]["name"] for t in tools]
    if raw is None:
        return ToolChoice("auto" if tools else "none")
    if raw in ("auto", "none"):
        return ToolChoice(raw)
    if (raw == "required" or isinstance(raw, dict)) and not tools:
        raise ToolError(
            f"tool_choice={json.dumps(raw)} asks for a call, but the request has no tools",
            "tool_choice",
        )
    if raw == "required":
        return ToolChoice("required")
    fn = raw.get("function") if isinstance(raw, dict) and raw.get("type") == "function" else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise ToolError(
            "tool_choice must be 'auto', 'none', 'required' or "
            f'{{"type": "function", "function": {{"name": ...}}}}, got {json.dumps(raw)}',
            "tool_choice",
        )
    if name not in names:
        raise ToolError(
            f"tool_choice names the function {name!r}, which is not one of the tools "
            f"({', '.join(names)})",
            "tool_choice",
        )
    return ToolChoice("function", name)


def tool_fields(m: dict, where: str, calls: dict[str, str]) -> dict[str, Any]:
    """What a request's message ``m`` carries besides its role and text: an assistant's
    ``tool_calls`` as ``[{"id", "type": "function", "function": {"name", "arguments"}}]``
    (each call's id and name added to ``calls``), a tool message's ``tool_call_id`` with the
    ``name`` of the call it answers, which must be a call of an earlier message. The legacy
    ``function`` role is refused."""
    role = m["role"]
    if role == "function":
        raise ToolError(
            f"{where}: the 'function' role (legacy function calls) is not supported: use "
            "tools and 'tool' messages",
            f"{where}.role",
            "invalid_messages",
        )
    if m.get("tool_calls"):
        if role != "assistant" or not isinstance(m["tool_calls"], list):
            raise ToolError(
                f"{where}.tool_calls: only an assistant message has tool_calls, a list",
                f"{where}.tool_calls",
                "invalid_messages",
            )
        return {
            "tool_calls": [
                _message_call(c, f"{where}.tool_calls[{j}]", calls)
                for j, c in enumerate(m["tool_calls"])
            ]
        }
    if role == "tool":
        call_id = m.get("tool_call_id")
        if call_id not in calls:
            raise ToolError(
                f"{where}: a tool message must answer a call of an earlier assistant message, "
                f"and tool_call_id={call_id!r} is none of theirs "
                f"({', '.join(map(repr, calls)) or 'no calls before it'})",
                f"{where}.tool_call_id",
                "invalid_messages",
            )
        return {"tool_call_id": call_id, "name": calls[call_id]}
    return {}


def _message_call(call: Any, where: str, seen: dict[str, str]) -> dict:
    fn = call.get("function") if isinstance(call, dict) else None
    ok = (
        isinstance(call, dict)
        and call.get("type", "function") == "function"
        and isinstance(call.get("id"), str)
        and isinstance(fn, dict)
        and isinstance(fn.get("name"), str)
        and isinstance(fn.get("arguments", ""), str)
    )
    if not ok:
        raise ToolError(
            f'{where} must be {{"id": str, "type": "function", "function": {{"name": str, '
            '"arguments": str}}}',
            where,
            "invalid_messages",
        )
    seen[call["id"]] = fn["name"]
    function = {"name": fn["name"], "arguments": fn.get("arguments", "")}
    return {"id": call["id"], "type": "function", "function": function}


def uses_tools(messages: list[dict[str, Any]], tools: tuple[dict, ...]) -> bool:
    return bool(tools) or any("tool_calls" in m or m["role"] == "tool" for m in messages)


# Where a chat uses tools, a reply ends where the model starts writing a tool result: results
# are the tools' turn (both formats read here put them between these tags), never the model's,
# and a model that writes one is inventing it (SmolLM2-135M, after its answer, repeated
# "</tool_response>" to the end of its token budget). The tag, like any stop string, ends the
# sample where it completes and is left out of the reply's text.
RESULT_TAGS = ("<tool_response>", "</tool_response>")


def reply_stops(messages: list[dict[str, Any]], tools: tuple[dict, ...]) -> tuple[str, ...]:
    """The stop strings the endpoint adds to a call: ``RESULT_TAGS`` where it uses tools."""
    return RESULT_TAGS if uses_tools(messages, tools) else ()


# --- rendering --------------------------------------------------------------------------------


def renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders tools in the format read back: its Jinja
    source reads ``tools`` and writes ``<tool_call>`` (the template it would pick when given
    tools, for a tokenizer with named templates)."""
    try:
        template = tokenizer.get_chat_template(tools=[])
    except (AttributeError, ValueError):  # no template
        return False
    return isinstance(template, str) and OPEN_TAG in template and _reads_tools(template)


@functools.lru_cache(maxsize=32)
def _reads_tools(template: str) -> bool:
    from jinja2 import Environment, TemplateSyntaxError, meta

    try:
        return "tools" in meta.find_undeclared_variables(Environment().parse(template))
    except TemplateSyntaxError:  # an extension this plain environment lacks: the text decides
        return re.search(r"\btools\b", template) is not None


def for_template(
    messages: list[dict[str, Any]], tools: tuple[dict, ...], native: bool
) -> tuple[list[dict[str, Any]], list[dict] | None]:
    """(messages, tools) for ``Team.encode_messages``: as they are for a chat without tools;
    for a template that renders tools (``native``), the tools and the calls with their
    arguments as objects; otherwise the fallback format, plain ``{"role", "content"}``
    messages and no tools."""
    if not uses_tools(messages, tools):
        return [{"role": m["role"], "content": m["content"]} for m in messages], None
    if native:
        out = []
        for m in messages:
            if "tool_calls" in m:
                m = m | {"tool_calls": [_arguments_as_object(c) for c in m["tool_calls"]]}
            out.append(m)
        return out, list(tools) or None
    return fallback(messages, tools), None


def fallback(messages: list[dict[str, Any]], tools: tuple[dict, ...]) -> list[dict[str, str]]:
    """The chat in the fallback format (the module's docstring), plain text in plain roles."""
    out: list[dict[str, str]] = []
    results = False  # the last turn holds tool results
    for m in messages:
        if m["role"] == "tool":
            result = f"<tool_response>\n{m['content']}\n</tool_response>"
            if results:  # consecutive results: one turn
                out[-1]["content"] += "\n" + result
            else:
                out.append({"role": "user", "content": result})
            results = True
            continue
        content = m["content"]
        if m.get("tool_calls"):
            lines = [call_line(c["function"]) for c in m["tool_calls"]]
            content = "\n".join(([content] if content else []) + lines)
        out.append({"role": m["role"], "content": content})
        results = False
    if tools:
        block = "\n".join(
            [FALLBACK_HEADER, "<tools>", *(json.dumps(t, ensure_ascii=False) for t in tools)]
            + ["</tools>", "", FALLBACK_HOW, example_call(tools[0])]
        )
        if out and out[0]["role"] == "system":
            out[0]["content"] = (out[0]["content"] + "\n\n" if out[0]["content"] else "") + block
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def example_call(tool: dict) -> str:
    """The fallback format's example: a call of ``tool`` with each parameter's JSON-schema type
    in angle brackets where its value goes (``<value>`` for an untyped one), as one call line.
    It is not JSON on purpose: a reply that copies it reads as no call (counted unparsed),
    where an example with values would run the tool on values nobody chose (SmolLM2-135M,
    trained on an example calling add with 1 and 1, learned to call add with 1 and 1)."""
    function = tool["function"]
    props = function.get("parameters", {}).get("properties", {})
    arguments = ", ".join(
        f"{json.dumps(name)}: <{spec.get('type', 'value') if isinstance(spec, dict) else 'value'}>"
        for name, spec in props.items()
    )
    name = json.dumps(function["name"], ensure_ascii=False)
    return f'For example:\n{OPEN_TAG}{{"name": {name}, "arguments": {{{arguments}}}}}</tool_call>'


def _arguments_as_object(call: dict) -> dict:
    function = call["function"] | {"arguments": _as_object(call["function"]["arguments"])}
    return call | {"function": function}


def call_line(function: dict) -> str:
    """A call as the fallback format writes it: ``<tool_call>{"name", "arguments"}</tool_call>``."""
    call = {"name": function["name"], "arguments": _as_object(function["arguments"])}
    return f"{OPEN_TAG}{json.dumps(call, ensure_ascii=False)}</tool_call>"


def _as_object(arguments: str) -> Any:
    """A call's arguments as the JSON value they spell (what templates render), or the
    string itself when it is not JSON."""
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        return arguments


# --- reading a reply --------------------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    content: str | None  # the text the app is given (None: calls only)
    calls: list[dict]  # OpenAI tool calls, ids left to the caller: [{"name", "arguments"}]
    unparsed: bool  # tools were offered and the reply is text where a call was due or tried


def forced_opening(choice: ToolChoice, tools: tuple[dict, ...]) -> str:
    """The start of the call a request's ``tool_choice`` demands, in the format ``read_reply``
    reads (``endpoint.prefill_tool_calls``): a named function's call up to its arguments'
    opening brace, the tag and the name's opening quote under ``required``, else nothing. The
    model's continuation completes it; a continuation that does not (an unknown name, bad JSON)
    reads as text and is counted, as any reply."""
    if not tools:
        return ""
    if choice.mode == "function":
        return f'{OPEN_TAG}{{"name": {json.dumps(choice.name)}, "arguments": {{'
    if choice.mode == "required":
        return f'{OPEN_TAG}{{"name": "'
    return ""


def read_reply(
    text: str, tools: tuple[dict, ...], choice: ToolChoice, parallel: bool = True
) -> Reading:
    """The reply ``text`` read as content and tool calls (the module's docstring)."""
    if not tools or choice.mode == "none":
        return Reading(text, [], False)
    due = choice.mode in ("required", "function")
    if OPEN_TAG not in text:
        return Reading(text, [], due)
    blocks = CALL.findall(text)
    names = {t["function"]["name"] for t in tools}
    calls = [c for b in blocks if (c := _read_call(b, names)) is not None]
    if (
        len(calls) != len(blocks)
        or text.count(OPEN_TAG) != len(blocks)  # a tag left open
        or (choice.mode == "function" and any(c["name"] != choice.name for c in calls))
        or (not parallel and len(calls) > 1)
    ):
        return Reading(text, [], True)
    content = CALL.sub("", text).strip()
    return Reading(content or None, calls, False)


def _read_call(block: str, names: set[str]) -> dict | None:
    try:
        call = json.loads(block)
    except ValueError:
        return None
    if not isinstance(call, dict) or call.get("name") not in names:
        return None
    args = call.get("arguments", {})
    if isinstance(args, str):  # arguments written as a JSON string of an object
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return {"name": call["name"], "arguments": json.dumps(args, ensure_ascii=False)}
