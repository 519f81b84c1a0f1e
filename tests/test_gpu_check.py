"""make gpu-check (benchmarks/gpu_check.py): the CPU dry run runs every step and writes every file
the GPU run will write; the checks that judge a step; the random models' tokenizer. No timing is
asserted anywhere."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_check  # noqa: E402


def test_without_cuda_it_prints_one_line_exits_0_and_writes_nothing(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    assert gpu_check.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpu-check: no CUDA device here") and out.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_required_module_that_does_not_import_is_one_line_naming_it(
    monkeypatch, capsys, tmp_path
):
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` raises ImportError
    assert gpu_check.main(["--cpu-dry-run", "--out", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("gpu-check: cannot import peft (") and out.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_cpu_dry_run_runs_every_step_and_writes_the_gpu_runs_files(tmp_path):
    out = tmp_path / "gc"
    assert gpu_check.main(["--cpu-dry-run", "--out", str(out)]) == 0
    steps = ("qwen2.5-0.5b", "qwen2.5-1.5b")
    expected = {"env.json", "summary.json", "summary.md", "install.log", "cuda_tests.log"}
    expected |= {f"generation.{ext}" for ext in ("log", "md", "json")}
    expected |= {f"step_{m}.{ext}" for m in steps for ext in ("log", "md", "json", "steps.jsonl")}
    expected |= {f"async_qwen2.5-0.5b.{ext}" for ext in ("log", "md", "json")}
    assert {p.name for p in out.iterdir()} == expected

    summary = json.loads((out / "summary.json").read_text())
    assert [(s["step"], s["status"]) for s in summary["steps"]] == [
        ("install", "ok"),
        ("cuda-tests", "ok"),
        ("step-qwen2.5-0.5b", "ok"),
        ("step-qwen2.5-1.5b", "ok"),
        ("generation", "ok"),
        ("async-qwen2.5-0.5b", "ok"),
    ]
    env = summary["env"]
    assert env["mode"] == "cpu-dry-run" and env["torch"] == torch.__version__
    assert env["versions"]["transformers"] and env["date_utc"]
    # The CUDA tests ran (and skipped their CUDA cases: this is the CPU).
    assert (
        "test_cuda.py::test_a_cuda_device_that_is_not_there_is_a_one_line_error PASSED"
        in (out / "cuda_tests.log").read_text()
    )

    gen = json.loads((out / "generation.json").read_text())
    cells = {(c["model"], c["batch"], c["new_tokens"], c["sampler"]) for c in gen["cells"]}
    assert cells == {("tiny-qwen2", 2, 4, "hf"), ("tiny-qwen2", 2, 4, "fast")}
    assert all("note" not in c for c in gen["cells"])

    contenders = ("raw", "teamrl shared", "teamrl lora", "teamrl separate")
    for model, micro in zip(steps, (2, 3)):
        table = json.loads((out / f"step_{model}.json").read_text())
        meta = table["meta"]
        assert Path(meta["model"]).name == model
        assert (meta["device"], meta["dtype"]) == ("cpu", "float32")
        assert (meta["prompts_per_step"], meta["micro_batch_size"]) == (2, micro)
        assert meta["budget_s"] > 0 and meta["rounds_done"] == 1
        assert set(table["report"]) == set(contenders)
        assert {n: len(s) for n, s in table["steps"].items()} == dict.fromkeys(contenders, 1)
        # The realistic plan's work at tiny size: 2 prompts x 2 agents x G = 2 rows of 8 prompt
        # tokens (the word tokenizer encodes the drawn words back one id each) + 4 new tokens.
        for name in contenders:
            t = table["throughput"][name]
            assert (t["rows"], t["seq"]) == (8, 12), (name, t)
            assert t["generate_tokens_s"] > 0 and t["update_flops_s"] > 0
            assert t["mfu"] is None  # no known peak on a CPU
            assert table["first_step_s"][name] > 0
        # Every step written as it ended: the warm-up (round -1) and the timed round 0.
        lines = (out / f"step_{model}.steps.jsonl").read_text().splitlines()
        done = sorted((json.loads(ln)["round"], json.loads(ln)["contender"]) for ln in lines)
        assert done == sorted((r, n) for r in (-1, 0) for n in contenders)

    # The asynchronous pair: every round done, both contenders timed, the staleness-1 run
    # trained on batches at most one version old.
    pair = json.loads((out / "async_qwen2.5-0.5b.json").read_text())
    assert pair["rounds_done"] == 1 and set(pair["report"]) == {"sync", "async"}
    assert {t["staleness"] for t in pair["steps"]["sync"]} == {0.0}
    assert all(0.0 <= t["staleness"] <= 1.0 for t in pair["steps"]["async"])

    md = (out / "summary.md").read_text()
    for heading in ("## generation: generation.md", "## step-qwen2.5-1.5b: step_qwen2.5-1.5b.md"):
        assert heading in md
    assert "| step-qwen2.5-0.5b | ok |" in md


def test_the_step_tables_use_the_published_qwen_shapes_and_the_dry_run_only_shrinks_them():
    big = gpu_check.model_config("qwen2.5-1.5b", dry_run=False)
    published = {  # Qwen2.5-1.5B's config.json
        "model_type": "qwen2",
        "hidden_size": 1536,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "intermediate_size": 8960,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    }
    assert {k: big[k] for k in published} == published
    tiny = gpu_check.model_config("qwen2.5-1.5b", dry_run=True)
    assert tiny["model_type"] == "qwen2" and tiny["rope_theta"] == big["rope_theta"]
    assert (tiny["hidden_size"], tiny["vocab_size"]) == (64, 1024)


def test_the_random_models_tokenizer_round_trips_through_a_qwen2_folder(tmp_path):
    """transformers rebuilds a qwen2 folder's tokenizer as byte-level BPE whatever class was
    saved; a word-level tokenizer came back encoding every prompt to no ids at all."""
    from teamrl.team.models import load_tokenizer

    tok = gpu_check.word_tokenizer(300)
    assert len(tok) == 300
    tok.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    loaded = load_tokenizer(str(tmp_path))
    ids = loaded("Hi you").input_ids
    # 3 specials, then the 256 byte symbols sorted: "H" is 3 + (72 - 33) = 42 ('!' is the first
    # printable), i 3 + (105 - 33) = 75, y 91, o 81, u 87; the space maps to a symbol past '~'.
    assert len(ids) == 6 and [ids[i] for i in (0, 1, 3, 4, 5)] == [42, 75, 91, 81, 87]
    assert loaded.decode([299, 298]) == " w299 w298"  # ids past the bytes: one word each
    assert loaded.pad_token_id == 0 and loaded.eos_token_id == 2


def test_a_step_that_exited_0_but_left_work_undone_fails(tmp_path):
    plan = {"generation": gpu_check.DRY_PLAN["generation"], "step": gpu_check.GPU_PLAN["step"]}
    (tmp_path / "cuda_tests.log").write_text("...\n1 passed, 9 skipped in 7.9s\n")
    assert gpu_check.verify("cuda-tests", tmp_path, plan, on_gpu=False) is None
    why = gpu_check.verify("cuda-tests", tmp_path, plan, on_gpu=True)
    assert why == "9 tests skipped on a CUDA machine"

    table = {
        "report": {"raw": {}, "teamrl shared": {}, "teamrl separate": {}},
        "notes": {"teamrl lora": "dropped during the run (not in the tables): worker exited (-9)"},
    }
    (tmp_path / "step_qwen2.5-0.5b.json").write_text(json.dumps(table))
    why = gpu_check.verify("step-qwen2.5-0.5b", tmp_path, plan, on_gpu=True)
    assert why.startswith("no timings for teamrl lora (teamrl lora: dropped during the run")

    # Every contender timed, but the budget stopped the table before its first timed round.
    table = {
        "meta": {"rounds_done": 0},
        "report": dict.fromkeys(["raw", "teamrl shared", "teamrl lora", "teamrl separate"], {}),
        "notes": {"budget": "stopped after 0 of 5 rounds: --budget-s 140"},
    }
    (tmp_path / "step_qwen2.5-0.5b.json").write_text(json.dumps(table))
    why = gpu_check.verify("step-qwen2.5-0.5b", tmp_path, plan, on_gpu=True)
    assert why == "no timed round (stopped after 0 of 5 rounds: --budget-s 140)"
    table["meta"]["rounds_done"] = 2
    (tmp_path / "step_qwen2.5-0.5b.json").write_text(json.dumps(table))
    assert gpu_check.verify("step-qwen2.5-0.5b", tmp_path, plan, on_gpu=True) is None

    cells = [{"sampler": "hf"}, {"sampler": "fast", "note": "failed: OutOfMemoryError: ..."}]
    (tmp_path / "generation.json").write_text(json.dumps({"cells": cells}))
    why = gpu_check.verify("generation", tmp_path, plan, on_gpu=True)
    assert why == "fast: failed: OutOfMemoryError: ..."
    assert gpu_check.verify("step-qwen2.5-1.5b", tmp_path, plan, True).startswith("no readable")

    # The asynchronous pair stopped at its budget after 2 of 3 rounds: written, but not passed.
    plan["async"] = gpu_check.GPU_PLAN["async"]
    pair = {"rounds_done": 2, "report": {"sync": {}, "async": {}}}
    (tmp_path / "async_qwen2.5-0.5b.json").write_text(json.dumps(pair))
    why = gpu_check.verify("async-qwen2.5-0.5b", tmp_path, plan, on_gpu=True)
    assert why == "2 of 3 rounds, contenders ['async', 'sync']"
    pair["rounds_done"] = 3
    (tmp_path / "async_qwen2.5-0.5b.json").write_text(json.dumps(pair))
    assert gpu_check.verify("async-qwen2.5-0.5b", tmp_path, plan, on_gpu=True) is None


def test_a_step_past_its_budget_is_stopped_with_what_it_started(tmp_path):
    log = tmp_path / "slow.log"
    cmd = ["sh", "-c", "sleep 300 & echo $!; wait"]  # the shell's child must end too
    # 3 s: ample for a shell to start its child and print its pid, even on a loaded machine.
    status = gpu_check.run_child(cmd, log, timeout=3, env=dict(os.environ))
    assert status == "timed out after 3 s"
    pid = int(log.read_text().split()[0])
    for _ in range(50):  # SIGTERM reached it; wait (up to 5 s) for it to be gone or a zombie
        stat = Path(f"/proc/{pid}/stat")
        if not stat.exists() or stat.read_text().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the budget's kill did not reach pid {pid}")


def test_time_a_step_leaves_unused_goes_to_the_next_and_no_step_ends_past_the_plan(
    monkeypatch, tmp_path
):
    """The GPU plan's budgets: install 20, CUDA tests 125, step tables 170 and 180, generation
    45 (540 s). Each step's hard limit is the sum of the budgets up to it, so, by hand, with
    install taking 4 s, the CUDA tests 110 s and each step table its whole time limit:"""
    clock = [1000.0]
    monkeypatch.setattr(gpu_check.time, "monotonic", lambda: clock[0])
    took = {"cuda-tests": 110.0, "generation": 30.0}
    given: dict[str, float] = {}

    def install(out, timeout, env):
        given["install"] = timeout
        clock[0] += 4.0
        return "ok"

    def run_child(cmd, log, timeout, env):
        step = log.name.removesuffix(".log").replace("_", "-", 1)  # log_name's inverse
        given[step] = timeout
        if "--budget-s" in cmd:
            given[f"{step} --budget-s"] = float(cmd[cmd.index("--budget-s") + 1])
        clock[0] += took.get(step, timeout)  # a step table uses all of its time
        return "ok"

    monkeypatch.setattr(gpu_check, "install", install)
    monkeypatch.setattr(gpu_check, "run_child", run_child)
    monkeypatch.setattr(gpu_check, "verify", lambda *a: None)
    monkeypatch.setattr(gpu_check, "write_model", lambda *a: None)
    monkeypatch.setattr(gpu_check, "write_summary", lambda *a: None)
    env = {"plan": gpu_check.GPU_PLAN, "mode": "gpu"}
    run = gpu_check.Run(tmp_path, env, {}, total_s=540)
    steps = ["install", "cuda-tests", "step-table", "generation"]
    gpu_check.run_all(run, steps, gpu_check.GPU_PLAN, False, tmp_path)

    assert given["install"] == 20
    assert given["cuda-tests"] == 125 + (20 - 4)  # install's 16 unused seconds carried
    assert given["step-qwen2.5-0.5b"] == 170 + (145 - 114)  # the tests' 31 too: ends at 315
    assert given["step-qwen2.5-0.5b --budget-s"] == 201 - 20  # rounds stop 20 s before
    assert given["step-qwen2.5-1.5b"] == 180  # the first table used its slot: nothing carried
    assert given["generation"] == 45
    assert clock[0] - 1000 == 4 + 110 + 201 + 180 + 30  # 525: within the plan's 540 s
    rows = {r["step"]: r for r in run.results}
    assert rows["cuda-tests"]["budget_s"] == 141 and rows["cuda-tests"]["seconds"] == 110
    assert [r["status"] for r in run.results] == ["ok"] * 5

    # --budget below the plan's sum: the whole run's deadline cuts the last slots.
    clock[0], given = 1000.0, {}
    run = gpu_check.Run(tmp_path, env, {}, total_s=300)
    gpu_check.run_all(
        run, ["install", "cuda-tests", "step-table"], gpu_check.GPU_PLAN, False, tmp_path
    )
    assert given["step-qwen2.5-0.5b"] == 300 - 114  # its slot would end at 315
    assert "step-qwen2.5-1.5b" not in given  # less than 5 s left: not started
    assert run.results[-1]["status"] == "not run (out of time)"
