"""End-to-end behaviour on tiny models: learning, LoRA isolation, resume, KL, policies, CLI."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
import torch
from helpers.runs import tiny_overrides

from teamrl.cli import main as cli_main
from teamrl.config import ConfigError, load_config
from teamrl.trainer import Trainer


def make(tmp_path, policies="shared", steps=2, **extra):
    cfg = load_config(None, tiny_overrides(policies, steps, **extra))
    return Trainer(cfg, run_dir=tmp_path / "run")


def test_tiny_magrpo_run_reward_rises(tmp_path):
    tr = make(
        tmp_path,
        steps=30,
        **{"train.prompts_per_step": 2, "algorithm.num_generations": 8, "seed": 1},
    )
    history = tr.train()
    rewards = [m["reward/mean"] for m in history]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert first < 0.15
    assert last > first + 0.3, rewards


def test_sampler_and_trainer_logprobs_agree_and_first_ratio_is_one(tmp_path):
    tr = make(
        tmp_path,
        **{
            "team.agents": "[{name: alice, temperature: 0.7, "
            "max_completion_length: 8}, {name: bob, max_completion_length: 8}]",
            "algorithm.num_iterations": 2,
            "train.learning_rate": 0.5,
        },
    )
    m = tr.train_step()
    # positions, masks and temperature in training match what the sampler did
    assert m["logp_diff/shared"] < 1e-4
    assert m["ratio_dev_first_pass/shared"] == 0.0
    # with a large step, the second pass moves away from the old policy and clipping bites
    assert m["clip_fraction/shared"] > 0.0


def snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("algorithm", ["magrpo", "at_grpo"])
def test_lora_isolation(tmp_path, algorithm):
    extra = {"train.learning_rate": 0.05, "algorithm.name": algorithm}
    if algorithm == "at_grpo":
        extra["env.kwargs"] = "{sequential: true}"
    tr = make(tmp_path, "lora", **extra)
    model = tr.team.policies["alice"].model
    assert tr.team.policies["bob"].model is model  # one base for both agents
    before = snapshot(model)
    result = tr.rollout(tr.data.next(1))
    from teamrl.credit.advantages import compute_advantages

    compute_advantages(result.samples)
    alice = [s for s in result.samples if s.agent == "alice"]
    for i, s in enumerate(alice):  # a learning signal even if the group's rewards were flat
        s.advantage = 1.0 if i % 2 else -1.0
    tr.update(tr.team.policies["alice"], alice)
    after = snapshot(model)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed, "agent A's update changed nothing"
    assert all(".alice." in n for n in changed)  # only A's adapter
    assert not any(".bob." in n for n in changed)  # B untouched
    assert not any("lora_" not in n for n in changed)  # the base never changes


def test_lora_generation_is_one_batched_call_across_adapters(tmp_path, monkeypatch):
    tr = make(tmp_path, "lora")
    from teamrl.generation.hf_backend import HFBackend

    calls = []
    real = HFBackend.generate

    def spy(self, requests, *a, **k):
        calls.append({r.adapter for r in requests})
        return real(self, requests, *a, **k)

    monkeypatch.setattr(HFBackend, "generate", spy)
    tr.rollout(tr.data.next(2))
    assert calls == [{"alice", "bob"}]


def test_resume_equals_uninterrupted(tmp_path):
    extra = {"log.save_steps": 2, "train.prompts_per_step": 2}
    straight = make(tmp_path / "a", steps=4, **extra)
    full = straight.train()

    first = make(tmp_path / "b", steps=2, **extra)
    first.train()
    assert (first.run_dir / "checkpoints" / "step-2" / "trainer_state.json").exists()
    resumed = Trainer(
        load_config(None, tiny_overrides("shared", 4, **extra)), run_dir=first.run_dir
    )
    rest = resumed.train(resume=True)
    assert [m["step"] for m in rest] == [3, 4]
    for a, b in zip(full[2:], rest):
        assert a["reward/mean"] == b["reward/mean"]
        assert a["loss/shared"] == b["loss/shared"]
    pa = straight.team.policies["shared"].state_dict()
    pb = resumed.team.policies["shared"].state_dict()
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    lines = (first.run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(ln)["step"] for ln in lines] == [1, 2, 3, 4]


def test_train_ends_with_one_closing_line_on_stdout(tmp_path, capsys):
    tr = make(tmp_path, steps=1)
    capsys.readouterr()
    tr.train()
    run = tmp_path / "run"
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"trained to step 1 of 1 (1 this call); run folder: {run}; "
        f"last checkpoint: {run / 'checkpoints' / 'step-1'}"
    ]
    assert "trained to step" not in err  # stderr's "teamrl: " lines stay as they were
    more = Trainer(load_config(None, tiny_overrides("shared", 2)), run_dir=run)
    capsys.readouterr()
    more.train(resume=True)
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"trained to step 2 of 2 (1 this call); run folder: {run}; "
        f"last checkpoint: {run / 'checkpoints' / 'step-2'}"
    )


def test_kl_reference_is_loaded_only_with_beta(tmp_path):
    plain = make(tmp_path / "p")
    assert plain.team.policies["shared"].ref_model is None
    tr = make(
        tmp_path / "k",
        **{"algorithm.beta": 0.1, "algorithm.num_iterations": 2, "train.learning_rate": 0.1},
    )
    assert tr.team.policies["shared"].ref_model is not None
    m1 = tr.train_step()
    assert m1["kl/shared"] > 0.0  # second pass: the policy has moved away from the reference
    assert "kl/shared" not in plain.train_step()  # beta == 0: no KL computed, no key logged
    lora = make(tmp_path / "l", "lora", **{"algorithm.beta": 0.1})
    m = lora.train_step()
    assert lora.team.policies["alice"].ref_model is None  # reference = adapters disabled
    assert m["kl/alice"] == pytest.approx(0.0, abs=1e-6)  # LoRA B starts at zero


def test_separate_heterogeneous_team_and_multi_turn_cross(tmp_path):
    tr = make(
        tmp_path,
        "separate",
        **{
            "team.agents": "[{name: alice, model: tiny-llama, max_completion_length: 6}, "
            "{name: bob, model: tiny-qwen2, max_completion_length: 6}]",
            "env.max_turns": 2,
            "algorithm.joint_mode": "cross",
            "algorithm.num_generations": 2,
            "algorithm.discount": 0.5,
        },
    )
    a, b = tr.team.policies["alice"].model, tr.team.policies["bob"].model
    assert type(a).__name__ != type(b).__name__
    m = tr.train_step()
    # cross, G=2, N=2: 4 joint actions at the root, each spawning a child with 4 more
    assert m["groups"] == 2 * (1 + 4)
    assert "reward/turn_1/mean" in m


def test_nan_loss_is_an_error_or_counted(tmp_path, monkeypatch):
    import teamrl.update.policy as update_mod

    real = update_mod.policy_loss

    def nan_loss(*a, **k):
        out = real(*a, **k)
        out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(update_mod, "policy_loss", nan_loss)
    with pytest.raises(FloatingPointError, match="shared"):
        make(tmp_path / "e").train_step()
    tr = make(tmp_path / "s", **{"train.nan_policy": "skip"})
    before = snapshot(tr.team.policies["shared"].model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = tr.train_step()
    assert m["nan_skips"] == 1.0
    after = snapshot(tr.team.policies["shared"].model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    # the LR schedule still follows the trainer step, without torch's out-of-order warning
    assert tr.team.policies["shared"].scheduler.last_epoch == tr.step == 1
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)]


@pytest.mark.parametrize(
    "override, field",
    [
        ("algorithm.num_generationz=4", "algorithm.num_generationz"),
        ("algorithm.num_generations=1", "algorithm.num_generations"),
        ("train.learning_rate=fast", "train.learning_rate"),
        ("algorithm.loss_type=ppo", "algorithm.loss_type"),
        ("team.agents=[{name: a, temperature: hot}]", "team.agents[0].temperature"),
        ("env.max_turns=0", "env.max_turns"),
    ],
)
def test_bad_configs_name_the_field(override, field):
    with pytest.raises(ConfigError) as err:
        load_config(None, tiny_overrides() + [override])
    assert field in str(err.value)


def test_yaml_scientific_floats_and_shipped_names_load():
    cfg = load_config("quickstart", ["train.learning_rate=1e-6", "algorithm.beta=2e-3"])
    assert cfg.train.learning_rate == 1e-6 and cfg.algorithm.beta == 2e-3
    with pytest.raises(ConfigError, match="no such file"):
        load_config("no_such_config")


def test_eval_without_an_eval_split_says_it_uses_training_prompts(tmp_path):
    from teamrl.tasks.registry import make_task

    task = make_task("digits")
    cfg = load_config(None, tiny_overrides(**{"eval.num_examples": 2}))
    held_out = Trainer(cfg, task=task, run_dir=tmp_path / "h").evaluate()
    assert held_out["eval/on_train_split"] == 0.0
    tr = Trainer(cfg, task=dataclasses.replace(task, eval=()), run_dir=tmp_path / "t")
    with pytest.warns(UserWarning, match="'digits' has no eval split.*TRAINING examples"):
        m = tr.evaluate()
    assert m["eval/on_train_split"] == 1.0 and "eval/reward/mean" in m
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        assert tr.evaluate()["eval/on_train_split"] == 1.0
    assert not [w for w in again if "no eval split" in str(w.message)]  # warned once only


def test_agent_names_must_match_the_env(tmp_path):
    with pytest.raises(ConfigError, match="team.agents"):
        make(tmp_path, **{"team.agents": "[{name: carol}, {name: bob}]"})


def test_cli_train_plot_envs(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: cli\n")
    args = [
        "train",
        str(cfg),
        *tiny_overrides(steps=2),
        f"log.output_dir={tmp_path}",
        "eval.eval_steps=1",
        "eval.num_examples=2",
    ]
    assert cli_main(args) == 0
    run = tmp_path / "cli"
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    need = [
        "reward/mean",
        "reward/std",
        "reward/turn_0/mean",
        "reward/agent/alice/mean",
        "loss/shared",
        "clip_fraction/shared",
        "entropy/shared",
        "completion_length/alice",
        "tokens_per_second",
        "time/rollout",
        "time/reward",
        "time/update",
        "eval/reward/mean",
        "memory/rss_gib",
        "memory/peak_rss_gib",
    ]
    for key in need:
        assert key in rows[2], key
    # the kernel's high-water mark holds what is resident now (its counters are per-CPU
    # approximations: within a few pages)
    for r in rows[1:]:  # step 0 is the evaluation before training
        assert r["memory/peak_rss_gib"] >= 0.99 * r["memory/rss_gib"] > 0
    assert "kl/shared" not in rows[2]  # beta == 0: no KL is computed, so none is logged
    assert rows[0]["eval/on_train_split"] == rows[2]["eval/on_train_split"] == 0.0
    assert (run / "config.yaml").exists() and (run / "samples.jsonl").exists()
    assert (run / "checkpoints" / "step-2" / "policies" / "shared" / "optimizer.pt").exists()
    assert not list((run / "checkpoints").glob(".step-*"))  # no half-written checkpoint left
    assert cli_main(["plot", str(run)]) == 0
    assert (run / "learning_curves.png").stat().st_size > 1000
    assert cli_main(["envs"]) == 0
    assert "digits" in capsys.readouterr().out
    assert cli_main(["train", str(cfg), "algorithm.num_generations=1"]) == 2
    assert "algorithm.num_generations" in capsys.readouterr().err


def test_at_grpo_and_grpo_train_on_a_sequential_tiny_task(tmp_path):
    for name in ("at_grpo", "grpo"):
        tr = make(
            tmp_path / name,
            "shared",
            steps=1,
            **{"algorithm.name": name, "env.kwargs": "{sequential: true}", "env.max_turns": 2},
        )
        m = tr.train()[0]
        assert m["groups"] == (4 if name == "at_grpo" else 1)  # (turn, agent) nodes vs problem
        assert "reward/local/alice/mean" in m and "frac_zero_std_groups" in m
        # GRPO's K episodes share a prompt at turn 0: one shared prefill, same log-probs
        assert m["logp_diff/shared"] < 1e-4


def test_cli_eval_report(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run_name: ev\n")
    args = [
        "eval",
        str(cfg),
        *tiny_overrides(),
        f"log.output_dir={tmp_path}",
        "--split",
        "eval",
        "--num-samples",
        "2",
        "--ks",
        "1,2",
        "--limit",
        "3",
        "--output-dir",
        str(tmp_path / "rep"),
    ]
    assert cli_main(args) == 0
    report = json.loads((tmp_path / "rep" / "eval.json").read_text())
    row = report["digits (untrained)"]
    assert row["problems"] == 3 and row["samples_per_problem"] == 2
    assert {"greedy/reward", "greedy/turns", "sampled/reward"} <= set(row)
    assert "| metric | digits (untrained) |" in (tmp_path / "rep" / "eval.md").read_text()


def test_lora_checkpoint_roundtrip(tmp_path):
    tr = make(tmp_path, "lora", steps=1)
    tr.train()
    model = tr.team.policies["alice"].model
    saved = snapshot(model)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.add_(1.0)
    tr.load_checkpoint(tmp_path / "run" / "checkpoints" / "step-1")
    restored = snapshot(model)
    assert all(torch.equal(saved[n], restored[n]) for n in saved)


def test_sgd_optimizer_steps_by_minus_lr_times_the_gradient():
    # train.optim=sgd is plain SGD (no momentum): w <- w - lr * g. Values exact in float32:
    # 1.0 - 0.25 * 0.5 = 0.875 and -2.0 - 0.25 * (-4.0) = -1.0; AdamW's first step would be
    # lr * g / |g| = 0.25 for both entries.
    from types import SimpleNamespace

    from teamrl.team.optim import make_optimizer

    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    pol = SimpleNamespace(
        name="p", agents=["alice", "bob"], parameters=lambda: [w], model=None, adapter=None
    )
    overrides = ["train.optim=sgd", "train.learning_rate=0.25", "train.lr_scheduler_type=constant"]
    make_optimizer(pol, load_config(None, tiny_overrides("shared", 1) + overrides))
    w.grad = torch.tensor([0.5, -4.0])
    pol.optimizer.step()
    assert w.tolist() == [0.875, -1.0]
    assert isinstance(pol.optimizer, torch.optim.SGD)
