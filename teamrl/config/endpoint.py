"""The ``endpoint`` section of the config: the limits of the app endpoint (``algorithm.name=app``,
``teamrl.apps.endpoint``) under load. Any local user can reach its port; these bounds keep what
a connection or a request may hold of the training process (descriptors, memory, the event
loop's time) small, whoever sends it (docs/apps.md, "Limits under load"). One field is not a
bound but how replies are written: ``prefill_tool_calls`` (docs/apps.md, "Tools and
streaming")."""

from __future__ import annotations

from dataclasses import dataclass

from teamrl.config.fields import _f


@dataclass
class EndpointConfig:
    request_timeout: float = _f(
        30.0,
        "Seconds a connection has to send a whole request (request line, headers and body), "
        "counted from its opening, or from the previous reply on a connection kept alive "
        "between calls; one that has not is closed. A call waiting for its batch has sent its "
        "request and is never cut. Bounds how long idle or half-sent connections hold a "
        "descriptor.",
    )
    max_connections: int = _f(
        1024,
        "Connections open at once, at most this many and never more than half the process's "
        "open-file limit (its soft limit is raised to the hard one while the endpoint serves). "
        "A connection past the cap closes one at once: the oldest connection that holds no "
        "whole request makes way for it, or, when every connection holds one, the new one is "
        "closed (said once in a warning). So a flood cannot lock the episodes' calls out.",
    )
    max_body_mb: int = _f(
        16,
        "MiB a request's body may hold; a larger one is answered 413 (request_too_large) "
        "without being read to its end, and its connection is closed.",
    )
    max_json_depth: int = _f(
        64,
        "How deep a request's JSON may nest objects and lists, one inside another (a chat "
        "request with content parts nests 5 deep); a deeper body is answered 400 "
        "(nested_too_deeply) before it is parsed.",
    )
    prefill_tool_calls: bool = _f(
        False,
        "When a call's tool_choice is 'required' or names a function, write the start of the "
        'call into the reply before the model goes on: \'<tool_call>{"name": "\' under '
        "'required' (the model names a tool), the named function's name and "
        "'\"arguments\": {' for a named one (the model writes the arguments). The reply then "
        "holds the call OpenAI's API promises, as guided decoding gives it elsewhere; the "
        "written part is prompt, never trained. Off: the model may answer in text, which is "
        "returned as text and counted in app/unparsed_tool_calls. Turn it on for a small model "
        "that does not yet write calls (docs/apps.md).",
    )
    max_batch_calls: int = _f(
        64,
        "Calls one episode may have in one batch: its calls waiting at the barrier at once "
        "(sent concurrently, e.g. with asyncio.gather). One more is answered 429 "
        "(too_many_calls) at once and counted in app/refused_calls, so a batch holds at most "
        "episodes x this many calls.",
    )
