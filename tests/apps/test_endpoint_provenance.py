"""Which weights answered, with the real ``openai`` client (sync and ``stream=True``) on a tiny
LoRA team: every reply's ``system_fingerprint`` names its agent, the optimizer step of the
weights that sampled it and their hash (recomputed here from the tensors, by the documented
recipe), it moves with an optimizer step of that agent only, samples.jsonl records it, a
sampler copy left unrefreshed fails synchronous training and is measured as staleness in
asynchronous training; and the per-agent share of replies with a valid tool call."""

from __future__ import annotations

import hashlib
import re
import threading

import pytest
import torch
from helpers.apps import AGENTS, run, tiny_cfg, user

from teamrl.algorithms.app import app_metrics
from teamrl.apps import app_task
from teamrl.apps.provenance import StaleWeightsError
from teamrl.config import GenerationConfig
from teamrl.execution.asynchronous import _load, _weights
from teamrl.generation import versions
from teamrl.generation.types import EngineSpec, Generation
from teamrl.run import files as run_files
from teamrl.team.optim import make_optimizer, optimizer_steps
from teamrl.team.policies import Team
from teamrl.trainer import Trainer


def adapter_hash(team: Team, agent: str) -> str:
    """The documented hash, written out again: BLAKE2b (6 bytes) over the agent's LoRA tensors
    in name order, each as ``name:dtype:shape`` and a newline, then its bytes."""
    model = team.engine_of(agent).model
    mine = [(n, p) for n, p in model.named_parameters() if "lora_" in n and f".{agent}." in n]
    assert mine  # the adapter's A and B of every target module
    h = hashlib.blake2b(digest_size=6)
    for name, p in sorted(mine, key=lambda item: item[0]):
        h.update(f"{name}:{str(p.dtype).removeprefix('torch.')}:{list(p.shape)}\n".encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def expected(team: Team, agent: str, step: int) -> str:
    return f"teamrl:{agent}:s{step}:{adapter_hash(team, agent)}"


def trained_team(*extra: str) -> Team:
    """A team of its own (the session's shared one never steps), with its optimizers."""
    team = Team(tiny_cfg(*extra))
    for pol in team.policies.values():
        make_optimizer(pol, team.cfg)
    return team


def optimizer_step(team: Team, agent: str) -> None:
    """One real step of the agent's optimizer, on made-up gradients; nothing else is told."""
    pol = team.policies[agent]
    for p in pol.parameters():
        p.grad = torch.ones_like(p)
    pol.optimizer.step()
    pol.optimizer.zero_grad(set_to_none=True)


def ask_each_twice(seen: list):
    """An episode asking every agent once plainly and once streamed; ``seen`` gets each reply's
    (agent, fingerprint) and each streamed chunk's."""

    def episode(client, example):
        for agent in AGENTS:
            reply = client.chat.completions.create(model=agent, messages=user("hi"))
            seen.append((agent, reply.system_fingerprint))
            stream = client.chat.completions.create(model=agent, messages=user("hi"), stream=True)
            seen.extend((agent, chunk.system_fingerprint) for chunk in stream)
        return 0.0

    return episode


def test_each_reply_names_its_agent_and_moves_with_that_agents_optimizer_step():
    team = trained_team()
    seen: list = []
    (rec,) = run(team, ask_each_twice(seen))
    before = {a: expected(team, a, 0) for a in AGENTS}
    assert before["alice"] != before["bob"]  # two adapters, two hashes
    assert len(seen) > 2 * len(AGENTS)  # the streamed chunks are in
    for agent, fp in seen:
        assert fp == before[agent]
    assert [c.weights.fingerprint for c in rec.calls] == [before[a] for a in AGENTS for _ in "ab"]

    optimizer_step(team, "alice")
    assert optimizer_steps(team.policies["alice"].optimizer) == 1
    seen.clear()
    run(team, ask_each_twice(seen))
    after = {"alice": expected(team, "alice", 1), "bob": before["bob"]}
    assert after["alice"] != before["alice"]  # a new step, and new weights
    assert {fp for a, fp in seen if a == "alice"} == {after["alice"]}
    assert {fp for a, fp in seen if a == "bob"} == {after["bob"]}  # bob's weights never moved


def test_a_sampler_copy_left_unrefreshed_is_an_error_naming_the_steps():
    team = trained_team("generation.sampler_dtype=bfloat16")  # the hf backend samples a copy
    optimizer_step(team, "alice")  # and nobody tells the backend
    calls: list = []

    def episode(client, example):
        calls.append(client.chat.completions.create(model="alice", messages=user("hi")))
        return 0.0

    with pytest.raises(StaleWeightsError) as err:
        run(team, episode)
    assert str(err.value).startswith(
        "agent 'alice' was answered by the weights of optimizer step 0, but its policy 'alice' "
        "is at step 1"
    )
    assert "\n" not in str(err.value) and not calls  # one line, and no reply went out

    (engine,) = team.engines()
    engine.backend.weights_changed("alice")  # the refresh the execution makes after a step
    run(team, episode)
    # the fingerprint names the version the copy took: the live float32 adapter's hash at step 1
    assert calls[0].system_fingerprint == expected(team, "alice", 1)


def writers(seen: list, team_of):
    """The app of test_app_training: two writers; ``seen`` gets each reply's fingerprint and
    the one this test computes from the live weights at that moment."""

    def episode(client, example):
        first = client.chat.completions.create(model="alice", messages=user(example["text"]))
        second = client.chat.completions.create(model="bob", messages=user("and you?"))
        team = team_of()
        for agent, reply in (("alice", first), ("bob", second)):
            step = optimizer_steps(team.policies[agent].optimizer)
            seen.append((reply.system_fingerprint, expected(team, agent, step)))
        return len(set(first.choices[0].message.content)) / 10

    return episode


def app_trainer(tmp_path, seen: list, steps: int, *extra: str) -> Trainer:
    holder: list[Trainer] = []
    rows = [{"text": f"post number {i}"} for i in range(6)]
    task = app_task("fingerprint_app", writers(seen, lambda: holder[0].team), AGENTS, train=rows)
    cfg = tiny_cfg(f"train.max_steps={steps}", "eval.eval_steps=0", *extra)
    holder.append(Trainer(cfg, task=task, run_dir=tmp_path / "run"))
    return holder[0]


def test_samples_jsonl_records_the_weights_each_reply_names(tmp_path):
    seen: list = []
    tr = app_trainer(tmp_path, seen, 2)
    tr.train()
    assert seen and all(got == want for got, want in seen)
    replied = {got for got, _ in seen}
    rows = list(run_files.read_jsonl(tmp_path / "run" / "samples.jsonl"))
    assert {r["step"] for r in rows} == {1, 2}
    by_step: dict = {}
    for r in rows:
        w = r["weights"]
        assert w["agent"] == r["agent"]
        fp = f"teamrl:{w['agent']}:s{w['step']}:{w['hash']}"
        assert fp in replied  # the reply the app got names the weights the sample records
        by_step.setdefault((r["step"], r["agent"]), set()).add(fp)
    for agent in AGENTS:
        (first,) = by_step[1, agent]  # one version of the weights per rollout
        (second,) = by_step[2, agent]
        assert first.startswith(f"teamrl:{agent}:s0:") and first != second
        assert int(second.split(":")[2][1:]) > 0  # the first update's optimizer steps


def test_a_resumed_run_names_the_steps_and_weights_of_an_uninterrupted_one(tmp_path):
    """The step count travels with the checkpoint (the optimizer's state): after a resume the
    replies name the same step and hash as the uninterrupted run's at that point."""

    def second_rollout(name: str, resume: bool) -> set:
        if resume:  # a first run of one step, then a new trainer resumes it
            app_trainer(tmp_path / name, [], 1, "log.save_steps=1").train()
        app_trainer(tmp_path / name, [], 2, "log.save_steps=1").train(resume=resume)
        rows = run_files.read_jsonl(tmp_path / name / "run" / "samples.jsonl")
        return {(r["agent"], r["weights"]["step"], r["weights"]["hash"]) for r in rows if r["step"] == 2}  # fmt: skip

    resumed, straight = second_rollout("cut", True), second_rollout("ref", False)
    assert resumed == straight and len(straight) == len(AGENTS)
    assert all(step > 0 for _, step, _ in straight)


@pytest.mark.parametrize("refreshed", [True, False], ids=["refreshed", "left-stale"])
def test_synchronous_training_with_a_sampler_copy(tmp_path, refreshed):
    seen: list = []
    tr = app_trainer(tmp_path, seen, 2, "generation.sampler_dtype=bfloat16")
    if not refreshed:  # the hostile case: the copy never takes the stepped weights
        for engine in tr.team.engines():
            engine.backend.weights_changed = lambda adapter: None
    tr.train_step()
    steps = optimizer_steps(tr.team.policies["alice"].optimizer)
    assert steps > 0
    if refreshed:
        tr.train_step()
        assert all(got == want for got, want in seen)
        assert any(got.startswith(f"teamrl:alice:s{steps}:") for got, _ in seen)
        return
    stale = f"agent 'alice' was answered by the weights of optimizer step 0, but its policy 'alice' is at step {steps}:"  # fmt: skip
    with pytest.raises(StaleWeightsError, match=re.escape(stale)):
        tr.train_step()


def test_asynchronous_staleness_is_measured_not_raised():
    learner = trained_team()
    sampler = Team(tiny_cfg())  # the generator's copy, as AsyncExecution makes it
    sampler.learner = learner
    _load(sampler, _weights(learner))  # the snapshot of version 0
    published = {a: expected(learner, a, 0) for a in AGENTS}
    optimizer_step(learner, "alice")
    optimizer_step(learner, "alice")  # the learner is two steps on; bob none
    seen: list = []
    records = run(sampler, ask_each_twice(seen))
    for agent, fp in seen:
        assert fp == published[agent]  # the snapshot's step and hash, not the learner's
    assert [c.weights.staleness for c in records[0].calls] == [2, 2, 0, 0]
    m = app_metrics(records, [], AGENTS, 0)
    assert m["app/staleness/alice/mean"] == 2.0 and m["app/staleness/alice/max"] == 2.0
    assert m["app/staleness/bob/mean"] == 0.0 and m["app/staleness/bob/max"] == 0.0

    _load(sampler, _weights(learner))  # the next snapshot: fresh again
    seen.clear()
    records = run(sampler, ask_each_twice(seen))
    assert {fp for a, fp in seen if a == "alice"} == {expected(learner, "alice", 2)}
    assert app_metrics(records, [], AGENTS, 0)["app/staleness/alice/max"] == 0.0


def test_asynchronous_training_logs_staleness_per_agent(tmp_path):
    seen: list = []
    tr = app_trainer(tmp_path, seen, 3, "algorithm.max_staleness=1")
    history = tr.train()
    for agent in AGENTS:
        total = optimizer_steps(tr.team.policies[agent].optimizer)
        for m in history:
            assert 0 <= m[f"app/staleness/{agent}/mean"] <= m[f"app/staleness/{agent}/max"]
            assert m[f"app/staleness/{agent}/max"] <= total
    assert {got.split(":")[1] for got, _ in seen} == set(AGENTS)


def test_vllm_serves_the_version_of_its_last_sync(monkeypatch):
    """The vLLM backend's engine holds its own weights: it serves the version it took at its
    last sync, whatever the live model's is now (a fake engine; vLLM itself needs a GPU or
    its CPU wheel)."""
    import teamrl.generation.vllm as vllm_backend

    class Engine:  # the calls a full-weights sync makes; the weights go nowhere
        def apply_model(self, fn):
            pass

        def reset_prefix_cache(self):
            pass

    monkeypatch.setattr(vllm_backend, "start_engine", lambda kwargs, name: Engine())
    live, steps = torch.nn.Linear(2, 2), [0]
    versions.attach(live, None, lambda: steps[0])
    spec = EngineSpec(live, None, [0], 0, "tiny", "float32", "cpu", [])
    backend = vllm_backend.VLLMBackend(GenerationConfig(backend="vllm"), spec)
    assert backend.served_version(None) == 0  # the start's sync
    steps[0] = 3  # three optimizer steps, and the engine not told
    assert backend.served_version(None) == 0
    backend.weights_changed(None)
    assert backend.served_version(None) == 3


# --- tool calls ---------------------------------------------------------------------------------

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
    },
}
VALID = '<tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call>'
BROKEN = '<tool_call>{"name": "add", "arguments": </tool_call>'


class Scripted:
    """Answers each request with the next script text's tokens and EOS (a tiny random model
    never writes a tool call); records no weights version, so the live one is named."""

    def __init__(self, inner, tokenizer, eos: int, script: list[str]):
        self.inner, self.tok, self.eos, self.script = inner, tokenizer, eos, list(script)
        self.lock = threading.Lock()

    def generate(self, requests, ignore_eos=False):
        out = []
        for r in requests:
            with self.lock:
                text = self.script.pop(0)
            ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.eos]
            out.append([Generation(list(r.prompt_ids), ids, [-1.0] * len(ids), False)])
        return out

    def weights_changed(self, adapter):
        self.inner.weights_changed(adapter)


def test_the_share_of_replies_with_a_valid_tool_call_per_agent(team):
    (engine,) = team.engines()
    real = engine.backend
    # alice: three calls offer tools (valid, broken, valid) and one does not; bob: one, text
    engine.backend = Scripted(
        real, engine.tokenizer, engine.eos_ids[0], [VALID, BROKEN, VALID, "plain", "no call"]
    )

    def episode(client, example):
        for _ in range(3):
            client.chat.completions.create(model="alice", messages=user("add"), tools=[ADD])
        client.chat.completions.create(model="alice", messages=user("talk"))  # offers none
        client.chat.completions.create(model="bob", messages=user("add"), tools=[ADD])
        return 0.0

    try:
        records = run(team, episode)
    finally:
        engine.backend = real
    m = app_metrics(records, [], AGENTS, 0)
    assert round(m["app/tool_calls/alice"], 3) == 0.667  # 2 of the 3 that offered tools
    assert m["app/tool_calls/bob"] == 0.0
    assert m["app/unparsed_tool_calls"] == 1.0  # the broken one, as before


def test_a_responses_reply_names_the_same_weights_in_its_metadata():
    """OpenAI's Response object has no system_fingerprint: the stamp rides in its metadata,
    the same one the chat route gives for the same agent and step, streamed or not."""
    team = trained_team()
    seen: list = []

    def episode(client, example):
        for agent in AGENTS:
            seen.append((agent, client.responses.create(model=agent, input="hi").metadata))
            events = list(client.responses.create(model=agent, input="hi", stream=True))
            # the tiny model's reply runs to its token limit: the stream ends
            # response.incomplete, whose response carries the metadata as completed would
            assert events[-1].type in ("response.completed", "response.incomplete")
            seen.append((agent, events[-1].response.metadata))
        return 0.0

    run(team, episode)
    assert len(seen) == 2 * len(AGENTS)
    for agent, metadata in seen:
        assert metadata == {"system_fingerprint": expected(team, agent, 0)}
