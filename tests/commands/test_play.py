"""``teamrl play RUN_DIR``: a trained run's team plays one episode, printed turn by turn."""

from __future__ import annotations

import ast
import re

import pytest
import torch
from helpers.runs import tiny_overrides

from teamrl.cli import main
from teamrl.commands.play import load_run
from teamrl.config import load_config
from teamrl.tasks.toy import digit_fraction
from teamrl.trainer import Trainer


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One training step of the digits task (two agents, two turns) on tiny-llama: the run
    folder, and each policy's weights as training left them (whatever the checkpoint format)."""
    out = tmp_path_factory.mktemp("play")
    cfg = load_config(
        None,
        tiny_overrides("lora", steps=1, **{"env.max_turns": 2, "log.output_dir": str(out)}),
    )
    trainer = Trainer(cfg)
    trainer.train()
    states = {
        n: {k: v.detach().clone() for k, v in pol.state_dict().items()}
        for n, pol in trainer.team.policies.items()
    }
    return out / "run", states


@pytest.fixture(scope="module")
def run_dir(trained):
    return trained[0]


def blocks(text: str) -> list[tuple[int, str, str, str, float]]:
    """(turn, agent, prompt, reply, reward) of each printed turn."""
    pattern = r"--- turn (\d+) \| (\w+) ---\nprompt:\n(.*?)\nreply[^\n]*:\n(.*?)\nreward: (\S+)"
    return [(int(t), a, p, r, float(w)) for t, a, p, r, w in re.findall(pattern, text, flags=re.S)]


def unindent(text: str) -> str:
    return "\n".join(ln[4:] for ln in text.split("\n"))


def test_play_prints_every_turn_with_its_prompt_reply_and_reward(run_dir, capsys):
    assert main(["play", str(run_dir), "--max-prompt-chars", "0"]) == 0
    out = capsys.readouterr().out
    # digits has no test split: the first eval example, n = 3 + 32
    assert out.splitlines()[0] == "task digits, eval[0], checkpoint step-1, greedy"
    turns = blocks(out)
    assert [(t, a) for t, a, *_ in turns] == [(0, "alice"), (0, "bob"), (1, "alice"), (1, "bob")]
    for turn, _agent, prompt, _reply, _reward in turns:
        assert "Count to 35." in prompt
        assert ("Last team score" in prompt) == (turn == 1)  # the env's feedback, turn 2 on
    for turn in (0, 1):
        # the team reward is the mean digit fraction of the two printed replies ...
        replies = [unindent(r) for t, _, _, r, _ in turns if t == turn]
        replies = [
            ast.literal_eval(r.split(": ", 1)[1][:-1]) if r.startswith("(only") else r
            for r in replies
        ]
        team = sum(digit_fraction(r) for r in replies) / 2
        assert [w for t, *_, w in turns if t == turn] == [pytest.approx(team, abs=1e-4)] * 2
    # ... and turn 1's prompt shows turn 0's score as feedback
    assert f"Last team score: {turns[0][4]:.2f}." in turns[2][2]
    assert "=== outcome ===" in out and "turns: 2" in out
    assert "success: n/a" in out  # digits has no success test


def test_load_run_restores_the_checkpoint_weights(trained):
    run_dir, states = trained
    trainer, name = load_run(run_dir)
    assert name == "step-1"
    for pol_name, pol in trainer.team.policies.items():
        now, saved = pol.state_dict(), states[pol_name]
        assert saved.keys() == now.keys()
        assert all(torch.equal(saved[k], now[k]) for k in saved)
    untrained, name = load_run(run_dir, step=0)
    assert name == "untrained"
    before = untrained.team.policies["alice"].state_dict()
    after = states["alice"]
    assert any(not torch.equal(before[k], after[k]) for k in after)  # the step moved alice


def test_play_with_a_typed_prompt_and_sampling(run_dir, capsys):
    argv = ["play", str(run_dir), "--prompt", "Write 1 2 3.", "--sample", "--split", "train"]
    assert main([*argv, "--example", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "task digits, train[2], checkpoint step-1, sampled"
    turns = blocks(out)
    assert len(turns) == 4
    assert all("Write 1 2 3." in p and "Count to" not in p for t, _, p, *_ in turns if t == 0)


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--step", "7"], "checkpoints/step-7 (checkpoints: step-1)"),
        (["--example", "99"], "--example 99: split 'eval' of task 'digits' has 8 examples"),
        (["--step", "-1"], "--step: expected a checkpoint step >= 0, got -1"),
    ],
)
def test_play_mistakes_are_one_line(run_dir, capsys, extra, expected):
    assert main(["play", str(run_dir), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("teamrl: error: ") and expected in err[0], err


def test_play_needs_a_run_folder(tmp_path, capsys):
    assert main(["play", str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"teamrl: error: {tmp_path}: not a run folder (no config.yaml)"
    )
