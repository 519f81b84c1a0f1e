"""The endpoint under load (the config's ``endpoint`` section): a flood of connections from
another user is capped and timed out while the trainer and its calls go on; a request's body,
its JSON nesting, its length and an episode's calls per batch are bounded, each refusal an
OpenAI-style error, never a 500."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

import openai
import pytest
from helpers.apps import AGENTS, tiny_cfg, user
from helpers.flood import NOBODY, Flood

from teamrl.apps.endpoint import Endpoint, shared_endpoint
from teamrl.apps.episodes import run_episodes
from teamrl.apps.task import AppEnv, app_task
from teamrl.config import ConfigError, EndpointConfig, load_config
from teamrl.rollout.common import RolloutClock

TESTS = Path(__file__).resolve().parents[1]
WAIT_S = 120.0  # the most any wait below takes: generous, never a measure of speed

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="the flood drops to another user (uid 65534): needs root"
)


def run_on(endpoint, team, episode, examples=({"x": 0},)):
    """One episode of each example, served by ``endpoint``: their records."""
    env = AppEnv(list(AGENTS), episode)
    batch = list(enumerate(examples))
    return run_episodes(
        team, env, batch, 1, greedy=False, ignore_eos=False, clock=RolloutClock(),
        endpoint=endpoint,
    )  # fmt: skip


def chat_body(agent: str = "alice", text: str = "hi", **extra) -> bytes:
    return json.dumps({"model": agent, "messages": user(text), **extra}).encode()


def head(base_url: str, api_key: str, size: int | None = None) -> tuple[str, int, bytes]:
    """(host, port, the request line and headers of a chat call on ``base_url``); a body of
    ``size`` bytes is declared, or a chunked one."""
    url = urlsplit(base_url)
    length = f"Content-Length: {size}" if size is not None else "Transfer-Encoding: chunked"
    lines = (
        f"POST {url.path}/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {api_key}\r\nContent-Type: application/json\r\n{length}\r\n\r\n"
    )
    return url.hostname, url.port, lines.encode()


def read_reply(sock: socket.socket) -> tuple[int, dict, dict]:
    """(status, headers, JSON body) of the reply on ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection without a reply: {data!r}"
        data += chunk
    top, body = data.split(b"\r\n\r\n", 1)
    status_line, *fields = top.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (f.split(":", 1) for f in fields)}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-reply"
        body += chunk
    return int(status_line.split()[1]), headers, json.loads(body)


def post(base_url: str, api_key: str, body: bytes) -> tuple[int, dict]:
    host, port, lines = head(base_url, api_key, len(body))
    with socket.create_connection((host, port), timeout=WAIT_S) as sock:
        sock.sendall(lines + body)
        status, _, reply = read_reply(sock)
    return status, reply


def closed_by_server(sock: socket.socket) -> bool:
    """Waits (up to WAIT_S) for the server to close ``sock``, reading what it sends."""
    sock.settimeout(WAIT_S)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


# --- (a) a flood from another user ---------------------------------------------------------


@needs_root
def test_a_flood_from_another_user_is_capped_at_once_and_calls_still_go_through(team):
    endpoint = Endpoint(limits=EndpointConfig(max_connections=16, request_timeout=3600.0))
    endpoint.start()
    flood = None
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert soft == hard  # raised while it serves
        flood = Flood(endpoint.host, endpoint.port)
        assert flood.open(24, "idle") == NOBODY
        flood.open(24, "half")
        # 48 connections, a cap of 16: the 32 oldest are closed at once (the deadline, an
        # hour away, closes none), the 16 newest stay open
        assert flood.wait_closed(32, WAIT_S) == 32
        assert flood.closed() == 32
        # the trainer still opens pipes and files
        read, write = os.pipe()
        os.close(read)
        os.close(write)
        with tempfile.TemporaryFile() as f:
            f.write(b"ok")
        # a real request during the flood: a new connection makes an idle one make way
        with openai.OpenAI(
            base_url=endpoint.url + "/v1", api_key=endpoint.api_key, max_retries=0
        ) as client:
            client.models.list()
        assert flood.wait_closed(33, WAIT_S) >= 33

        def episode(client, example):
            reply = client.chat.completions.create(model="alice", messages=user("hi"))
            return float(bool(reply.choices))

        (rec,) = run_on(endpoint, team, episode)
        assert [c.agent for c in rec.calls] == ["alice"] and rec.team_reward == 1.0
    finally:
        if flood is not None:
            flood.stop()
        endpoint.stop()


@needs_root
def test_idle_and_half_sent_connections_close_at_the_deadline_a_waiting_call_does_not(team):
    endpoint = Endpoint(limits=EndpointConfig(request_timeout=2.0)).start()
    flood = Flood(endpoint.host, endpoint.port)
    try:
        flood.open(10, "idle")
        flood.open(10, "half")
        assert flood.wait_closed(20, WAIT_S) == 20
        sent = threading.Event()
        replies = {}

        def episode(example, base_url, api_key):
            if example["x"] == 0:  # a whole request, then a wait for the batch
                host, port, lines = head(base_url, api_key, len(body := chat_body()))
                with socket.create_connection((host, port), timeout=WAIT_S) as sock:
                    sock.sendall(lines + body)
                    sent.set()
                    replies[0] = read_reply(sock)
                return 1.0
            # hold the batch back past a deadline: until a connection opened after the
            # first call's is closed at its own
            assert sent.wait(WAIT_S)
            with socket.create_connection((endpoint.host, endpoint.port)) as idle:
                assert closed_by_server(idle)
            with openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
                replies[1] = client.chat.completions.create(model="bob", messages=user("hi"))
            return 1.0

        recs = run_on(endpoint, team, episode, examples=[{"x": 0}, {"x": 1}])
        status, _, reply = replies[0]
        assert status == 200 and reply["choices"][0]["message"]["role"] == "assistant"
        assert [[c.agent for c in r.calls] for r in recs] == [["alice"], ["bob"]]
    finally:
        flood.stop()
        endpoint.stop()


@needs_root
def test_an_app_run_flooded_mid_run_by_another_user_goes_on(tmp_path):
    """The run of tests/helpers/flood_run.py in a process whose soft open-file limit is 256:
    1,100 connections from uid 65534 at step 3 of 4 would take every descriptor."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2 * 1100:
        pytest.skip(f"a hard open-file limit of {hard} is too low to flood past the cap")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    excess = 1100 - min(EndpointConfig().max_connections, hard // 2)
    script = 'ulimit -Sn 256 && exec "$0" -m helpers.flood_run "$1" "$2"'
    proc = subprocess.run(
        ["/bin/sh", "-c", script, sys.executable, str(tmp_path / "run"), str(excess)],
        cwd=TESTS, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["steps"] == [1, 2, 3, 4]
    assert out["flood_uid"] == NOBODY
    assert out["closed_at_once"] >= excess  # closed without waiting for a deadline
    assert out["soft_serving"] == hard and out["soft_after"] == 256  # raised, then restored
    assert (tmp_path / "run" / "checkpoints" / "step-4").is_dir()


def test_accept_errors_are_logged_once(caplog):
    endpoint = Endpoint().start()
    try:
        loop = endpoint.guard.loop
        error = {
            "message": "socket.accept() out of system resource",
            "exception": OSError(errno.EMFILE, "Too many open files"),
        }
        with caplog.at_level(logging.WARNING):
            for _ in range(5):
                loop.call_soon_threadsafe(loop.call_exception_handler, error)
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(WAIT_S)
        said = [r for r in caplog.records if "accept" in r.getMessage()]
        assert len(said) == 1 and "Too many open files" in said[0].getMessage()
        assert endpoint.guard.accept_errors == 5
    finally:
        endpoint.stop()


# --- (b), (c) what one request may hold ------------------------------------------------------


def test_deep_json_is_400_and_a_body_over_the_limit_is_413_unread(team):
    """The shared endpoint at its defaults: JSON 64 deep, a body of 16 MiB."""
    seen = {}
    most = EndpointConfig().max_body_mb * 2**20

    def episode(example, base_url, api_key):
        deep = 100_000
        seen["deep"] = post(base_url, api_key, nested(chat_body(), deep))
        seen["65"] = post(base_url, api_key, nested(chat_body(), 65 - 1))
        seen["64"] = post(base_url, api_key, nested(chat_body(), 64 - 1))
        # a body declared larger than the limit: answered after a few bytes, then closed
        host, port, lines = head(base_url, api_key, 300 * 2**20)
        with socket.create_connection((host, port), timeout=WAIT_S) as sock:
            sock.sendall(lines + b'{"model": ')
            seen["declared"] = read_reply(sock)
            seen["declared_closed"] = closed_by_server(sock)
        # a chunked body that grows past it: answered at the byte that crosses it
        host, port, lines = head(base_url, api_key)
        with socket.create_connection((host, port), timeout=WAIT_S) as sock:
            sock.sendall(lines)
            piece = b" " * 2**20
            for _ in range(most // len(piece)):
                sock.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
            sock.sendall(b"1\r\n \r\n")
            seen["chunked"] = read_reply(sock)
        with openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            client.chat.completions.create(model="alice", messages=user("hi"))
        return 0.0

    (rec,) = run_on(shared_endpoint(), team, episode)
    assert len(rec.calls) == 2  # the 64-deep call, and the episode goes on after refusals
    for key in ("deep", "65"):
        status, reply = seen[key]
        assert (status, reply["error"]["code"]) == (400, "nested_too_deeply"), (key, seen[key])
        assert "endpoint.max_json_depth" in reply["error"]["message"]
    assert seen["64"][0] == 200, seen["64"]
    status, headers, reply = seen["declared"]
    assert (status, reply["error"]["code"]) == (413, "request_too_large")
    assert "endpoint.max_body_mb=16" in reply["error"]["message"]
    assert headers["connection"] == "close" and seen["declared_closed"]
    status, headers, reply = seen["chunked"]
    assert (status, reply["error"]["code"]) == (413, "request_too_large")


def nested(body: bytes, depth: int) -> bytes:
    """``body`` with a ``metadata`` field nesting lists ``depth`` deep: the whole JSON is then
    ``depth + 1`` deep (the body's own object is a level)."""
    return body[:-1] + b', "metadata": ' + b"[" * depth + b"]" * depth + b"}"


def test_an_endpoints_own_limits_hold(team):
    endpoint = Endpoint(limits=EndpointConfig(max_json_depth=8, max_body_mb=1)).start()
    seen = {}

    def episode(example, base_url, api_key):
        seen[8] = post(base_url, api_key, nested(chat_body(), 8 - 1))
        seen[9] = post(base_url, api_key, nested(chat_body(), 9 - 1))
        seen["big"] = post(base_url, api_key, chat_body(text="x" * 2**20))
        return 0.0

    try:
        run_on(endpoint, team, episode)
    finally:
        endpoint.stop()
    assert seen[8][0] == 200
    assert (seen[9][0], seen[9][1]["error"]["code"]) == (400, "nested_too_deeply")
    assert (seen["big"][0], seen["big"][1]["error"]["code"]) == (413, "request_too_large")


# --- (d) a prompt too long to fit, refused before tokenizing ------------------------------------


class CountingTokenizer:
    """Wraps a tokenizer: keeps the longest text it was asked to read."""

    def __init__(self, inner):
        self.inner, self.longest = inner, 0

    def __call__(self, text, *args, **kwargs):
        self.longest = max(self.longest, len(text))
        return self.inner(text, *args, **kwargs)

    def apply_chat_template(self, messages, *args, **kwargs):
        self.longest = max(self.longest, sum(len(m["content"]) for m in messages))
        return self.inner.apply_chat_template(messages, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_huge_content_is_refused_before_the_tokenizer_reads_it(team):
    engine = team.engine_of("alice")
    real = engine.tokenizer
    counting = engine.tokenizer = CountingTokenizer(real)
    seen = {}

    def episode(client, example):
        create = client.chat.completions.create
        for key, text in (("huge", "word " * 1_000_000), ("long", "word " * 3000)):
            with pytest.raises(openai.BadRequestError) as info:
                create(model="alice", messages=user(text))
            seen[key] = info.value.body
        create(model="alice", messages=user("hi"))
        return 0.0

    try:
        (rec,) = run_on(shared_endpoint(), team, episode)
    finally:
        engine.tokenizer = real
    assert len(rec.calls) == 1 and rec.refused == 2
    huge, long = seen["huge"], seen["long"]
    assert huge["code"] == long["code"] == "context_length_exceeded"
    assert "5,000,000 characters" in huge["message"] and "refused before tokenizing" in huge["message"]  # fmt: skip
    assert "2048" in huge["message"] and "2048" in long["message"]
    # the 5 MB message never reached the tokenizer; the 15 kB one, which might fit by its
    # length, did, and was refused on its token count
    assert 15_000 <= counting.longest < 1_000_000
    assert "tokens and the reply may take" in long["message"]


# --- (e) an episode's calls in one batch ----------------------------------------------------------


def test_calls_past_the_batch_cap_are_refused_429_and_counted(team):
    endpoint = Endpoint(limits=EndpointConfig(max_batch_calls=2)).start()
    refused_three = threading.Event()
    outcomes: list = []

    async def episode(client, example):
        if example["x"] == 0:  # holds the batch until the other episode's calls are in
            await asyncio.to_thread(refused_three.wait, WAIT_S)
            await client.chat.completions.create(model="bob", messages=user("hi"))
            return 0.0

        async def one(i):
            try:
                await client.chat.completions.create(model="alice", messages=user(f"call {i}"))
                outcomes.append("served")
            except openai.APIStatusError as err:
                outcomes.append((err.status_code, err.body["code"], err.body["message"]))
                if sum(1 for o in outcomes if o != "served") == 3:
                    refused_three.set()

        await asyncio.gather(*(one(i) for i in range(5)))
        return 0.0

    try:
        recs = run_on(endpoint, team, episode, examples=[{"x": 0}, {"x": 1}])
    finally:
        endpoint.stop()
    assert outcomes.count("served") == 2
    refusals = [o for o in outcomes if o != "served"]
    assert [(s, c) for s, c, _ in refusals] == [(429, "too_many_calls")] * 3
    assert "endpoint.max_batch_calls" in refusals[0][2]
    assert [len(r.calls) for r in recs] == [1, 2] and [r.refused for r in recs] == [0, 3]


# --- the settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "override, message",
    [
        ("endpoint.request_timeout=0", "endpoint.request_timeout: expected > 0 seconds, got 0.0"),
        ("endpoint.max_connections=0", "endpoint.max_connections: expected >= 1, got 0"),
        ("endpoint.max_body_mb=0", "endpoint.max_body_mb: expected >= 1, got 0"),
        (
            "endpoint.max_json_depth=100000",
            "endpoint.max_json_depth: expected in [1, 512], got 100000",
        ),  # fmt: skip
        ("endpoint.max_batch_calls=-1", "endpoint.max_batch_calls: expected >= 1, got -1"),
        ("endpoint.max_body_mb=lots", "endpoint.max_body_mb: expected an int, got 'lots'"),
    ],
)
def test_a_bad_limit_is_one_line_naming_it(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert str(info.value) == message


def test_a_runs_endpoint_section_reaches_the_endpoint(tmp_path):
    from teamrl.trainer import Trainer

    def episode(client, example):
        client.chat.completions.create(model="alice", messages=user("hi"))
        client.chat.completions.create(model="bob", messages=user("hi"))
        return 0.0

    task = app_task("limits_app", episode, AGENTS, train=[{"x": 0}, {"x": 1}])
    cfg = tiny_cfg("train.max_steps=1", "endpoint.max_json_depth=9", "endpoint.max_batch_calls=3")
    try:
        Trainer(cfg, task=task, run_dir=tmp_path / "run").train()
        limits = shared_endpoint().limits
        assert (limits.max_json_depth, limits.max_batch_calls) == (9, 3)
    finally:
        shared_endpoint(EndpointConfig())  # the defaults again, for the tests after this one
