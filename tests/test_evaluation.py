"""pass@k, avg@k and report aggregation, by hand; evaluation episodes; ``teamrl eval``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from teamrl.envs.base import Step
from teamrl.evaluation import evaluate_trainer, markdown_table, pass_at_k, summarise
from teamrl.generation import Generation


@dataclass
class FakeResult:  # the fields of teamrl.sandbox.ExecResult the games read
    stdout: str
    stderr: str
    returncode: int
    timed_out: bool = False
    killed: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def test_pass_at_k_unbiased_estimator_by_hand():
    # n = 4 samples, c = 1 correct: pass@1 = 1/4; pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 2, 3) == 1.0  # n - c < k: some correct one is always drawn
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(2, 1, 3)


def ep(problem, success, ret=0.0, turns=1, comps=None, team=None):
    return {
        "problem": problem,
        "success": success,
        "return": ret,
        "team_return": ret if team is None else team,
        "turns": turns,
        "components": comps or {},
    }


def test_summarise_reports_greedy_pass_and_avg():
    greedy = [ep(0, True, 1.0, 2, {"win": 1.0}), ep(1, False, 0.0, 3, {"win": 0.0})]
    sampled = [ep(0, True), ep(0, False), ep(1, False), ep(1, False)]
    r = summarise(greedy, sampled, [1, 2])
    assert r["greedy/accuracy"] == 0.5
    assert r["greedy/turns"] == 2.5
    assert r["components/win"] == 0.5
    assert r["avg@2"] == pytest.approx(0.25)  # (1/2 + 0/2) / 2
    assert r["pass@1"] == pytest.approx(0.25)
    assert r["pass@2"] == pytest.approx(0.5)  # problem 0 surely, problem 1 never


def test_rewards_only_tasks_have_no_accuracy():
    r = summarise([ep(0, None, 2.0)], [ep(0, None, 1.0)], [1])
    assert "greedy/accuracy" not in r and "pass@1" not in r
    assert r["greedy/reward"] == 2.0 and r["sampled/reward"] == 1.0
    table = markdown_table({"tldr": r})
    assert table.splitlines()[0] == "| metric | tldr |"
    assert "| greedy/reward | 2.000 |" in table


def test_reward_is_the_team_reward_and_return_the_mixed_objective():
    # AT-GRPO with alpha = 1: the committing agent's mixed reward is team + local = 2 * team
    greedy = [ep(0, True, ret=3.0, team=1.5), ep(1, False, ret=-2.0, team=-1.0)]
    sampled = [ep(0, True, ret=1.0, team=0.5), ep(1, False, ret=0.0, team=0.0)]
    r = summarise(greedy, sampled, [1])
    assert r["greedy/reward"] == pytest.approx(0.25) and r["greedy/return"] == 0.5
    assert r["sampled/reward"] == pytest.approx(0.25) and r["sampled/return"] == 0.5


def test_components_average_every_evaluated_episode():
    greedy = [ep(0, True, comps={"win": 1.0})]
    sampled = [ep(0, False, comps={"win": 0.0}), ep(0, False, comps={"win": 0.0})]
    r = summarise(greedy, sampled, [1])
    assert r["components/win"] == pytest.approx(1 / 3)  # not the greedy episode's 1.0
    assert r["episodes"] == 3 and "greedy/components/win" not in r


# --------------------------------------------------------------------------------------
# evaluate_trainer on a scripted team: exact numbers, and no oracle branch selection.


class WinEnv:
    """One agent, one turn: success iff the agent says "win" (component ``win``)."""

    agents = ["solver"]

    def reset(self, example):
        return {"solver": example["question"]}

    def step(self, actions):
        win = actions["solver"] == "win"
        return Step(
            observations={"solver": "done"},
            reward=float(win),
            terminations={"solver": True},
            local_rewards={"solver": float(win)},
            success=win,
            reward_components={"win": float(win)},
        )


class ScriptedTeam:
    """Problem p's greedy answer is ``GREEDY[p]``; its sampled answers come in the order of
    ``SCRIPT[p]``, one per requested sample (whatever the batch they are requested in)."""

    def __init__(self, greedy, script):
        self.greedy = greedy
        self.script = {p: iter(texts) for p, texts in script.items()}
        self.agents = {"solver": SimpleNamespace(temperature=1.0)}
        self.policy_of = {"solver": "solver"}
        self.texts = ["lose", "win"]

    def encode_prompt(self, agent, observation, example):
        return [example["p"]]

    def request(self, agent, ids, n, greedy=False):
        return ids[0], n, greedy

    def generate(self, jobs, ignore_eos=False):
        out = []
        for _, (p, n, greedy) in jobs:
            texts = [self.greedy[p]] * n if greedy else [next(self.script[p]) for _ in range(n)]
            out.append([Generation([p], [self.texts.index(t)], [0.0], False) for t in texts])
        return out

    def decode(self, agent, ids):
        return self.texts[ids[0]]


@pytest.mark.parametrize("algorithm", ["at_grpo", "grpo", "magrpo"])
def test_evaluate_trainer_counts_independent_episodes(algorithm):
    greedy = {0: "lose", 1: "lose", 2: "win"}
    script = {0: ["win", "lose", "lose", "lose"], 1: ["lose"] * 4, 2: ["win"] * 4}  # c = 1, 0, 4
    examples = [{"question": f"q{p}", "answer": "win", "p": p} for p in range(3)]
    trainer = SimpleNamespace(
        cfg=SimpleNamespace(
            seed=0,
            algorithm=SimpleNamespace(name=algorithm, alpha=1.0),
            env=SimpleNamespace(max_turns=1, reward_workers=1),
            team=SimpleNamespace(ignore_eos=False),
            log=SimpleNamespace(progress_bar=False),
            eval=SimpleNamespace(message_ablation=[]),
        ),
        task=SimpleNamespace(name="win", test=examples, make_env=WinEnv),
        team=ScriptedTeam(greedy, script),
    )
    r = evaluate_trainer(trainer, "test", num_samples=4, ks=(1, 2, 4, 8), limit=None)
    assert r["greedy/accuracy"] == pytest.approx(1 / 3)
    # AT-GRPO's tree would keep problem 0's winning branch (success 1); independent episodes
    # count it once in four
    assert r["samples_per_problem"] == 4
    assert r["avg@4"] == pytest.approx(5 / 12)  # (1 + 0 + 4) / 12
    assert r["pass@1"] == pytest.approx(5 / 12)
    assert r["pass@2"] == pytest.approx((0.5 + 0 + 1) / 3)  # 1 - C(3,2)/C(4,2) = 1/2
    assert r["pass@4"] == pytest.approx(2 / 3)
    assert "pass@8" not in r  # k > n is not estimable
    assert r["components/win"] == pytest.approx((1 + 5) / 15)  # greedy and sampled episodes
    assert (r["split"], r["limit"], r["num_samples"], r["ks"]) == ("test", None, 4, [1, 2, 4, 8])


# --------------------------------------------------------------------------------------
# `teamrl eval` on a game task with a success flag, tiny model, fake sandbox runner.


def test_cli_eval_reports_checkpoint_and_untrained_baseline(tmp_path, monkeypatch, capsys):
    import teamrl.tasks.games.episode as games
    from teamrl.cli import main as cli_main
    from teamrl.config import load_config
    from teamrl.trainer import Trainer

    calls = []
    monkeypatch.setattr(
        games, "sandbox_runner", lambda code: calls.append(code) or FakeResult("", "", 1)
    )
    overrides = [
        "model.name_or_path=tiny-llama",
        "team.agents.0.max_completion_length=8",
        "team.agents.1.max_completion_length=8",
        "env.kwargs.n_train=4",
        "env.kwargs.n_eval=2",
        "env.kwargs.n_test=3",
        "env.reward_workers=1",
        "log.progress_bar=false",
        f"log.output_dir={tmp_path}",
    ]
    trainer = Trainer(load_config("plan_path_at_grpo", overrides), run_dir=tmp_path / "run")
    ckpt = trainer.save_checkpoint()  # step-0
    del trainer

    args = ["eval", "plan_path_at_grpo", *overrides, "--checkpoint", str(ckpt)]
    args += ["--num-samples", "2", "--ks", "1,2,4", "--limit", "2"]
    assert cli_main([*args, "--output-dir", str(tmp_path / "rep")]) == 0
    reports = json.loads((tmp_path / "rep" / "eval.json").read_text())
    assert list(reports) == ["plan_path (untrained)", "plan_path (step-0)"]
    for label, row in zip(("untrained", "step-0"), reports.values()):
        assert row["checkpoint"] == label
        assert (row["config"], row["limit"], row["num_samples"], row["ks"]) == (
            "plan_path_at_grpo",
            2,
            2,
            [1, 2, 4],
        )
        assert row["problems"] == 2 and row["samples_per_problem"] == 2
        for key in ("greedy/accuracy", "avg@2", "pass@1", "pass@2"):
            assert 0.0 <= row[key] <= 1.0, key
        assert row["pass@1"] == pytest.approx(row["avg@2"])
        assert "pass@4" not in row
    table = (tmp_path / "rep" / "eval.md").read_text()
    assert "| metric | plan_path (untrained) | plan_path (step-0) |" in table
    assert "| ks | 1,2,4 | 1,2,4 |" in table
    # the rows a reader looks for first; the k it could not estimate is named, on screen too
    assert table.splitlines()[2].startswith("| greedy/accuracy | ")
    note = "note: pass@4 not reported: k exceeds the 2 samples per problem"
    assert note in table and note in capsys.readouterr().out

    assert cli_main([*args, "--no-baseline", "--output-dir", str(tmp_path / "solo")]) == 0
    solo = json.loads((tmp_path / "solo" / "eval.json").read_text())
    assert list(solo) == ["plan_path (step-0)"]


# --------------------------------------------------------------------------------------
# The report as a reader sees it: headline metrics first, intervals, a word on a missing k.


def test_the_report_puts_headline_metrics_first_with_bootstrap_intervals(tmp_path):
    from teamrl.evaluation import bootstrap_ci, report_notes, write_report

    greedy = [ep(p, p < 2, float(p < 2), 2, {"win": float(p < 2)}) for p in range(4)]
    sampled = [ep(p, p == 0, float(p == 0)) for p in range(4) for _ in range(2)]
    r = summarise(greedy, sampled, [1, 2, 4])
    r |= {"split": "test", "limit": None, "num_samples": 2, "ks": [1, 2, 4], "model": "m"}
    # intervals: the library's bootstrap over the per-problem values, which the metric averages
    per_problem = {
        "greedy/accuracy": [1.0, 1.0, 0.0, 0.0],
        "greedy/reward": [1.0, 1.0, 0.0, 0.0],
        "sampled/reward": [1.0, 0.0, 0.0, 0.0],
        "avg@2": [1.0, 0.0, 0.0, 0.0],
        "pass@1": [1.0, 0.0, 0.0, 0.0],
        "pass@2": [1.0, 0.0, 0.0, 0.0],
    }
    assert set(r["ci95"]) == set(per_problem)
    for key, values in per_problem.items():
        assert r[key] == pytest.approx(sum(values) / 4), key
        assert r["ci95"][key] == pytest.approx(list(bootstrap_ci(values, resamples=2000))), key
        lo, hi = r["ci95"][key]
        assert lo <= r[key] <= hi and lo < hi, key
    table = markdown_table({"win": r})
    rows = [line.split(" | ")[0].removeprefix("| ") for line in table.splitlines()[2:]]
    assert rows[:6] == [
        "greedy/accuracy",
        "pass@1",
        "pass@2",
        "avg@2",
        "greedy/reward",
        "sampled/reward",
    ]
    first_meta = rows.index("split")
    assert all(
        not k.startswith(("greedy/", "sampled/", "pass@", "avg@", "components/"))
        for k in rows[first_meta:]
    )
    assert "components/win" in rows[:first_meta] and "ci95" not in rows
    lo, hi = r["ci95"]["greedy/accuracy"]
    assert f"| greedy/accuracy | 0.500 [{lo:.3f}, {hi:.3f}] |" in table
    assert "| split | test |" in table  # metadata: no interval
    # pass@4 with 2 samples per problem: one line says why it is missing
    notes = report_notes({"win": r})
    assert [n for n in notes if "pass@4" in n] == [
        "note: pass@4 not reported: k exceeds the 2 samples per problem "
        "(pass@k needs --num-samples >= k)"
    ]
    assert "pass@4" not in r
    # eval.md holds the same table and notes; eval.json the same order
    jpath, mpath = write_report({"win": r}, tmp_path)
    assert mpath.read_text() == table + "\n\n" + "\n".join(notes) + "\n"
    keys = list(json.loads(jpath.read_text())["win"])
    assert keys[:6] == rows[:6] and keys[-1] == "ci95"
    # enough samples: no note about k; one problem: no interval to resample
    r_ok = summarise(greedy, sampled, [1, 2]) | {"ks": [1, 2]}
    assert not [n for n in report_notes({"win": r_ok}) if "not reported" in n]
    assert "ci95" not in summarise(greedy[:1], sampled[:2], [1])


def test_eval_of_a_run_folder_without_a_checkpoint_names_no_resume(tmp_path, capsys):
    from helpers.cli import one_line_error
    from helpers.runs import tiny_overrides

    from teamrl.config import dump_config, load_config

    run = tmp_path / "run"
    run.mkdir()
    dump_config(load_config(None, tiny_overrides()), run / "config.yaml")
    for argv in (["eval", str(run)], ["export", str(run), str(tmp_path / "out")]):
        line = one_line_error(capsys, *argv)
        assert line == f"teamrl: error: no checkpoint in {run / 'checkpoints'} yet"
        assert "--resume" not in line
