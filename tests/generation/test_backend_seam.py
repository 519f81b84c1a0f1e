"""A fake generation backend plugged into the Team through the ``Backend`` protocol: one MAGRPO
step and one AT-GRPO step run through it, on a tiny model."""

from __future__ import annotations

import pytest
from helpers.runs import tiny_overrides

import teamrl.team.policies as team_mod
from teamrl.config import ConfigError, GenerationConfig, load_config
from teamrl.generation import EngineSpec, Generation, Request, make_backend
from teamrl.trainer import Trainer

TEXTS = ["123", "abc"]  # sample k answers TEXTS[k % 2]: digits score 1, letters 0
LOGP = -0.25  # the fake sampler's log-prob of every token it "samples"


class FakeBackend:
    """Answers sample k of every request with TEXTS[k % 2] then EOS; records what it is told."""

    name = "fake"

    def __init__(self, spec: EngineSpec, events: list):
        self.spec, self.events = spec, events
        tok = spec.tokenizer
        self.ids = [
            tok(t, add_special_tokens=False)["input_ids"] + [spec.eos_ids[0]] for t in TEXTS
        ]

    def generate(self, requests: list[Request], ignore_eos: bool = False):
        self.events.append(("generate", sorted({str(r.adapter) for r in requests})))
        return [
            [
                Generation(
                    list(r.prompt_ids), list(self.ids[k % 2]), [LOGP] * len(self.ids[k % 2]), False
                )
                for k in range(r.n)
            ]
            for r in requests
        ]

    def weights_changed(self, adapter: str | None) -> None:
        self.events.append(("weights_changed", adapter))


def run_step(tmp_path, monkeypatch, policies, **extra):
    events, specs = [], []

    def fake_make_backend(cfg, spec):
        specs.append(spec)
        return FakeBackend(spec, events)

    monkeypatch.setattr(team_mod, "make_backend", fake_make_backend)
    cfg = load_config(None, tiny_overrides(policies, 1, **extra))
    tr = Trainer(cfg, run_dir=tmp_path / "run")
    for name, pol in tr.team.policies.items():  # log each optimizer step in the event stream
        pol.optimizer.register_step_post_hook(
            lambda opt, args, kwargs, _name=name: events.append(("optimizer_step", _name))
        )
    seen = []
    real_update = tr.update_team

    def update_team(work):  # every policy's samples of the step, as the update gets them
        for samples in work.values():
            seen.extend(samples)
        return real_update(work)

    tr.update_team = update_team
    metrics = tr.train_step()
    return tr, events, specs, seen, metrics


def check_samples(samples, backend: FakeBackend):
    assert samples
    for s in samples:
        k = backend.ids.index(s.completion_ids)  # one of the fake's completions, unchanged
        assert s.sampler_logprobs == [LOGP] * len(backend.ids[k])
        assert s.text.endswith(TEXTS[k])
        assert not s.truncated


def test_magrpo_step_through_a_fake_backend(tmp_path, monkeypatch):
    tr, events, specs, seen, m = run_step(tmp_path, monkeypatch, "shared")
    (spec,) = specs  # one engine: one backend, told about the live model
    assert spec.model is tr.team.policies["shared"].model
    assert spec.adapters == [] and spec.dtype == "float32" and spec.model_path
    backend = tr.team.policies["shared"].engine.backend
    check_samples(seen, backend)
    # one generate call per turn (max_turns=1), covering both agents; 4 samples each
    assert [e for e in events if e[0] == "generate"] == [("generate", ["None"])]
    assert len(seen) == 2 * 4
    # groups (problem, slot, node, agent): one example (slot 0), the root node, per agent
    assert len({s.group[0] for s in seen}) == 1
    assert {s.group[1:] for s in seen} == {(0, "root", "alice"), (0, "root", "bob")}
    # aligned joint actions: sample k of both agents answer TEXTS[k % 2] -> team reward 1 or 0
    assert sorted(s.reward for s in seen) == [0.0] * 4 + [1.0] * 4
    assert m["reward/mean"] == pytest.approx(0.5)
    # the full model stepped, then the backend heard of it (adapter None), after the step
    assert events[-2:] == [("optimizer_step", "shared"), ("weights_changed", None)]


def test_at_grpo_step_through_a_fake_backend(tmp_path, monkeypatch):
    extra = {"algorithm.name": "at_grpo", "env.kwargs": "{sequential: true}"}
    tr, events, specs, seen, m = run_step(tmp_path, monkeypatch, "lora", **extra)
    (spec,) = specs  # lora: one engine holding both adapters
    assert spec.adapters == ["alice", "bob"] and spec.lora_r == tr.cfg.model.lora_r
    backend = tr.team.policies["alice"].engine.backend
    check_samples(seen, backend)
    # groups (problem, slot, turn, agent) of K = 4 candidates
    groups: dict = {}
    for s in seen:
        groups.setdefault(s.group, []).append(s)
    problem = seen[0].group[0]
    assert sorted(groups) == [(problem, 0, 0, "alice"), (problem, 0, 0, "bob")]
    assert all(len(v) == 4 for v in groups.values())
    # each stepped adapter is announced to the backend after its own optimizer step
    tail = [e for e in events if e[0] != "generate"]
    assert tail == [
        ("optimizer_step", "alice"),
        ("weights_changed", "alice"),
        ("optimizer_step", "bob"),
        ("weights_changed", "bob"),
    ]
    assert events.index(("optimizer_step", "alice")) > max(
        i for i, e in enumerate(events) if e[0] == "generate"
    )


def test_vllm_backend_without_vllm_is_a_one_line_config_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    with pytest.raises(ConfigError) as err:
        make_backend(GenerationConfig(backend="vllm"), spec=None)
    assert str(err.value) == "generation.backend=vllm needs vLLM: pip install 'teamrl[vllm]'"
