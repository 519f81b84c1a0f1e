"""Prepacked CPU linears: same products as F.linear, never stale, and only where they apply."""

from __future__ import annotations

import pytest
import torch

from teamrl.config import ConfigError, GenerationConfig, load_config
from teamrl.generation import cpu_prepack
from teamrl.generation.backend import EngineSpec, make_backend
from teamrl.generation.types import Request
from teamrl.team.models import load_model

pytestmark = pytest.mark.skipif(
    not cpu_prepack.available(), reason="this PyTorch build has no oneDNN linear operators"
)


@pytest.fixture(autouse=True)
def pack_every_size(monkeypatch):
    """The tiny test models' weights are below the size worth packing: pack them anyway."""
    monkeypatch.setattr(cpu_prepack, "MIN_PACKED_ELEMENTS", 0)


IDS = torch.tensor([[5, 9, 14, 3, 7], [7, 21, 2, 8, 11]])


def logits(model, packed: bool) -> torch.Tensor:
    with torch.no_grad(), cpu_prepack.prepacked(model, enabled=packed):
        return model(input_ids=IDS).logits


def patched(model) -> list[str]:
    return [n for n, m in model.named_modules() if "forward" in m.__dict__]


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])  # qwen2: biased q/k/v
def test_packed_products_equal_f_linear_and_the_patch_is_undone(name):
    model = load_model(name)
    torch.testing.assert_close(logits(model, True), logits(model, False), atol=1e-4, rtol=1e-4)
    with torch.no_grad(), cpu_prepack.prepacked(model):
        inside = patched(model)
    assert "lm_head" in inside and any(n.endswith("q_proj") for n in inside)
    assert patched(model) == []  # back to nn.Linear.forward


def test_a_stepped_trainable_weight_is_never_served_stale():
    """Fused AdamW steps in place without bumping Tensor._version: trainable weights must be
    repacked at every call, or generation would sample from the old policy."""
    model = load_model("tiny-llama")
    before = logits(model, True)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    model(input_ids=IDS).logits.pow(2).mean().backward()
    versions = [p._version for p in model.parameters()]
    opt.step()
    assert [p._version for p in model.parameters()] == versions  # the trap being tested
    after = logits(model, True)
    assert not torch.allclose(after, before, atol=1e-3)
    torch.testing.assert_close(after, logits(model, False), atol=1e-4, rtol=1e-4)


def test_frozen_weights_are_reused_until_they_change():
    model = load_model("tiny-llama").requires_grad_(False)
    head = model.lm_head
    logits(model, True)
    first = cpu_prepack._PACKED[head][3]
    logits(model, True)
    assert cpu_prepack._PACKED[head][3] is first  # reused: packed once
    with torch.no_grad():
        head.weight.mul_(-1.0)  # in place: the version counter moves
    torch.testing.assert_close(logits(model, True), logits(model, False), atol=1e-4, rtol=1e-4)
    assert cpu_prepack._PACKED[head][3] is not first
    head.weight = torch.nn.Parameter(torch.randn_like(head.weight), requires_grad=False)
    torch.testing.assert_close(logits(model, True), logits(model, False), atol=1e-4, rtol=1e-4)
    cpu_prepack.release(model)
    assert head not in cpu_prepack._PACKED


def test_gradients_flow_inside_the_block_and_lora_factors_are_left_alone():
    from peft import LoraConfig, get_peft_model

    base = load_model("tiny-llama")
    model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with cpu_prepack.prepacked(model):
        assert not any(".lora_" in n for n in patched(model))
        assert any("base_layer" in n for n in patched(model))
        model(input_ids=IDS).logits.sum().backward()  # the packed op has no backward
    grads = [p.grad for n, p in model.named_parameters() if "lora_A" in n]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


def test_only_weights_worth_packing_are_packed(monkeypatch):
    model = load_model("tiny-llama-wide")  # hidden 256, MLP 512: 131,072-entry MLP weights
    monkeypatch.setattr(cpu_prepack, "MIN_PACKED_ELEMENTS", 256 * 512)
    with torch.no_grad(), cpu_prepack.prepacked(model):
        inside = patched(model)
    assert inside and all(
        n.endswith(("gate_proj", "up_proj", "down_proj", "lm_head")) for n in inside
    )
    monkeypatch.undo()  # the default threshold: a 64-wide model has nothing worth packing
    tiny = load_model("tiny-llama")
    with torch.no_grad(), cpu_prepack.prepacked(tiny):
        assert patched(tiny) == []


def test_no_op_where_it_does_not_apply(monkeypatch):
    model = load_model("tiny-llama", dtype="bfloat16")
    assert not cpu_prepack.eligible(model)
    with torch.no_grad(), cpu_prepack.prepacked(model):
        assert patched(model) == []
    fp32 = load_model("tiny-llama")
    monkeypatch.setattr(cpu_prepack, "available", lambda: False)  # a build without oneDNN
    with torch.no_grad(), cpu_prepack.prepacked(fp32):
        assert patched(fp32) == []


def spec(model, dtype="float32") -> EngineSpec:
    return EngineSpec(model, None, [0], 0, "tiny-llama", dtype, "cpu", [])


def test_backend_greedy_tokens_do_not_depend_on_packing():
    model = load_model("tiny-llama")
    reqs = [
        Request([5, 9, 14, 3], n=2, temperature=0.0, max_new_tokens=12),
        Request([7], n=1, temperature=0.0),
    ]
    on = make_backend(GenerationConfig(cpu_prepack="on"), spec(model))
    off = make_backend(GenerationConfig(cpu_prepack="off"), spec(model))
    assert on.prepack and not off.prepack
    a, b = on.generate(reqs, ignore_eos=True), off.generate(reqs, ignore_eos=True)
    assert [[g.completion_ids for g in r] for r in a] == [[g.completion_ids for g in r] for r in b]


def test_config_on_refuses_what_it_cannot_pack_and_reads_yaml_booleans():
    bf16 = load_model("tiny-llama", dtype="bfloat16")
    with pytest.raises(ConfigError, match=r"generation.cpu_prepack=on.*bfloat16"):
        make_backend(GenerationConfig(cpu_prepack="on"), spec(bf16, "bfloat16"))
    assert not make_backend(GenerationConfig(cpu_prepack="auto"), spec(bf16, "bfloat16")).prepack
    # YAML 1.1 reads a bare off/on as a boolean; the field still gets its string.
    base = ["model.name_or_path=tiny-llama", "team.agents=[{name: a}]"]
    assert load_config(None, [*base, "generation.cpu_prepack=off"]).generation.cpu_prepack == "off"
    assert load_config(None, [*base, "generation.fast_decode=on"]).generation.fast_decode == "on"
    with pytest.raises(ConfigError, match="generation.cpu_prepack"):
        load_config(None, [*base, "generation.cpu_prepack=fast"])
