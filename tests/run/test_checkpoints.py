"""Checkpoints: standard weight formats, the manifest and six kinds of corruption, a full disk,
the base-model fingerprint, export to a team folder loaded with plain PEFT/transformers, and
``teamrl eval RUN_DIR``."""

from __future__ import annotations

import errno
import json
import shutil
import warnings

import pytest
import torch
import yaml
from helpers.runs import tiny_overrides

from teamrl.cli import main as cli_main
from teamrl.config import load_config
from teamrl.run import checkpoints
from teamrl.run.files import RunError
from teamrl.trainer import Trainer


def lora_run(tmp_path, steps=2, **extra):
    over = {"log.save_steps": 1, "log.save_total_limit": "null", "train.learning_rate": 0.05}
    cfg = load_config(None, tiny_overrides("lora", steps, **{**over, **extra}))
    tr = Trainer(cfg, run_dir=tmp_path / "run")
    tr.train()
    return tr


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return lora_run(tmp_path_factory.mktemp("lora"))


def test_checkpoint_holds_standard_formats_and_a_manifest(trained):
    ckpt = trained.run_dir / "checkpoints" / "step-2"
    alice = ckpt / "policies" / "alice"
    for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json"):
        assert (alice / name).is_file(), name
    assert {"optimizer.pt", "scheduler.pt"} <= {p.name for p in alice.iterdir()}
    manifest = json.loads((ckpt / "manifest.json").read_text())["files"]
    assert "policies/bob/adapter_model.safetensors" in manifest and "rng.pt" in manifest
    entry = manifest["trainer_state.json"]
    assert entry["size"] == (ckpt / "trainer_state.json").stat().st_size
    import hashlib

    assert entry["sha256"] == hashlib.sha256((ckpt / "trainer_state.json").read_bytes()).hexdigest()
    base = json.loads((ckpt / "base_model.json").read_text())
    assert base["alice"]["name"] == "tiny-llama" and len(base["alice"]["fingerprint"]) == 16
    assert checkpoints.verify_checkpoint(ckpt) is None


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_middle(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


CORRUPTIONS = {
    "truncated weights": ("policies/alice/adapter_model.safetensors", _truncate, "bytes"),
    "bad JSON": ("trainer_state.json", lambda p: p.write_text("{bad"), "bytes"),
    "zip error": ("policies/bob/optimizer.pt", _flip_middle, "sha256"),
    "missing file": ("rng.pt", lambda p: p.unlink(), "missing"),
    "hash mismatch": ("policies/alice/adapter_model.safetensors", _flip_middle, "sha256"),
    "bad manifest": ("manifest.json", lambda p: p.write_text("not json"), "unreadable"),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_corrupt_latest_checkpoint_falls_back_with_a_warning_naming_the_file(
    trained, tmp_path, kind
):
    run = tmp_path / "run"
    shutil.copytree(trained.run_dir, run)
    rel, corrupt, why = CORRUPTIONS[kind]
    corrupt(run / "checkpoints" / "step-2" / rel)
    with pytest.warns(UserWarning, match="step-2 is corrupt") as caught:
        ckpt = checkpoints.resume_checkpoint(run)
    message = str(caught[0].message)
    assert rel.split("/")[-1] in message and why in message, message
    assert ckpt.name == "step-1"
    assert (run / "checkpoints" / "corrupt-step-2").is_dir()  # kept for inspection
    assert not (run / "checkpoints" / "step-2").exists()


def test_resume_from_a_corrupt_latest_uses_the_intact_one_and_no_intact_is_one_line(
    trained, tmp_path
):
    run = tmp_path / "run"
    shutil.copytree(trained.run_dir, run)
    _truncate(run / "checkpoints" / "step-2" / "policies" / "bob" / "adapter_model.safetensors")
    cfg = load_config(None, tiny_overrides("lora", 2, **{"log.save_total_limit": "null"}))
    tr = Trainer(cfg, run_dir=run)
    with pytest.warns(UserWarning, match="adapter_model.safetensors"):
        rest = tr.train(resume=True)
    assert [m["step"] for m in rest] == [2]  # step 2 redone from step-1
    assert checkpoints.verify_checkpoint(run / "checkpoints" / "step-2") is None
    for ckpt in ("step-1", "step-2"):
        (run / "checkpoints" / ckpt / "rng.pt").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RunError, match=r"no intact checkpoint in .*rng.pt: missing") as err:
            checkpoints.resume_checkpoint(run)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError(
            "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing "
            "file data/0: file write failed"
        ),
    ],
)
def test_disk_full_names_the_disk_and_keeps_the_previous_checkpoint(
    trained, tmp_path, monkeypatch, error
):
    run = tmp_path / "run"
    shutil.copytree(trained.run_dir, run)
    real = checkpoints.save_policy

    def fill_the_disk(pol, folder, **kw):
        real(pol, folder, **kw)  # some files land in the temp folder, then the disk is full
        raise error

    monkeypatch.setattr(checkpoints, "save_policy", fill_the_disk)
    trained.step = 3
    try:
        with pytest.raises(RunError) as err:
            checkpoints.save_checkpoint(run, trained.cfg, trained.team, {"step": 3})
    finally:
        trained.step = 2
    msg = str(err.value)
    assert msg.startswith("disk full while writing checkpoint") and "\n" not in msg
    assert str(run / "checkpoints") in msg and " free in " in msg
    assert "previous checkpoint step-2 is intact" in msg
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["step-1", "step-2"]  # no temp folder, no step-3
    assert checkpoints.verify_checkpoint(run / "checkpoints" / "step-2") is None


def test_a_different_base_or_lora_targets_are_refused_with_one_line(trained, tmp_path):
    ckpt = trained.run_dir / "checkpoints" / "step-2"
    other = Trainer(
        load_config(None, tiny_overrides("lora", 2, **{"model.name_or_path": "tiny-qwen2"})),
        run_dir=tmp_path / "q",
    )
    with pytest.raises(RunError) as err:
        other.load_checkpoint(ckpt)
    msg = str(err.value)
    assert "base model 'tiny-llama'" in msg and "loads 'tiny-qwen2'" in msg and "\n" not in msg
    fewer = Trainer(
        load_config(
            None, tiny_overrides("lora", 2, **{"model.lora_target_modules": "[q_proj, v_proj]"})
        ),
        run_dir=tmp_path / "t",
    )
    with pytest.raises(RunError, match=r"model.lora_target_modules=\['q_proj', 'k_proj'"):
        fewer.load_checkpoint(ckpt)


def _logprobs(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def test_export_loads_with_plain_peft_and_matches_the_trainers_logprobs(trained, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "team"
    assert cli_main(["export", str(trained.run_dir), str(out), "--step", "2"]) == 0
    team = yaml.safe_load((out / "team.yaml").read_text())
    assert [(a["name"], a["weights"], a["format"]) for a in team["agents"]] == [
        ("alice", "alice/", "peft_adapter"),
        ("bob", "bob/", "peft_adapter"),
    ]
    assert team["agents"][0]["system"] == trained.team.systems["alice"]
    assert team["agents"][1]["sampling"]["max_new_tokens"] == 8
    assert team["agents"][1]["sampling"]["min_new_tokens"] == 0
    assert not list(out.rglob("optimizer.pt"))
    tok = AutoTokenizer.from_pretrained(out / "alice")
    ids = tok("The team adds 3 and 4.", add_special_tokens=False)["input_ids"]
    model = trained.team.policies["alice"].model
    for agent in ("alice", "bob"):
        cfg = json.loads((out / agent / "adapter_config.json").read_text())
        base = AutoModelForCausalLM.from_pretrained(cfg["base_model_name_or_path"])
        plain = PeftModel.from_pretrained(base, out / agent).eval()
        trained.team.policies[agent].activate()
        mine = _logprobs(model, ids)
        assert torch.allclose(_logprobs(plain, ids), mine, atol=1e-5)
        with model.disable_adapter():  # the adapter matters: the base alone differs
            assert not torch.allclose(_logprobs(model, ids), mine, atol=1e-4)
    # Trainer.export writes the same flat folders (it used to nest exported/alice/alice/)
    trained.export(tmp_path / "direct")
    assert (tmp_path / "direct" / "alice" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "direct" / "alice" / "alice").exists()


def test_full_model_export_and_offline_push_is_one_line(tmp_path, capsys):
    cfg = load_config(None, tiny_overrides("shared", 1, **{"train.learning_rate": 0.05}))
    tr = Trainer(cfg, run_dir=tmp_path / "run")
    tr.train()
    from transformers import AutoModelForCausalLM

    out = tmp_path / "team"
    rc = cli_main(["export", str(tr.run_dir), str(out), "--push-to-hub", "someone/team"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("teamrl: error: --push-to-hub someone/team: upload failed")
    assert "\n" not in err
    plain = AutoModelForCausalLM.from_pretrained(out / "shared").eval()
    ids = [5, 17, 3, 42, 8, 9]
    assert torch.allclose(
        _logprobs(plain, ids), _logprobs(tr.team.policies["shared"].model, ids), atol=1e-5
    )
    assert yaml.safe_load((out / "team.yaml").read_text())["agents"][1]["weights"] == "shared/"


def test_eval_from_a_run_folder_reads_its_config_and_checkpoint(trained, tmp_path, capsys):
    rep = tmp_path / "rep"
    args = ["eval", str(trained.run_dir), "--step", "1", "--split", "eval", "--limit", "2"]
    args += ["--num-samples", "1", "--ks", "1", "--no-baseline", "--output-dir", str(rep)]
    assert cli_main(args) == 0
    report = json.loads((rep / "eval.json").read_text())
    assert list(report) == ["digits (step-1)"]
    assert report["digits (step-1)"]["problems"] == 2
    assert cli_main(["eval", str(trained.run_dir), "--step", "7"]) == 2
    assert "--step 7: no" in capsys.readouterr().err


def test_exported_adapter_names_a_base_others_can_load_or_says_it_is_local(
    trained, tmp_path, caplog
):
    from teamrl.run.export import write_team_folder
    from teamrl.team.models import resolve

    def adapter_base(out, agent="alice"):
        return json.loads((out / agent / "adapter_config.json").read_text())[
            "base_model_name_or_path"
        ]

    # the builtin tiny-llama is generated on this machine: PEFT's folder stays, and one line
    # per adapter says that whoever loads it elsewhere needs that base
    cache = resolve("tiny-llama")
    with caplog.at_level("WARNING", logger="teamrl.run.export"):
        assert cli_main(["export", str(trained.run_dir), str(tmp_path / "tiny")]) == 0
    assert adapter_base(tmp_path / "tiny") == cache
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all(cache in m and "'tiny-llama'" in m for m in lines)
    assert not any("\n" in m for m in lines)

    # Other bases, by the checkpoint's base record (no SmolLM2 trains in this test).
    ckpt = tmp_path / "step-2"
    shutil.copytree(trained.run_dir / "checkpoints" / "step-2", ckpt)
    saved = json.loads((ckpt / "policies" / "bob" / "adapter_config.json").read_text())
    local = str(tmp_path / "my-base")
    cases = {  # base name: (adapter's base_model_name_or_path, lines logged)
        "smollm2-135m": ("HuggingFaceTB/SmolLM2-135M-Instruct", 0),  # the builtin's hub id
        local: (cache, 2),  # a user's local folder: kept, and said
        "someone/their-base": (cache, 0),  # a hub id: what PEFT recorded is kept
    }
    for i, (base, (want, n_lines)) in enumerate(cases.items()):
        record = json.loads((ckpt / "base_model.json").read_text())
        (ckpt / "base_model.json").write_text(
            json.dumps({p: {**r, "name": base} for p, r in record.items()})
        )
        caplog.clear()
        out = tmp_path / f"out-{i}"
        write_team_folder(out, trained.cfg, trained.team.systems, checkpoint=ckpt)
        got = json.loads((out / "bob" / "adapter_config.json").read_text())
        assert got == {**saved, "base_model_name_or_path": want}, base  # nothing else changes
        assert len(caplog.records) == n_lines, base
        assert all(local in r.getMessage() for r in caplog.records)


def test_eval_shows_progress_per_chunk_of_problems_and_the_same_numbers_without(
    trained, monkeypatch
):
    from teamrl import evaluation

    seen = []

    class Bar:  # records what the tqdm bar is told
        def __init__(self, total, desc, enabled):
            seen.append((total, desc, enabled))

        def update(self, n):
            seen.append(n)

        def close(self):
            seen.append("closed")

    monkeypatch.setattr(evaluation, "progress_bar", Bar)
    shown = evaluation.evaluate_trainer(trained, "train", 1, (1,), limit=12, progress=True)
    # 12 problems in rollouts of max(EVAL_MIN_CHUNK = 8, ceil(12 / 10) = 2) = 8 problems: greedy
    # rollouts of 8 and 4 episodes, then 8 and 4 problems x 1 sample; 12 x (1 + 1) = 24 in all
    assert evaluation.EVAL_MIN_CHUNK == 8
    assert seen == [(24, "eval train", True), 8, 4, 8, 4, "closed"]
    seen.clear()
    quiet = evaluation.evaluate_trainer(trained, "train", 1, (1,), limit=12)
    assert seen[0] == (24, "eval train", False)  # log.progress_bar=false in this run's config
    assert quiet == shown  # the bar changes nothing it reports
