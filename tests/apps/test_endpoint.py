"""The endpoint with the real ``openai`` client, sync and async, on loopback, on a tiny team:
routing per agent, batching, the recorded prompt ids and log-probs, every refusal, the key."""

from __future__ import annotations

import threading

import openai
import pytest
import torch
from helpers.apps import AGENTS, run, user

from teamrl.apps.endpoint import Endpoint, shared_endpoint
from teamrl.rollout.common import RewardError
from teamrl.update.losses import collate, token_logprobs


class CountingBackend:
    """Wraps an engine's backend: counts generate calls and keeps each call's requests."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def generate(self, requests, ignore_eos=False):
        self.calls.append(list(requests))
        return self.inner.generate(requests, ignore_eos)

    def weights_changed(self, adapter):
        self.inner.weights_changed(adapter)


@pytest.fixture
def counted(team):
    (engine,) = team.engines()  # lora: one engine for both agents
    real = engine.backend
    engine.backend = CountingBackend(real)
    yield engine.backend
    engine.backend = real


def two_calls(client, example):
    a = client.chat.completions.create(model="alice", messages=user(f"x={example['x']}"))
    b = client.chat.completions.create(model="bob", messages=user(a.choices[0].message.content))
    return 1.0 if b.choices[0].message.content else 0.0


def test_concurrent_calls_make_one_generate_per_barrier_routed_per_agent(team, counted):
    records = run(team, two_calls, examples=[{"x": 0}, {"x": 1}], copies=3)
    # 6 episodes, each alice then bob: two barriers, each one generate of 6 requests
    assert [len(c) for c in counted.calls] == [6, 6]
    assert [r.adapter for r in counted.calls[0]] == ["alice"] * 6  # model names the adapter
    assert [r.adapter for r in counted.calls[1]] == ["bob"] * 6
    for rec in records:
        assert [(c.agent, c.index, c.order) for c in rec.calls] == [
            ("alice", 0, 0),
            ("bob", 0, 1),
        ]
        assert rec.team_reward in (0.0, 1.0)
    # ordered by (episode, call): the batch's prompts are the episodes' in order
    first = [r.prompt_ids for r in counted.calls[0]]
    assert first == [rec.calls[0].prompt_ids for rec in records]


def test_prompt_ids_are_the_chat_template_and_the_reply_carries_the_samplers_logprobs(team):
    messages = [{"role": "system", "content": "Be brief."}, *user("Hello there")]
    replies = []

    def episode(client, example):
        replies.append(
            client.chat.completions.create(model="bob", messages=messages, logprobs=True)
        )
        return 0.0

    (rec,) = run(team, episode)
    tok = team.engine_of("bob").tokenizer
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rec.calls[0].prompt_ids == tok(text, add_special_tokens=False)["input_ids"]
    (reply,) = replies
    gen = rec.calls[0].generation
    assert [t.logprob for t in reply.choices[0].logprobs.content] == gen.logprobs
    assert reply.usage.prompt_tokens == len(rec.calls[0].prompt_ids)
    assert reply.usage.completion_tokens == len(gen.completion_ids)
    assert reply.usage.total_tokens == len(rec.calls[0].prompt_ids) + len(gen.completion_ids)
    assert reply.choices[0].message.content == team.decode("bob", gen.completion_ids)
    assert reply.choices[0].finish_reason == ("length" if gen.truncated else "stop")
    assert reply.model == "bob"


def test_sampler_logprobs_equal_the_trainers_first_pass(team):
    from teamrl.algorithms.app import episode_samples

    records = run(team, two_calls, copies=2)
    samples = [s for rec in records for s in episode_samples(team, rec, "call", 1.0, False)]
    for name in AGENTS:
        pol = team.policies[name]
        mine = [s for s in samples if s.policy == name]
        batch = collate(mine, pol.engine.pad_id)
        pol.activate()
        with torch.no_grad():
            scored, _ = token_logprobs(pol.model, batch)
        mask = batch.completion_mask.bool()
        assert torch.allclose(scored[mask], batch.sampler_logprobs[mask], atol=1e-4)


def test_an_async_episode_and_a_base_url_episode(team):
    async def async_episode(client, example):
        assert isinstance(client, openai.AsyncOpenAI)
        await client.chat.completions.create(model="alice", messages=user("hi"))
        return (0.5, {"alice": 0.25})

    (rec,) = run(team, async_episode)
    assert [c.agent for c in rec.calls] == ["alice"]
    assert (rec.team_reward, rec.local_rewards) == (0.5, {"alice": 0.25})

    def url_episode(example, base_url, api_key):
        assert "/e/" in base_url and base_url.endswith("/v1")
        with openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            models = [m.id for m in client.models.list()]
            client.chat.completions.create(model="bob", messages=user("hi"))
        return float(models == AGENTS)

    (rec,) = run(team, url_episode)
    assert rec.team_reward == 1.0 and [c.agent for c in rec.calls] == ["bob"]


def refusal(call) -> tuple[int, str, str]:
    with pytest.raises(openai.APIStatusError) as info:
        call()
    err = info.value.body
    assert set(err) >= {"message", "type", "code"}, err
    return info.value.status_code, err["code"], err["message"]


def test_every_request_it_cannot_serve_is_an_openai_error(team):
    seen: dict[str, tuple] = {}
    urls = []

    def episode(client, example):
        urls.append(str(client.base_url))
        create = client.chat.completions.create
        ok = dict(model="alice", messages=user("hi"))
        seen["model"] = refusal(lambda: create(model="carol", messages=user("hi")))
        seen["n"] = refusal(lambda: create(**ok, n=2))
        seen["functions"] = refusal(lambda: create(**ok, extra_body={"functions": [{"name": "f"}]}))
        seen["format"] = refusal(lambda: create(**ok, response_format={"type": "json_object"}))
        seen["top"] = refusal(lambda: create(**ok, logprobs=True, top_logprobs=2))
        seen["long"] = refusal(lambda: create(model="alice", messages=user("word " * 3000)))
        create(**ok)  # the episode goes on after its refusals
        return 0.0

    (rec,) = run(team, episode)
    assert len(rec.calls) == 1 and rec.refused == 1  # the long prompt reached the batch
    assert seen["model"][:2] == (404, "model_not_found") and "alice, bob" in seen["model"][2]
    for key in ("n", "functions", "format", "top"):
        assert seen[key][:2] == (400, "unsupported_parameter"), (key, seen[key])
    assert seen["long"][:2] == (400, "context_length_exceeded")
    assert "2048" in seen["long"][2]
    # the episode has ended: a later call on its base URL is refused, not left waiting
    key = shared_endpoint().api_key
    with openai.OpenAI(base_url=urls[0], api_key=key, max_retries=0) as late:
        status, code, _ = refusal(
            lambda: late.chat.completions.create(model="alice", messages=user("hi"))
        )
    assert (status, code) == (410, "episode_ended")
    unknown = urls[0].replace("/e/", "/e/x")
    with openai.OpenAI(base_url=unknown, api_key=key, max_retries=0) as stray:
        status, code, _ = refusal(
            lambda: stray.chat.completions.create(model="alice", messages=user("hi"))
        )
    assert (status, code) == (404, "unknown_episode")


def test_only_the_runs_key_is_accepted_and_only_on_loopback(team):
    endpoint = shared_endpoint()
    assert endpoint.host == "127.0.0.1"
    assert len(endpoint.api_key) > 30 and Endpoint().api_key != endpoint.api_key  # random
    seen = {}

    def episode(client, example):
        url = str(client.base_url)
        with openai.OpenAI(base_url=url, api_key="wrong", max_retries=0) as thief:
            seen["chat"] = refusal(
                lambda: thief.chat.completions.create(model="alice", messages=user("hi"))
            )
            seen["models"] = refusal(lambda: thief.models.list())
        return 0.0

    (rec,) = run(team, episode)
    assert rec.calls == []
    assert seen["chat"][:2] == seen["models"][:2] == (401, "invalid_api_key")


def test_a_failed_episode_names_the_users_frame_and_stops_the_others(team):
    gate = threading.Event()

    def episode(client, example):
        if example["x"] == 1:
            raise KeyError("answer")  # the user's bug
        gate.wait(5)
        client.chat.completions.create(model="alice", messages=user("hi"))
        return 0.0

    with pytest.raises(RewardError) as info:
        run(team, episode, examples=[{"x": 0}, {"x": 1}])
    gate.set()
    msg = str(info.value)
    assert msg.startswith("example 1 (slot 1), episode 0: the app's episode raised KeyError at")
    assert "test_endpoint.py" in msg and "in episode" in msg

    with pytest.raises(RewardError, match=r"team reward the episode returned is 'high'"):
        run(team, lambda client, example: "high")
    with pytest.raises(RewardError, match=r"local rewards for \['carol'\]"):
        run(team, lambda client, example: (1.0, {"carol": 1.0}))


def test_an_episode_hung_in_its_own_code_fails_the_rollout_named(team):
    never = threading.Event()

    def episode(client, example):
        client.chat.completions.create(model="alice", messages=user("hi"))
        if example["x"] == 1:
            never.wait()  # hangs without calling or returning
        return 0.0

    with pytest.raises(RewardError) as info:
        run(team, episode, examples=[{"x": 0}, {"x": 1}], timeout=0.5)
    never.set()
    msg = str(info.value)
    assert msg.startswith("example 1 (slot 1), episode 0: the app's episode raised TimeoutError")
    assert "env.step_timeout" in msg and "[1]" in msg


def test_a_calls_max_tokens_below_the_agents_minimum_lowers_the_minimum(team, counted, monkeypatch):
    # bob may not end before 6 tokens; a call that allows 3 gets 3, and one without a limit
    # gets the agent's minimum: neither is refused, and neither reply holds an early EOS
    monkeypatch.setattr(team.agents["bob"], "min_completion_length", 6)

    def episode(client, example):
        client.chat.completions.create(model="bob", messages=user("hi"), max_tokens=3)
        client.chat.completions.create(model="bob", messages=user("hi again"))
        return 0.0

    (rec,) = run(team, episode)
    (short,), (full,) = counted.calls
    assert (short.max_new_tokens, short.min_new_tokens) == (3, 3)
    assert (
        full.min_new_tokens == 6 and full.max_new_tokens == team.agents["bob"].max_completion_length
    )
    eos = set(team.engine_of("bob").eos_ids)
    first, second = (c.generation.completion_ids for c in rec.calls)
    assert len(first) == 3 and not eos & set(first)
    assert not eos & set(second[:6])
