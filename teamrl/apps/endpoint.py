"""An OpenAI-compatible chat-completions endpoint in front of the team.

    POST /e/<episode>/v1/chat/completions     a call of one episode; ``model`` names an agent
    POST /e/<episode>/v1/responses            the same, as OpenAI's Responses API (responses.py)
    GET  /e/<episode>/v1/models               the agents (also at /v1/models)

Each episode of a rollout gets its own base URL (``Endpoint.episode_url``), which every
OpenAI client and framework takes as ``base_url``: the path, not a header, ties a call to its
episode. The server (uvicorn, one daemon thread, its own event loop) only checks a request and
hands it to the rollout's ``CallSink`` (``teamrl.apps.episodes.Session``), whose thread applies
the chat template, batches the calls and generates; the handler awaits the reply.

Function tools (``tools``, ``tool_choice``, assistant ``tool_calls`` and ``tool`` messages)
are checked here and rendered and read back by ``teamrl.apps.tools``; ``stream=true`` is
answered, once the call's batch is sampled, as OpenAI's chunks (``teamrl.apps.streaming``).

Security: the server binds to loopback unless told otherwise and accepts only its own API key,
drawn at random when it starts (``secrets``, so the training RNG streams never move) and handed
to the episodes' clients: a request without it is answered 401, before its body is read.

A request it cannot serve is an OpenAI-style error, ``{"error": {"message", "type", "param",
"code"}}`` with a 4xx status, never a hang. Statuses the OpenAI clients retry (408, 409, 429,
5xx) are never used for a refusal of what a request asks, so a refused call fails at once;
429 says only that an episode has too many calls in one batch (``endpoint.max_batch_calls``),
which a retry after the batch may pass.

Under load (the ``endpoint`` section of the config, ``EndpointConfig``): every connection is
guarded (``teamrl.apps.guard``: a cap, a deadline for a whole request, the open-file limit
raised while it serves), and every request is read in one place, ``read_call``: its body at
most ``max_body_mb`` (413 without reading the rest), its JSON at most ``max_json_depth`` deep
(400 before parsing), then checked by ``parse_call``.
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.util
import json
import re
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from teamrl.apps.tools import ToolChoice, ToolError, check_tool_choice, check_tools, tool_fields
from teamrl.config.endpoint import EndpointConfig
from teamrl.errors import ConfigError

REQUIRED = ("starlette", "uvicorn", "openai")
START_TIMEOUT_S = 30.0  # how long the server thread may take to listen
ENDED_KEPT = 100_000  # ended episode ids remembered, to answer "ended" rather than "unknown"


def require_apps() -> None:
    """One line naming what to install when a package of the ``apps`` extra is missing."""
    missing = [m for m in REQUIRED if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"algorithm.name=app needs {', '.join(missing)} (not installed): "
            "pip install 'teamrl[apps]'"
        )


# --- what a request asks, checked -----------------------------------------------------------


@dataclass(frozen=True)
class ChatCall:
    """A chat-completions request the endpoint can serve."""

    agent: str
    messages: list[dict[str, Any]]  # role and text content, in order (tool fields: tools.py)
    max_tokens: int | None  # the request's cap on new tokens (None: the agent's)
    stop: tuple[str, ...]  # the request's stop strings, added to the agent's
    logprobs: bool  # whether the reply carries each token's log-prob
    tools: tuple[dict, ...] = ()  # function tools, checked (teamrl.apps.tools)
    tool_choice: ToolChoice = ToolChoice("none")
    parallel_tool_calls: bool = True  # False: a reply with several calls is text
    stream: bool = False  # answer as server-sent chunks (teamrl.apps.streaming)
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage


class Refusal(Exception):
    """A request the endpoint answers with an OpenAI-style error; ``close``: the connection
    is closed after the answer (a body left unread, a client without the key)."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        type_: str = "invalid_request_error",
        close: bool = False,
        param: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.type = status, message, code, type_
        self.close, self.param = close, param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message, "type": self.type, "param": self.param,
                "code": self.code,
            }
        }  # fmt: skip


UNSUPPORTED = {  # request fields the endpoint refuses, and why
    "functions": "legacy function calls are not supported: use tools",
    "function_call": "legacy function calls are not supported: use tools and tool_choice",
    "audio": "audio output is not supported",
    "prediction": "predicted outputs are not supported",
}
IGNORED = (  # accepted, with no effect: the agent's config sets its sampling (docs/apps.md)
    "temperature", "top_p", "seed", "frequency_penalty", "presence_penalty", "user", "store",
    "metadata", "service_tier", "logit_bias", "reasoning_effort", "modalities",
)  # fmt: skip


def parse_call(body: Any, agents: list[str]) -> ChatCall:
    """The request ``body`` as a ``ChatCall``, or a ``Refusal`` saying what is wrong."""
    if not isinstance(body, dict):
        raise Refusal(400, "the request body must be a JSON object", "invalid_body")
    model = body.get("model")
    if model not in agents:
        raise Refusal(
            404,
            f"model {model!r} is not an agent of this team; the models are the agents: "
            f"{', '.join(agents)}",
            "model_not_found",
            param="model",
        )
    for name, why in UNSUPPORTED.items():
        if body.get(name):
            raise Refusal(400, f"{name}: {why}", "unsupported_parameter", param=name)
    fmt = body.get("response_format")
    if fmt and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise Refusal(400, "response_format: only 'text' is supported", "unsupported_parameter", param="response_format")  # fmt: skip
    n = body.get("n", 1)
    if n not in (None, 1):
        raise Refusal(400, f"n={n!r}: one choice per call only (n=1)", "unsupported_parameter", param="n")  # fmt: skip
    if body.get("top_logprobs"):
        raise Refusal(400, "top_logprobs is not supported (logprobs=true is)", "unsupported_parameter", param="top_logprobs")  # fmt: skip
    known = {
        "model", "messages", "max_tokens", "max_completion_tokens", "stop", "logprobs",
        "tools", "tool_choice", "parallel_tool_calls", "stream", "stream_options",
        "response_format", "n", "top_logprobs",
    }  # fmt: skip
    unknown = sorted(set(body) - known - set(UNSUPPORTED) - set(IGNORED))
    if unknown:
        raise Refusal(400, f"unsupported parameter(s): {', '.join(unknown)}", "unsupported_parameter", param=unknown[0])  # fmt: skip
    try:
        messages = _messages(body.get("messages"))
        tools = check_tools(body.get("tools"))
        choice = check_tool_choice(body.get("tool_choice"), tools)
    except ToolError as err:
        raise Refusal(400, err.message, err.code, param=err.param) from None
    stream, include_usage = _stream(body)
    return ChatCall(
        agent=model,
        messages=messages,
        max_tokens=_max_tokens(body),
        stop=_stop(body.get("stop")),
        logprobs=bool(body.get("logprobs")),
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=_flag(body, "parallel_tool_calls", True),
        stream=stream,
        include_usage=include_usage,
    )


def _messages(raw: Any) -> list[dict[str, Any]]:
    """Each message's role and text, and its tool fields (``teamrl.apps.tools.tool_fields``:
    an assistant's calls, the call a tool message answers)."""
    if not isinstance(raw, list) or not raw:
        raise Refusal(400, "messages must be a non-empty list", "invalid_messages", param="messages")  # fmt: skip
    out = []
    calls: dict[str, str] = {}  # the ids of the calls so far, and their functions
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise Refusal(400, f"messages[{i}] must be an object with a role", "invalid_messages", param=f"messages[{i}]")  # fmt: skip
        message = {"role": m["role"], "content": _text(m.get("content"), i)}
        out.append(message | tool_fields(m, f"messages[{i}]", calls))
    return out


def _text(content: Any, i: int) -> str:
    """A message's content as text: a string, or a list of text parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise Refusal(400, f"messages[{i}].content: only text is supported", "invalid_messages", param=f"messages[{i}].content")  # fmt: skip


def _flag(body: dict, name: str, default: bool, within: str = "") -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise Refusal(400, f"{within}{name} must be true or false, got {value!r}", "invalid_value", param=within + name)  # fmt: skip
    return value


def _stream(body: dict) -> tuple[bool, bool]:
    """(stream, include_usage): ``stream_options`` is read only with ``stream=true``."""
    stream = _flag(body, "stream", False)
    options = body.get("stream_options")
    if not stream or options is None:
        return stream, False
    if not isinstance(options, dict):
        raise Refusal(400, "stream_options must be an object", "invalid_value", param="stream_options")  # fmt: skip
    return True, _flag(options, "include_usage", False, "stream_options.")


def _max_tokens(body: dict) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise Refusal(400, f"max_tokens must be a positive integer, got {value!r}", "invalid_value", param="max_tokens")  # fmt: skip
    return value


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise Refusal(
            400, "stop must be a string or a list of strings", "invalid_value", param="stop"
        )
    return tuple(value)


# --- reading a request, within the limits -------------------------------------------------------


async def read_call(request: Any, agents: list[str], limits: EndpointConfig) -> ChatCall:
    """The one place a chat request is read and checked: its body within
    ``limits.max_body_mb`` and ``limits.max_json_depth``, then ``parse_call``. ``request`` is
    Starlette's ``Request``."""
    return parse_call(await read_json(request, limits), agents)


async def read_json(request: Any, limits: EndpointConfig) -> Any:
    """The request's body as JSON. A body that declares (``Content-Length``) or reaches more
    than ``max_body_mb`` MiB is refused 413 as soon as that is known, unread past it; JSON
    nested deeper than ``max_json_depth`` is refused 400 before the parser recurses into it."""
    from starlette.requests import ClientDisconnect

    most = limits.max_body_mb * 2**20
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > most:
        raise too_large(f"declares {int(declared):,} bytes", limits)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > most:
                raise too_large(f"has sent more than {most:,} bytes", limits)
            chunks.append(chunk)
    except ClientDisconnect:  # closed at its deadline, or by the client: no one to answer
        raise Refusal(400, "the client closed the connection mid-body", "invalid_body") from None
    raw = b"".join(chunks)
    if nested_deeper(raw, limits.max_json_depth):
        raise Refusal(
            400,
            f"the request body nests objects and lists more than {limits.max_json_depth} deep "
            "(endpoint.max_json_depth)",
            "nested_too_deeply",
        )
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise Refusal(400, "the request body is not JSON", "invalid_body") from None


def too_large(what: str, limits: EndpointConfig) -> Refusal:
    return Refusal(
        413,
        f"the request body {what}: more than endpoint.max_body_mb={limits.max_body_mb} MiB",
        "request_too_large",
        close=True,  # the rest of the body is never read: the connection cannot serve another
    )


# A JSON string, escapes included; possessive, so an unterminated one ends at the body's end
# instead of being retried from every later quote (which would be quadratic).
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # +1 opens, -1 (int8) closes
_CHUNK = 1 << 20


def nested_deeper(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` nests objects and lists more than ``limit`` deep: the
    strings taken out (a bracket in a string nests nothing), the depth is the running sum of
    +1 per opening and -1 per closing bracket, and its maximum is compared. Linear in the
    body and in C (re, bytes.translate, numpy), so a large body costs the loop little. On
    text that is not JSON it may answer either way; the parser refuses that text anyway."""
    marks = _STRING.sub(b"", raw).translate(None, _NOT_BRACKET)
    if len(marks) <= limit:
        return False
    steps = np.frombuffer(marks.translate(_STEP), dtype=np.int8)
    depth = 0
    for start in range(0, len(steps), _CHUNK):
        running = np.cumsum(steps[start : start + _CHUNK], dtype=np.int64) + depth
        if running.max() > limit:
            return True
        depth = int(running[-1])
    return False


# --- who serves the calls ---------------------------------------------------------------------


class CallSink(Protocol):
    """One rollout's episodes (``teamrl.apps.episodes.Session``): takes a checked call of one
    of its episodes and answers it later, as (HTTP status, JSON body)."""

    agents: list[str]

    def submit(self, episode: int, call: ChatCall) -> Future: ...


@dataclass(frozen=True)
class EpisodeSlot:
    sink: CallSink
    episode: int


# --- the server ---------------------------------------------------------------------------------


class Endpoint:
    """The HTTP server and the table of live episodes. ``start`` binds ``host:port`` (port 0:
    a free one) and serves on a daemon thread; ``register`` gives a sink's episodes their
    ids, ``unregister`` ends them. ``limits`` (the config's ``endpoint`` section) may be
    replaced while it serves: each connection and request reads them when it starts."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        limits: EndpointConfig | None = None,
    ):
        self.host, self.port = host, port
        self.limits = limits or EndpointConfig()
        self.api_key = api_key or "teamrl-" + secrets.token_urlsafe(24)
        self._episodes: dict[str, EpisodeSlot] = {}
        self._ended: dict[str, None] = {}  # insertion-ordered, trimmed to ENDED_KEPT
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.guard: Any = None  # teamrl.apps.guard.ConnectionGuard, while it serves
        self._agents: list[str] = []  # the latest sink's, for /v1/models

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def episode_url(self, episode_id: str) -> str:
        return f"{self.url}/e/{episode_id}/v1"

    def register(self, sink: CallSink, n: int) -> list[str]:
        """Ids for the sink's episodes 0..n-1 (random: an id is not guessable from another)."""
        ids = [secrets.token_urlsafe(12) for _ in range(n)]
        with self._lock:
            for i, eid in enumerate(ids):
                self._episodes[eid] = EpisodeSlot(sink, i)
            self._agents = list(sink.agents)
        return ids

    def unregister(self, ids: list[str]) -> None:
        with self._lock:
            for eid in ids:
                if self._episodes.pop(eid, None) is not None:
                    self._ended[eid] = None
            while len(self._ended) > ENDED_KEPT:
                self._ended.pop(next(iter(self._ended)))

    def slot(self, episode_id: str) -> EpisodeSlot:
        with self._lock:
            slot = self._episodes.get(episode_id)
            ended = episode_id in self._ended
        if slot is not None:
            return slot
        if ended:
            raise Refusal(410, f"episode {episode_id} has ended: a call after its episode returned", "episode_ended")  # fmt: skip
        raise Refusal(404, f"no episode {episode_id}: use the base_url the episode was given", "unknown_episode")  # fmt: skip

    def authorised(self, headers: Mapping[str, str]) -> bool:
        given = headers.get("authorization", "")
        token = given[7:] if given[:7].lower() == "bearer " else ""
        return hmac.compare_digest(token.encode(), self.api_key.encode())

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Endpoint:
        """Serve on a daemon thread, guarded (``teamrl.apps.guard``): the soft open-file
        limit raised to the hard one until ``stop``, connections capped and given a deadline."""
        require_apps()
        import uvicorn

        from teamrl.apps.guard import BACKLOG, ConnectionGuard, raise_open_files

        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self.guard = ConnectionGuard(lambda: self.limits, open_files=raise_open_files())
        config = uvicorn.Config(
            asgi_app(self), log_level="warning", access_log=False, lifespan="off",
            loop="asyncio", http=self.guard.protocol(), ws="none", backlog=BACKLOG,
            timeout_keep_alive=self.limits.request_timeout,  # the guard's deadline rules
        )  # fmt: skip
        self._server = self.guard.server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True, name="teamrl-endpoint"
        )
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the app endpoint did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        from teamrl.apps.guard import restore_open_files

        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=10)
            self._server = self._thread = None
            restore_open_files()


def asgi_app(endpoint: Endpoint):
    """The Starlette application of ``endpoint``."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    from teamrl.apps import responses as responses_api
    from teamrl.apps.streaming import events

    def refuse(r: Refusal) -> JSONResponse:
        headers = {"connection": "close"} if r.close else None
        return JSONResponse(r.body(), status_code=r.status, headers=headers)

    def unauthorised() -> JSONResponse:
        # closed: a client without the key holds no connection between its requests
        return refuse(Refusal(401, "invalid API key: use the key the episode was given", "invalid_api_key", close=True))  # fmt: skip

    async def models(request: Request) -> JSONResponse:
        if not endpoint.authorised(request.headers):
            return unauthorised()
        try:
            eid = request.path_params.get("episode")
            agents = endpoint.slot(eid).sink.agents if eid else endpoint._agents
        except Refusal as r:
            return refuse(r)
        data = [{"id": a, "object": "model", "created": 0, "owned_by": "teamrl"} for a in agents]
        return JSONResponse({"object": "list", "data": data})

    async def chat(request: Request) -> Response:
        if not endpoint.authorised(request.headers):
            return unauthorised()
        try:
            slot = endpoint.slot(request.path_params["episode"])
            call = await read_call(request, slot.sink.agents, endpoint.limits)
            status, reply = await asyncio.wrap_future(slot.sink.submit(slot.episode, call))
        except Refusal as r:
            return refuse(r)
        if call.stream and status == 200:  # sampled with its batch, then sent as chunks
            return StreamingResponse(
                events(reply, call.include_usage),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        return JSONResponse(reply, status_code=status)

    async def responses(request: Request) -> Response:
        """A Responses API call: checked and sampled as the chat call it translates to."""
        if not endpoint.authorised(request.headers):
            return unauthorised()
        try:
            slot = endpoint.slot(request.path_params["episode"])
            asked = responses_api.parse_responses(await read_json(request, endpoint.limits))
            call = parse_call(asked.chat, slot.sink.agents)  # the chat route's own checks
            status, reply = await asyncio.wrap_future(slot.sink.submit(slot.episode, call))
        except responses_api.RequestError as err:
            return refuse(Refusal(400, err.message, err.code, param=err.param))
        except Refusal as r:
            return refuse(r)
        if status != 200:  # an OpenAI-style error already
            return JSONResponse(reply, status_code=status)
        answer = responses_api.as_response(reply, asked)
        if asked.stream:
            return StreamingResponse(
                responses_api.events(answer),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        return JSONResponse(answer)

    async def no_route(request: Request, exc: Exception) -> JSONResponse:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        what = "no such route" if status == 404 else "method not allowed" if status == 405 else str(exc)  # fmt: skip
        code = {404: "not_found", 405: "method_not_allowed"}.get(status, "server_error")
        kind = "server_error" if status >= 500 else "invalid_request_error"
        return refuse(Refusal(status, f"{what}: {request.method} {request.url.path}", code, kind))

    routes = [
        Route("/e/{episode}/v1/chat/completions", chat, methods=["POST"]),
        Route("/e/{episode}/v1/responses", responses, methods=["POST"]),
        Route("/e/{episode}/v1/models", models, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: no_route, 500: no_route})


_SHARED: Endpoint | None = None
_SHARED_LOCK = threading.Lock()


def shared_endpoint(limits: EndpointConfig | None = None) -> Endpoint:
    """The process's endpoint, started on first use on loopback (a free port) and kept for
    the process's life: every rollout of a run registers its episodes on it. ``limits``: the
    run's ``endpoint`` section, in force from the next connection and request on."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None or _SHARED._server is None:
            _SHARED = Endpoint(limits=limits).start()
        elif limits is not None:
            _SHARED.limits = limits
        return _SHARED
