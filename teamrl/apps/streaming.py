"""A chat completion as OpenAI's stream: the server-sent events of ``stream=true``.

The batching is the same for a streamed call: it waits at the barrier like any other, and its
reply is whole once its batch is sampled. It is then sent as the chunks OpenAI's clients
accumulate (``chat.completion.chunk`` objects, each a ``data:`` event):

1. the role (``{"role": "assistant", "content": ""}``; content null when the reply is calls
   only, as OpenAI sends it);
2. the text, as one content delta, when there is any;
3. each tool call, as one delta with its ``index``, ``id``, ``type`` and the whole
   ``function`` (name and arguments);
4. an empty delta with the ``finish_reason``;
5. with ``stream_options: {"include_usage": true}``, a chunk with no choices and the usage
   (and ``usage: null`` on the chunks before it);

then ``data: [DONE]``. The log-probs, when asked for, ride on the first chunk that carries
text or calls (on the last one when the reply is empty). Concatenated, the deltas are the
non-streamed reply: ``chunks`` is computed from that reply, never sampled apart.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

DONE = b"data: [DONE]\n\n"


def chunks(reply: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The chunks of the chat completion ``reply`` (the module's docstring)."""
    head = {"id": reply["id"], "object": "chat.completion.chunk"}
    head |= {k: v for k, v in reply.items() if k not in ("id", "object", "choices", "usage")}
    (choice,) = reply["choices"]
    message = choice["message"]
    content = message.get("content")
    deltas = [{"content": content}] if content else []
    calls = message.get("tool_calls") or ()
    deltas += [{"tool_calls": [{"index": j, **call}]} for j, call in enumerate(calls)]
    logprobs = choice.get("logprobs")
    role = {"role": "assistant", "content": None if content is None else ""}
    parts = [(role, None, None)]  # (delta, log-probs, finish_reason)
    parts += [(d, logprobs if j == 0 else None, None) for j, d in enumerate(deltas)]
    parts.append(({}, None if deltas else logprobs, choice["finish_reason"]))
    usage = {"usage": None} if include_usage else {}
    out = [
        head | {"choices": [{"index": 0, "delta": d, "logprobs": lp, "finish_reason": f}]} | usage
        for d, lp, f in parts
    ]
    if include_usage:
        out.append(head | {"choices": [], "usage": reply["usage"]})
    return out


async def events(reply: dict[str, Any], include_usage: bool) -> AsyncIterator[bytes]:
    """The server-sent events of ``reply``, ending with ``data: [DONE]``."""
    for c in chunks(reply, include_usage):
        yield b"data: " + json.dumps(c, ensure_ascii=False).encode() + b"\n\n"
    yield DONE
