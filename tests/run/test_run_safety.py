"""Runs that survive: SIGTERM/Ctrl-C mid-run, torn and half-rewritten metrics, a second writer,
a stale lock, orphaned temp checkpoints."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers.runs import tiny_overrides

from teamrl.cli import main as cli_main
from teamrl.config import load_config
from teamrl.run import files as run_files
from teamrl.run.files import RunError, RunLock
from teamrl.run.interrupt import StopRequest
from teamrl.run.logging import RunLogger
from teamrl.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("step", "reward/mean", "loss/shared", "lr/shared", "completion_length/alice")
EXTRA = {"train.prompts_per_step": 2, "log.save_steps": 100}


def child_env() -> dict:
    # one torch thread, as in this process, so the float sums (and the weights) match exactly
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


SLOW_CLI = textwrap.dedent(
    """
    import signal, sys, time, torch
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, not a bg job
    from teamrl.trainer import Trainer
    real = Trainer.train_step
    def slow(self):  # time for the test to send its signal mid-run
        out = real(self)
        time.sleep(0.4)
        return out
    Trainer.train_step = slow
    from teamrl.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def rows(run: Path) -> list[dict]:
    return [{k: r.get(k) for k in KEYS} for r in run_files.read_jsonl(run / "metrics.jsonl")]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_run_checkpoints_and_resume_equals_uninterrupted(tmp_path, sig):
    steps = 5
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: sig\n")
    over = tiny_overrides("shared", steps, **EXTRA) + [f"log.output_dir={tmp_path}"]
    assert cli_main(["train", str(cfg), *over, "--run-dir", str(tmp_path / "ref")]) == 0
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_CLI, "train", str(cfg), *over],
        env=child_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    run = tmp_path / "sig"
    deadline = time.time() + 300
    while not (run / "metrics.jsonl").exists() or not (run / "metrics.jsonl").read_text():
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
        time.sleep(0.05)
    proc.send_signal(sig)
    err = proc.communicate(timeout=300)[1]
    assert proc.returncode == 128 + sig, err
    done = len(rows(run))
    assert 1 <= done < steps
    last = err.strip().splitlines()[-1]
    ckpt = run / "checkpoints" / f"step-{done}"
    assert last == (
        f"teamrl: interrupted at step {done}; checkpoint written to {ckpt}; "
        f"resume with: teamrl train {run} --resume"
    )
    # the printed command works when pasted: no config, no overrides, the run folder alone
    command = shlex.split(last.split("resume with: ", 1)[1])
    assert command[0] == "teamrl" and cli_main(command[1:]) == 0
    assert rows(run) == rows(tmp_path / "ref")  # the metrics of every step, bit for bit
    assert weights(run, steps) == weights(tmp_path / "ref", steps)


def weights(run: Path, step: int) -> dict:
    from safetensors.torch import load_file

    path = run / "checkpoints" / f"step-{step}" / "policies" / "shared" / "model.safetensors"
    return {k: v.tolist() for k, v in load_file(str(path)).items()}


def test_a_second_signal_aborts_at_once():
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        with StopRequest() as stop:
            os.kill(os.getpid(), signal.SIGINT)
            assert stop.signum == signal.SIGINT  # the first only asks for a stop
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job ignores Ctrl-C
        with StopRequest():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_save_steps_defaults_to_periodic():
    from teamrl.config import LogConfig

    assert LogConfig().save_steps == 50 and LogConfig().save_total_limit == 2


def test_torn_last_line_is_repaired_with_a_warning(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "r": 0.5}\n{"step": 2, "r": 0.25}\n{"step": 3, "r": 0.1')
    logger = RunLogger(tmp_path)
    with pytest.warns(UserWarning, match=r"metrics.jsonl line 3 is incomplete"):
        logger.truncate_after(2)
    assert path.read_text() == '{"step": 1, "r": 0.5}\n{"step": 2, "r": 0.25}\n'
    logger.log({"step": 3, "r": 0.75})
    assert [r["step"] for r in run_files.read_jsonl(path)] == [1, 2, 3]


def test_a_kill_during_the_rewrite_never_loses_lines(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    before = "".join(json.dumps({"step": i, "r": i / 10}) + "\n" for i in range(1, 16))
    path.write_text(before)

    def dies_half_way(f, text):
        f.write(text[: len(text) // 2])
        f.flush()
        raise KeyboardInterrupt  # as a kill would stop it, half the new file written

    monkeypatch.setattr(run_files, "write_all", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        RunLogger(tmp_path).truncate_after(10)
    assert path.read_text() == before  # steps 1-15 all there
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]  # no temp left


def test_resume_with_a_torn_metrics_line(tmp_path):
    over = tiny_overrides("shared", 1, **EXTRA)
    tr = Trainer(load_config(None, over), run_dir=tmp_path / "r")
    tr.train()
    with (tr.run_dir / "metrics.jsonl").open("a") as f:
        f.write('{"step": 2, "reward/me')  # a disk-full during the next step's line
    again = Trainer(load_config(None, tiny_overrides("shared", 2, **EXTRA)), run_dir=tr.run_dir)
    with pytest.warns(UserWarning, match="metrics.jsonl line 2 is incomplete"):
        again.train(resume=True)
    assert [r["step"] for r in rows(tr.run_dir)] == [1, 2]


def test_a_second_trainer_is_refused_naming_the_holder(tmp_path, capsys):
    run = tmp_path / "locked"
    with RunLock(run):
        tr = Trainer(load_config(None, tiny_overrides("shared", 1)), run_dir=run)
        with pytest.raises(RunError) as err:
            tr.train()
        msg = str(err.value)
        assert f"pid {os.getpid()} on host {os.uname().nodename}, since " in msg
        assert "\n" not in msg
        cfg = tmp_path / "c.yaml"
        cfg.write_text("run_name: locked\n")
        args = ["train", str(cfg), *tiny_overrides(steps=1), f"log.output_dir={tmp_path}"]
        assert cli_main(args) == 2  # before the model loads
        assert f"{run} is in use by another trainer (pid {os.getpid()}" in capsys.readouterr().err
    assert not tr.run_dir.joinpath("metrics.jsonl").exists()  # the refused trainer wrote nothing


def test_a_stale_lock_from_a_dead_process_is_taken_over(tmp_path):
    run = tmp_path / "stale"
    code = f"from teamrl.run.files import RunLock; RunLock({str(run)!r}).acquire(); import os; os.kill(os.getpid(), 9)"
    subprocess.run([sys.executable, "-c", code], env=child_env(), timeout=120)
    dead = json.loads((run / ".lock").read_text())["pid"]
    assert dead != os.getpid()
    with RunLock(run):  # the kernel dropped the dead process's flock
        assert json.loads((run / ".lock").read_text())["pid"] == os.getpid()


def test_orphaned_temp_checkpoints_are_removed_at_start(tmp_path, capsys):
    tr = Trainer(load_config(None, tiny_overrides("shared", 1, **EXTRA)), run_dir=tmp_path / "o")
    orphan = tr.run_dir / "checkpoints" / ".step-7-abc123"
    orphan.mkdir(parents=True)
    (orphan / "rng.pt").write_bytes(b"half")
    tr.train()
    assert not orphan.exists()
    assert f"removed {orphan}, a checkpoint left half-written" in capsys.readouterr().err


# --- issue 20, item 5: what --resume finds ----------------------------------------------------


def trained_run(tmp_path, steps: int, **extra) -> tuple[list[str], Path]:
    """A finished shared-policy run through the CLI; (its CLI arguments, its folder)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: r\n")
    run = tmp_path / "r"
    args = ["train", str(cfg), *tiny_overrides("shared", steps, **{**EXTRA, **extra})]
    assert cli_main([*args, "--run-dir", str(run)]) == 0
    return args, run


def only_line(err: str, start: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith(start)]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("kind", ["empty", "without config.yaml", "without trainer_state.json"])
def test_an_empty_or_partial_newest_checkpoint_is_skipped_in_one_line(tmp_path, capsys, kind):
    args, run = trained_run(tmp_path, 2, **{"log.save_steps": 1, "log.save_total_limit": 5})
    ckpts = run / "checkpoints"
    bad = ckpts / "step-8"  # newer than the intact step-2, and past train.max_steps=3 below
    if kind == "empty":
        bad.mkdir()
    else:  # a copy of an intact checkpoint cut short: one of the files every one holds missing
        shutil.copytree(ckpts / "step-2", bad)
        (bad / kind.split()[1]).unlink()
    capsys.readouterr()
    resumed = [a.replace("train.max_steps=2", "train.max_steps=3") for a in args]
    assert cli_main([*resumed, "--run-dir", str(run), "--resume"]) == 0
    line = only_line(capsys.readouterr().err, "teamrl: checkpoint")
    assert line == (
        f"teamrl: checkpoint step-8 is {kind}; moved it aside to incomplete-step-8: using "
        "step-2, the newest intact"
    )
    assert [r["step"] for r in rows(run)] == [1, 2, 3]  # step 3 trained on from step-2
    assert sorted(p.name for p in ckpts.iterdir()) == [
        "incomplete-step-8", "step-1", "step-2", "step-3"
    ]  # fmt: skip


def test_eval_and_play_skip_an_empty_checkpoint_and_an_explicit_one_is_one_line(tmp_path, capsys):
    from teamrl.run import checkpoints

    _, run = trained_run(tmp_path, 1)
    (run / "checkpoints" / "step-5").mkdir()
    capsys.readouterr()
    assert checkpoints.resume_checkpoint(run, move_aside=False).name == "step-1"
    line = only_line(capsys.readouterr().err, "teamrl:")
    assert line == "teamrl: checkpoint step-5 is empty: using step-1, the newest intact"
    assert (run / "checkpoints" / "step-5").is_dir()  # eval and export move nothing
    assert checkpoints.latest_checkpoint(run).name == "step-1"  # what `teamrl play` loads
    with pytest.raises(RunError) as err:
        checkpoints.resume_checkpoint(run, step=5, move_aside=False)
    assert str(err.value) == (
        f"--step 5: {run / 'checkpoints' / 'step-5'} is empty (checkpoints: step-1)"
    )


def test_resume_before_the_first_checkpoint_starts_from_step_0(tmp_path, capsys):
    args, run = trained_run(tmp_path, 2)
    finished = rows(run)
    # killed after logging steps 1 and 2, before its first checkpoint (save_steps=100)
    shutil.rmtree(run / "checkpoints")
    assert [r["step"] for r in finished] == [1, 2]
    capsys.readouterr()
    assert cli_main([*args, "--run-dir", str(run), "--resume"]) == 0
    line = only_line(capsys.readouterr().err, "teamrl:")
    assert line == (
        f"teamrl: --resume: no checkpoint in {run / 'checkpoints'} yet: starting from step 0; "
        "clearing the metrics of the steps it lost"
    )
    assert rows(run) == finished  # steps 1 and 2 once each, as the uninterrupted run logged them
    samples = [r["step"] for r in run_files.read_jsonl(run / "samples.jsonl")]
    assert samples == sorted(samples) and set(samples) == {1, 2}
    assert (run / "checkpoints" / "step-2").is_dir()


def test_resume_of_a_folder_with_nothing_in_it_starts_from_step_0(tmp_path, capsys):
    run = tmp_path / "new"
    tr = Trainer(load_config(None, tiny_overrides("shared", 1, **EXTRA)), run_dir=run)
    capsys.readouterr()
    assert [m["step"] for m in tr.train(resume=True)] == [1]
    assert capsys.readouterr().err.strip() == (
        f"teamrl: --resume: no checkpoint in {run / 'checkpoints'} yet: starting from step 0"
    )
