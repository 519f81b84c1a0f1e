"""An app trained by the Trainer: steps, evaluation, play, export, exact resume, and the
checks that keep app tasks and env algorithms apart."""

from __future__ import annotations

import pytest
import torch
from helpers.apps import tiny_cfg, user

from teamrl.apps import app_task
from teamrl.commands.play import play_episode
from teamrl.config import ConfigError, load_config
from teamrl.run import files as run_files
from teamrl.trainer import Trainer

KEYS = ("step", "reward/mean", "loss/alice", "loss/bob", "completion_length/alice")


def writers(client, example):
    """Two writers, the second reading the first; the team reward counts distinct letters."""
    first = client.chat.completions.create(model="alice", messages=user(example["text"]))
    text = first.choices[0].message.content
    second = client.chat.completions.create(model="bob", messages=user(text))
    both = text + second.choices[0].message.content
    return len(set(both)) / 10, {"bob": float(len(second.choices[0].message.content) > 5)}


def task():
    rows = [{"text": f"post number {i}"} for i in range(6)]
    return app_task("writers_app", writers, ["alice", "bob"], train=rows, eval=rows[:2])


def trainer(tmp_path, name, steps, *extra):
    cfg = tiny_cfg(f"train.max_steps={steps}", "log.save_steps=1", *extra)
    return Trainer(cfg, task=task(), run_dir=tmp_path / name)


def test_an_app_trains_evaluates_plays_and_exports(tmp_path):
    tr = trainer(tmp_path, "run", 1, "eval.num_examples=2")
    m = tr.train_step()
    assert m["turns/mean"] == 2.0 and m["app/dropped_samples"] == 0.0
    assert {"loss/alice", "loss/bob", "reward/local/bob/mean"} <= set(m)
    ev = tr.evaluate()
    assert "eval/reward/mean" in ev and ev["eval/on_train_split"] == 0.0
    episode = play_episode(tr, 0)
    assert [(t.turn, t.agent) for t in episode.turns] == [(0, "alice"), (0, "bob")]
    assert episode.summary["turns"] == 2
    with pytest.raises(ConfigError, match="play it without --prompt"):
        play_episode(tr, 0, prompt="hello")
    out = tr.export(tmp_path / "team")
    assert (out / "team.yaml").is_file()


def test_resume_equals_an_uninterrupted_run(tmp_path):
    ref = trainer(tmp_path, "ref", 2)
    ref.train()
    first = trainer(tmp_path, "cut", 1)
    first.train()
    again = trainer(tmp_path, "cut", 2)
    again.train(resume=True)

    def rows(name):
        path = tmp_path / name / "metrics.jsonl"
        return [{k: r.get(k) for k in KEYS} for r in run_files.read_jsonl(path)]

    assert rows("cut") == rows("ref") and len(rows("ref")) == 2
    for name, pol in ref.team.policies.items():
        mine, theirs = pol.state_dict(), again.team.policies[name].state_dict()
        assert all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_app_tasks_and_env_algorithms_are_kept_apart(tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm.name=magrpo: task 'writers_app' is an app"):
        Trainer(tiny_cfg("algorithm.name=magrpo"), task=task(), run_dir=tmp_path / "a")
    env_cfg = load_config(
        None, ["model.name_or_path=tiny-llama", "env.name=digits", "algorithm.name=app"]
    )
    with pytest.raises(ConfigError, match=r"algorithm.name=app runs an app task"):
        Trainer(env_cfg, run_dir=tmp_path / "b")
    with pytest.raises(ConfigError, match=r"algorithm.critic: 'iac' runs on MAGRPO's joint tree"):
        critic = tiny_cfg("algorithm.critic=iac", "algorithm.scale_rewards=none")
        Trainer(critic, task=task(), run_dir=tmp_path / "c")
    with pytest.raises(ConfigError, match=r"must take 2 positional argument"):
        app_task("bad", lambda client: 0.0, ["alice"], train=[{}])


@pytest.mark.parametrize(
    "loss, groups, extra",
    [
        ("grpo", "episode", ()),
        ("dr_grpo", "joint", ("algorithm.num_iterations=2",)),
        ("bnpo", "call", ("algorithm.beta=0.1", "train.micro_batch_size=2")),
    ],
)
def test_every_grouping_trains_under_other_losses(tmp_path, loss, groups, extra):
    tr = trainer(tmp_path, "run", 1, f"algorithm.loss_type={loss}", f"algorithm.app_groups={groups}", *extra)  # fmt: skip
    before = {k: v.clone() for k, v in tr.team.policies["alice"].state_dict().items()}
    m = tr.train_step()
    assert m["app/dropped_samples"] == 0.0 and "loss/alice" in m
    after = tr.team.policies["alice"].state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # it learned something


def test_an_app_trains_asynchronously(tmp_path):
    """algorithm.max_staleness=1: the generator thread's rollouts run their own episodes on the
    same endpoint while the learner updates; every step trains both agents on whole groups."""
    tr = trainer(tmp_path, "async", 3, "algorithm.max_staleness=1")
    history = tr.train()
    assert [m["step"] for m in history] == [1, 2, 3]
    for m in history:
        assert m["app/dropped_samples"] == 0.0
        assert {"loss/alice", "loss/bob"} <= set(m)
    assert max(m["async/staleness"] for m in history) <= 1
