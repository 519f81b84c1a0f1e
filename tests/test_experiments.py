"""The experiment runner, its tables, the grouping option and the Plan-Path shaping ordering.

The runner is exercised end to end at a tiny size: one step, one seed, tiny-llama, 3x3
single-agent Plan-Path (no sandbox), two test boards.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest
from helpers.runs import tiny_writers

from teamrl.config import ConfigError, load_config
from teamrl.credit.advantages import compute_advantages
from teamrl.sample import Sample

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "experiments" / "plan_path_ablation.py"


def _ablation():
    spec = importlib.util.spec_from_file_location("plan_path_ablation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_condition_loads_with_the_prefills_it_documents():
    ablation = _ablation()
    # the defaults are the setting docs/results.md reports
    args = ablation.parser().parse_args([])
    assert (args.size, args.steps, args.k, args.seeds) == (3, 6, 4, [0, 1, 2])
    for name, spec in ablation.CONDITIONS.items():
        task, algo, policies = spec or ("plan_path", "at_grpo", "shared")
        cfg = load_config(None, ablation.overrides(task, algo, policies, 0, args))
        agents = {a.name: a for a in cfg.team.agents}
        assert (cfg.env.name, cfg.algorithm.name, cfg.team.policies) == (task, algo, policies)
        if task.endswith("_single"):
            assert list(agents) == ["solver"] and agents["solver"].response_prefix == "#### ["
        else:
            assert list(agents) == ["tool", "plan"], name
            # the newline survives the YAML round trip of the override
            assert agents["tool"].response_prefix == "```python\nprint(["
            assert agents["plan"].response_prefix == "#### ["
        assert cfg.env.kwargs["size"] == 3 and cfg.model.use_peft


# --- the tables --------------------------------------------------------------------------------


def test_every_table_condition_builds_a_valid_config():
    from experiments.runner import run_overrides
    from experiments.tables import TABLES

    assert {
        "plan_path_main",
        "plan_path_grouping",
        "plan_path_swap",
        "tldr_magrpo",
        "math_arith",
    } <= set(TABLES)
    for table in TABLES.values():
        for cond in table.conditions:
            cfg = load_config(table.config, run_overrides(table, cond, 0, Path("runs")))
            assert cfg.seed == 0, (table.name, cond.name)
            if cond.from_run:  # a trained condition of this table, or TABLE:CONDITION
                other, _, name = cond.from_run.rpartition(":")
                source = TABLES[other] if other else table
                (twin,) = [c for c in source.conditions if c.name == name]
                assert twin.train and not twin.from_run, (table.name, cond.name)
    grouping = TABLES["plan_path_grouping"]
    got = {
        c.name: load_config(None, [*grouping.base, *c.overrides]).algorithm.group_by
        for c in grouping.conditions
    }
    assert got == {
        "problem_only": [],
        "agent_only": ["agent"],
        "turn_only": ["turn"],
        "agent_and_turn": ["turn", "agent"],
    }


def test_tldr_tables_test_split_is_held_out_and_large_enough():
    from experiments.runner import check_held_out
    from teamrl.tasks.registry import make_task

    for name in ("tldr_heldout", "tldr_one_writer"):
        task = make_task(name)
        assert len(task.test) >= 32 and len(task.train) == 64
        check_held_out(task, len(task.test))  # raises on any overlap


def test_one_writer_splits_its_answer_into_the_two_parts():
    from experiments.tasks import one_writer_reward, split_parts

    assert split_parts("Short one.\nDETAILED: Long one.") == ("Short one.", "Long one.")
    assert split_parts("no marker") == ("no marker", "")
    total, comps = one_writer_reward({"writer": "no marker"}, {"text": "x"})
    assert total == 0.0 and set(comps) == {"structure", "length_ratio", "unique_words", "style"}


def test_swap_routes_each_role_to_its_partners_policy():
    from experiments.runner import swapped

    lora = {"tool": "tool", "plan": "plan", "critic": "critic"}
    assert swapped(lora, {"tool": "plan", "plan": "tool"}) == {
        "tool": "plan",
        "plan": "tool",
        "critic": "critic",
    }
    with pytest.raises(SystemExit, match="unknown agents"):
        swapped(lora, {"tool": "coder"})


# --- the grouping option ----------------------------------------------------------------------


def _samples() -> list[Sample]:
    # one problem, two turns, agents tool and plan, K = 2: rewards by (turn, agent)
    rewards = {(0, "tool"): [1, 3], (0, "plan"): [0, 0], (1, "tool"): [5, 7], (1, "plan"): [2, 6]}
    out = []
    for (turn, agent), rs in rewards.items():
        for r in rs:
            s = Sample(agent, "shared", turn, (0, 0, turn, agent), [1], [2], [0.0])
            s.reward = s.return_ = float(r)
            out.append(s)
    return out


@pytest.mark.parametrize(
    ("group_by", "advantages"),
    [
        # problem only: mean of all eight rewards = 3
        ([], [-2, 0, -3, -3, 2, 4, -1, 3]),
        # agent only: tool mean (1+3+5+7)/4 = 4, plan mean (0+0+2+6)/4 = 2
        (["agent"], [-3, -1, -2, -2, 1, 3, 0, 4]),
        # turn only: turn 0 mean (1+3+0+0)/4 = 1, turn 1 mean (5+7+2+6)/4 = 5
        (["turn"], [0, 2, -1, -1, 0, 2, -3, 1]),
        # agent and turn (the paper's): each pair's own mean
        (["turn", "agent"], [-1, 1, 0, 0, -1, 1, -2, 2]),
        (None, [-1, 1, 0, 0, -1, 1, -2, 2]),
    ],
)
def test_group_by_regroups_at_grpo_samples(group_by, advantages):
    from teamrl.algorithms.at_grpo import regroup

    samples = _samples()
    regroup(samples, group_by)
    compute_advantages(samples, baseline="mean", scale_rewards="none")
    assert [s.advantage for s in samples] == pytest.approx(advantages)


def test_group_by_rejects_unknown_keys():
    with pytest.raises(ConfigError, match="algorithm.group_by"):
        load_config(None, ["algorithm.group_by=[problem]"])


# --- Plan-Path shaping ------------------------------------------------------------------------

BOARD = "P . #\n. # .\n. . G"  # shortest path D D R R (d = 4)


def _reward(rewards: dict, text: str) -> float:
    from teamrl.tasks.games.plan_path import PlanPathState, plan_path_single_task

    env = plan_path_single_task(size=3, n_train=1, n_eval=1, n_test=1, rewards=rewards)
    env = env.make_env()
    env.reset({"seed": 0, "size": 3})
    env.state = PlanPathState.from_text(BOARD, env.rewards)
    return env.step({"solver": text}).reward


def test_proposed_shaping_orders_path_progress_nothing_garbage():
    from teamrl.tasks.games.plan_path import PROPOSED_REWARDS

    shortest = _reward(PROPOSED_REWARDS, "#### ['D', 'D', 'R', 'R']")
    partial = _reward(PROPOSED_REWARDS, "#### ['D', 'D']")
    nothing = _reward(PROPOSED_REWARDS, "#### []")
    garbage = _reward(PROPOSED_REWARDS, "#### [jump, jump]")
    no_list = _reward(PROPOSED_REWARDS, "no idea")
    # by hand: 4 steps -0.04, shaping 1 * (4 - 0), win +1, optimal +0.5
    assert shortest == pytest.approx(5.46)
    assert partial == pytest.approx(-0.02 + 2.0)  # two steps closer
    assert nothing == -1.0  # a list with no move is no action: never a free answer (issue 22)
    assert garbage == -1.0  # not a well-formed move list: the no-action case (issue 11)
    assert no_list == -1.0
    assert shortest > partial > nothing == garbage == no_list
    # a detour still wins but loses the optimal bonus: 6 steps, shaping 4, win 1
    assert _reward(PROPOSED_REWARDS, "#### ['D', 'U', 'D', 'D', 'R', 'R']") == pytest.approx(4.94)


def test_paper_gamma_pays_invalid_moves_far_from_the_goal():
    from teamrl.tasks.games.plan_path import PAPER_REWARDS

    # an invalid U at d = 4: -0.01 - 0.09 + 1 * (4 - 0.99 * 4) = -0.06 (the bias gamma < 1 adds)
    assert _reward(PAPER_REWARDS, "#### ['U']") == pytest.approx(-0.06)
    # the default constants are unchanged: -0.01 - 0.1 and no shaping for staying put
    assert _reward({}, "#### ['U']") == pytest.approx(-0.11)


# --- aggregation ------------------------------------------------------------------------------


def _table(metrics=("greedy/accuracy",)):
    from experiments.tables import Condition, Table

    return Table(
        name="toy",
        description="tiny",
        config=None,
        base=(
            "model.name_or_path=tiny-llama",
            "env.name=plan_path_single",
            "env.kwargs={size: 3, n_train: 8, n_eval: 2, n_test: 2}",
            "env.max_turns=1",
            "team.agents=[{name: solver, max_completion_length: 4}]",
            "algorithm.name=grpo",
            "algorithm.num_generations=2",
            "train.max_steps=1",
            "eval.eval_steps=0",
            "log.progress_bar=false",
        ),
        conditions=(
            Condition("trained"),
            Condition("untrained", train=False),
            Condition("reused", from_run="trained"),  # evaluates trained's final checkpoint
        ),
        splits={"train": "seeds 0..7", "validation": "eval range", "test": "test range"},
        test_problems=2,
        metrics=metrics,
        sample_outputs=1,
    )


def test_aggregation_mean_std_and_bootstrap_interval_by_hand():
    from experiments.runner import aggregate, bootstrap_ci, markdown

    table = _table(("greedy/reward",))
    vals = [1.0, 2.0, 6.0]
    records = [
        {"condition": "trained", "seed": i, "test": {"greedy/reward": v}, "wall_seconds": 60}
        for i, v in enumerate(vals)
    ]
    agg = aggregate(table, records)
    s = agg["trained"]["greedy/reward"]
    assert s["mean"] == pytest.approx(3.0)  # (1 + 2 + 6) / 3
    # sample std: sqrt(((1-3)^2 + (2-3)^2 + (6-3)^2) / 2) = sqrt(7)
    assert s["std"] == pytest.approx(7**0.5)
    # With 3 seeds a resample is all-min (or all-max) with probability 1/27 = 3.7 % > 2.5 %,
    # so the percentile interval is exactly the data range.
    assert s["ci95"] == (1.0, 6.0)
    wide = [0.1, 0.4, 0.2, 0.9, 0.5, 0.3, 0.8, 0.6]
    lo, hi = bootstrap_ci(wide)
    assert 0.1 < lo < statistics.mean(wide) < hi < 0.9  # inside the data range, around the mean
    assert (lo, hi) == bootstrap_ci(wide)  # deterministic under the seed
    assert bootstrap_ci(wide, seed=1) != (lo, hi)  # and the seed is used
    assert bootstrap_ci([2.0, 2.0]) == (2.0, 2.0)
    assert agg["trained"]["minutes"] == pytest.approx(3.0) and "untrained" not in agg
    assert "| trained | 3 | 3.000 ± 2.646 [" in markdown(table, agg)
    assert statistics.mean(vals) == s["mean"]


def test_per_seed_report_counts_rises_against_the_baseline_by_hand():
    import dataclasses

    from experiments.runner import per_seed

    table = dataclasses.replace(
        _table(("greedy/reward",)), extra={"baseline": "untrained", "min_rise": 0.3}
    )
    rows = [("untrained", 0, 1.0), ("trained", 0, 1.5), ("trained", 1, 1.2), ("trained", 2, 0.9)]
    records = [{"condition": c, "seed": k, "test": {"greedy/reward": v}} for c, k, v in rows]
    text = per_seed(table, records)
    assert "| trained | 1.500 | 1.200 | 0.900 |" in text
    assert "| untrained | 1.000 | - | - |" in text
    # changes against the untrained 1.0: +0.5 (>= 0.3), +0.2 (a rise, but < 0.3), -0.1 (a fall)
    assert "- trained: +0.500, +0.200, -0.100; rose by >= 0.3 in 1 of 3, fell in 1" in text
    # no baseline declared: the per-seed values only
    assert "Change against" not in per_seed(_table(("greedy/reward",)), records)


def test_the_table_says_which_runs_warned_by_hand():
    from experiments.runner import warnings_line

    said = "every completion of agent 'b' was cut at max_completion_length=8 for 3 steps"
    records = [
        {"condition": "trained", "seed": 1, "warnings": [{"step": 3, "warnings": [said]}]},
        {"condition": "trained", "seed": 0, "warnings": []},
        {"condition": "untrained", "seed": 0},  # a record from before the runner kept them
    ]
    assert warnings_line(records) == (
        "Training warnings: 1 of 2 runs warned (1 records older than the runner's warning "
        f"log):\n- trained seed 1, step 3: {said}"
    )
    assert warnings_line(records[1:2]) == "Training warnings: 0 of 1 runs warned."


def test_runner_writes_a_record_skips_it_on_rerun_and_plots(tmp_path):
    from experiments.runner import record_path, report, run_table

    table = _table(("greedy/accuracy", "greedy/reward"))
    out, runs = tmp_path / "records", tmp_path / "runs"
    logs: list[str] = []
    records = run_table(
        table, [0], out_dir=out, runs_dir=runs, conditions=["trained", "reused"], log=logs.append
    )
    path = record_path(out, "trained", 0)
    assert path.exists() and len(records) == 2
    reused = json.loads(record_path(out, "reused", 0).read_text())
    assert reused["from_run"] == "trained" and len(reused["curve"]) == 1
    rec = json.loads(path.read_text())
    assert rec["condition"] == "trained" and rec["seed"] == 0 and rec["trained"]
    assert len(rec["curve"]) == 1 and "reward/mean" in rec["curve"][0]
    assert rec["warnings"] == []  # what the run's watch said while training (nothing here)
    assert rec["test"]["problems"] == 2 and 0.0 <= rec["test"]["greedy/accuracy"] <= 1.0
    assert rec["config"]["seed"] == 0 and rec["config"]["train"]["max_steps"] == 1
    for key in ("date", "machine", "wall_seconds", "git_commit", "splits", "split_sizes"):
        assert rec[key], key
    assert rec["split_sizes"] == {"train": 8, "eval": 2, "test": 2}
    # one test output before and after training, with the agent's text and its reward
    for key in ("outputs_before", "outputs_after"):
        (row,) = rec[key]
        assert row["problem"] == 0 and set(row["texts"]) == {"solver@turn0"}
        assert isinstance(row["reward"], float)

    # a rerun skips the finished record (it is not rewritten)
    mtime = path.stat().st_mtime_ns
    run_table(table, [0], out_dir=out, runs_dir=runs, conditions=["trained"], log=logs.append)
    assert path.stat().st_mtime_ns == mtime and logs[-1].startswith("skip trained seed 0")

    md, pngs = report(table, out, "cmd")
    assert "| trained | 1 |" in md.read_text()
    assert pngs and all(p.exists() and p.stat().st_size > 0 for p in pngs)

    # a dry run validates the remaining condition and runs nothing
    run_table(table, [0], out_dir=out, runs_dir=runs, dry_run=True, log=logs.append)
    assert "would run untrained seed 0" in logs[-2] and "skip reused seed 0" in logs[-1]
    assert not record_path(out, "untrained", 0).exists()


def test_a_run_folder_of_another_config_is_never_continued(tmp_path):
    import dataclasses

    from experiments.runner import record_path, run_table

    table = _table()
    out, runs = tmp_path / "records", tmp_path / "runs"
    run_table(table, [0], out_dir=out, runs_dir=runs, conditions=["trained"], log=print)
    record_path(out, "trained", 0).unlink()  # as if the record were lost, the folder kept
    changed = dataclasses.replace(table, base=(*table.base, "train.learning_rate=0.5"))
    with pytest.raises(SystemExit, match=r"train\.learning_rate differ"):
        run_table(changed, [0], out_dir=out, runs_dir=runs, conditions=["trained"], log=print)
    # the same config continues (here: its last checkpoint is the final step)
    (rec,) = run_table(table, [0], out_dir=out, runs_dir=runs, conditions=["trained"], log=print)
    assert rec["condition"] == "trained"


def test_another_tables_run_is_evaluated_only_under_the_same_config(tmp_path, monkeypatch):
    # the swap table evaluates the main table's per-role LoRA runs: TABLE:CONDITION reuses a
    # run of another table (same seed), and only one trained under this condition's config
    import dataclasses

    from experiments import tables
    from experiments.runner import record_path, run_table
    from experiments.tables import Condition

    main_table = _table()
    monkeypatch.setitem(tables.TABLES, "toy", main_table)
    out, runs = tmp_path / "records", tmp_path / "runs"
    run_table(main_table, [0], out_dir=out, runs_dir=runs, conditions=["trained"], log=print)
    other = dataclasses.replace(
        main_table, name="toy_swap", conditions=(Condition("reused", from_run="toy:trained"),)
    )
    (rec,) = run_table(other, [0], out_dir=tmp_path / "swap", runs_dir=runs, log=print)
    assert rec["from_run"] == "toy:trained" and len(rec["curve"]) == 1  # the main run's curve
    assert not (runs / "toy_swap__reused__seed0").exists()  # nothing was trained
    changed = dataclasses.replace(other, base=(*other.base, "train.learning_rate=0.5"))
    with pytest.raises(SystemExit, match=r"train\.learning_rate differ"):
        run_table(changed, [0], out_dir=tmp_path / "changed", runs_dir=runs, log=print)
    missing = dataclasses.replace(
        other, conditions=(Condition("reused", from_run="nowhere:trained"),)
    )
    with pytest.raises(SystemExit, match="no table 'nowhere'"):
        run_table(missing, [0], out_dir=tmp_path / "missing", runs_dir=runs, log=print)
    assert not record_path(tmp_path / "changed", "reused", 0).exists()


def test_tuning_evaluates_on_validation_and_keeps_its_records_apart(tmp_path, monkeypatch):
    from experiments import runner
    from experiments.run_table import main

    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    table = _table()
    tune = ("train.learning_rate=0.5",)
    out = runner.default_out(table, "eval", tune)
    assert out == tmp_path / "results" / "toy" / "validation" / "train.learning_rate-0.5"
    assert runner.default_out(table) == tmp_path / "results" / "toy"
    (rec,) = runner.run_table(
        table, [0], runs_dir=tmp_path / "runs", conditions=["trained"], split="eval", tune=tune
    )
    assert rec["split"] == "eval" and rec["tune"] == list(tune)
    assert rec["config"]["train"]["learning_rate"] == 0.5  # the tuning override won
    assert rec["config"]["run_name"].endswith("__tune-train.learning_rate-0.5")
    assert rec["test"]["split"] == "eval" and rec["test"]["problems"] == 2
    assert not (tmp_path / "results" / "toy" / "trained__seed0.json").exists()
    md, _ = runner.report(table, out)
    assert "Evaluated on the eval split: 2 problems" in md.read_text()
    assert "Tuning overrides: `train.learning_rate=0.5`" in md.read_text()
    # the command line refuses to tune on the test split, and a malformed override
    for argv in (
        ["plan_path_main", "--tune", "seed=1", "--split", "test"],
        ["plan_path_main", "--tune", "seed"],
    ):
        with pytest.raises(SystemExit):
            main(argv)


def test_plan_path_tables_use_the_setting_the_docs_name():
    # docs/results.md: the main table and its ablations use teamrl's constants (no rewards
    # override), the tool library, unscaled group advantages, and the library call's prefill
    # with a newline stop for every two-agent condition (the one agent has no sandbox)
    from experiments.tables import LIBRARY_PREFIX, TABLES
    from teamrl.config import load_config
    from teamrl.tasks.games.plan_path import PROPOSED_REWARDS

    for name in ("plan_path_main", "plan_path_grouping", "plan_path_swap"):
        table = TABLES[name]
        for cond in table.conditions:
            cfg = load_config(table.config, [*table.base, *cond.overrides])
            kw = cfg.env.kwargs
            assert "rewards" not in kw and kw["tool_library"] is True and kw["size"] == 3
            assert cfg.algorithm.scale_rewards == "none", (name, cond.name)
            agents = {a.name: a for a in cfg.team.agents}
            if "tool" in agents:
                assert agents["tool"].response_prefix == LIBRARY_PREFIX
                assert agents["tool"].stop == ["\n"], (name, cond.name)
    # the ladder: every Plan-Path rung of a ladder uses that ladder's constants
    for name, rewards in (
        ("plan_path_ladder", {}),
        ("plan_path_ladder_proposed", PROPOSED_REWARDS),
    ):
        table = TABLES[name]
        rungs = [c for c in table.conditions if not c.name.startswith("bandit")]
        assert len(rungs) == 8
        for cond in rungs:
            cfg = load_config(table.config, [*table.base, *cond.overrides])
            assert cfg.env.kwargs["rewards"] == rewards, (name, cond.name)


# Own-part rewards (the independent learners' condition), on hand-made texts under the TLDR
# thresholds: c1 = 8 distinct 4-letter words (39 chars); c2 = 15 distinct 4-letter words, one of
# them shared with c1, and "however" (82 chars, 16 distinct words). chars 82/39 = 2.10 and
# unique 16/8 = 2.0 are on both bands' tops (1.0 and 0.5); "however" is 1 transition category
# (T = 0.4); Jaccard 1/23 > the cap 0.03, so the overlap score is 1.
_C1 = "qzaa qzbb qzcc qzdd qzee qzff qzgg qzhh"
_C2 = "qzaa " + " ".join(f"xj{a}{b}" for a, b in zip("kkkkkmmmmmvvvv", "abcdeabcdeabcd"))
_C2 += " however"


def test_own_part_rewards_by_hand():
    from experiments.tasks import own_part_rewards
    from teamrl.tasks.writing.reward import WritingRewardConfig, score_pair, transition_categories

    cfg = WritingRewardConfig.tldr()
    assert (len(_C1), len(_C2)) == (39, 82) and len(transition_categories(_C2)) == 1
    concise, detailed = own_part_rewards(_C1, _C2, cfg)
    # concise: 0.5 + 1.0 + 0.5 + 0.6 * 1 (no transitions: they are in c2, the detailed part)
    assert concise == pytest.approx(2.6)
    # detailed: 0.5 + 1.0 + 0.5 + 0.4 * 0.4 + 0.6 * 1 = 2.76, the team reward itself
    assert detailed == pytest.approx(2.76)
    assert score_pair(_C1, _C2, cfg).total == pytest.approx(2.76)


def test_own_part_rewards_gate_each_writer_on_its_own_part_only():
    from experiments.tasks import own_part_rewards
    from teamrl.tasks.writing.reward import WritingRewardConfig, score_pair

    cfg = WritingRewardConfig.tldr()
    short_c1 = " ".join(_C1.split()[:7])  # 7 words: under the 8-word floor (34 chars)
    # the team scores 0; the detailed writer keeps its levels (82/34 = 2.41, 16/7 = 2.29: tops)
    assert score_pair(short_c1, _C2, cfg).total == 0.0
    assert own_part_rewards(short_c1, _C2, cfg) == pytest.approx((0.0, 2.76))
    # a 2-word c2: the detailed writer scores 0; the concise one keeps L1, then 12/39 < 1.1
    # is off the length band, which stops its levels there
    assert own_part_rewards(_C1, "qzaa however", cfg) == pytest.approx((0.5, 0.0))
    # both in range, c2 = c1: the ratio 1.0 is off the band for both, as for the team
    assert own_part_rewards(_C1, _C1, cfg) == pytest.approx((0.5, 0.5))
    assert score_pair(_C1, _C1, cfg).total == pytest.approx(0.5)


def test_own_part_env_keeps_the_team_reward_and_adds_each_writers_own():
    from experiments.tasks import own_part_rewards
    from teamrl.tasks.registry import make_task
    from teamrl.tasks.writing.reward import WritingRewardConfig

    task = make_task("tldr_own_part")
    assert len(task.test) >= 32 and len(task.train) == 64  # the table's held-out split
    env = task.make_env()
    env.reset(task.train[0])
    short_c1 = " ".join(_C1.split()[:7])
    step = env.step({"concise": short_c1, "detailed": _C2})
    assert step.reward == 0.0  # the team's: what evaluation reports
    own = own_part_rewards(short_c1, _C2, WritingRewardConfig.tldr())
    assert step.local_rewards == {"concise": own[0], "detailed": own[1]}


def test_independent_writers_train_end_to_end_on_their_own_rewards(tmp_path):
    """The table's independent_rewards condition on a tiny model: one step runs, and each
    writer's own reward is what its samples carry (the team's stays in reward/mean)."""
    from experiments.tables import TABLES
    from teamrl.trainer import Trainer

    table = TABLES["tldr_magrpo"]
    (cond,) = [c for c in table.conditions if c.name == "independent_rewards"]
    cfg = load_config(
        table.config,
        [
            *table.base,
            *cond.overrides,
            *tiny_writers(tmp_path),
            "log.save_steps=0",
        ],
    )
    assert cfg.algorithm.reward_per_agent and cfg.algorithm.alpha == 0.0
    trainer = Trainer(cfg)
    (root,) = trainer.rollout([(0, trainer.task.train[0])]).roots  # one step's tree
    for k, agent in enumerate(trainer.team.agents):
        for i, s in enumerate(root.samples[agent]):
            (j,) = [j for j, idx in enumerate(root.joint) if idx[k] == i]
            assert s.return_ == root.steps[j].local_rewards[agent]  # alpha 0: its own reward
    (metrics,) = trainer.train()
    assert {"reward/local/concise/mean", "reward/local/detailed/mean"} <= set(metrics)


def test_test_outputs_keep_what_the_evaluation_scored(tmp_path):
    import dataclasses

    from experiments.runner import record_path, run_table

    table = dataclasses.replace(_table(("greedy/reward",)), test_outputs=True, sample_outputs=1)
    out = tmp_path / "records"
    run_table(table, [0], out_dir=out, runs_dir=tmp_path / "runs", conditions=["untrained"])
    rec = json.loads(record_path(out, "untrained", 0).read_text())
    assert len(rec["outputs_before"]) == 1  # sample_outputs before training
    after = rec["outputs_after"]  # every evaluated problem, from the evaluation's own rollouts
    assert [row["problem"] for row in after] == [0, 1]
    mean = sum(row["reward"] for row in after) / len(after)
    assert mean == pytest.approx(rec["test"]["greedy/reward"])
    assert all(row["tokens"]["solver@turn0"] >= 1 for row in after)


def test_writing_outputs_measures_by_hand():
    from experiments.writing_outputs import look, measures

    post = "a b c d e f g h"  # 8 words: 3 word 6-grams
    # 8 words: here is a b c d e f; of its 3 6-grams only "a b c d e f" is in the post
    m = measures("Here is a b c d e f", post)
    assert m == {"meta": 1.0, "copied": pytest.approx(1 / 3), "distinct": 1.0, "words": 8.0}
    assert measures("a a b b", post)["distinct"] == 0.5  # repetition
    whole = measures("a b c d e f g h", post)
    assert whole == {"meta": 0.0, "copied": 1.0, "distinct": 1.0, "words": 8.0}
    assert measures("short", post)["copied"] == 0.0  # no 6-gram at all
    record = {
        "outputs_after": [
            {"problem": 0, "texts": {"detailed@turn0": "a b c d e f g h", "concise@turn0": "a"}},
            {"problem": 0, "texts": {"detailed@turn0": "This post is about z"}},
        ]
    }
    got = look(record, [{"text": post}], "detailed")
    assert got == {"meta": 0.5, "copied": 0.5, "distinct": 1.0, "words": 6.5}
    # the one writer's text holds both parts: only the part after DETAILED: is the detailed one
    one = {"outputs_after": [{"problem": 0, "texts": {"writer@turn0": "x y\nDETAILED: a a b"}}]}
    assert look(one, [{"text": post}], "detailed") == {
        "meta": 0.0,
        "copied": 0.0,
        "distinct": pytest.approx(2 / 3),
        "words": 3.0,
    }
    assert look(one, [{"text": post}], "concise")["words"] == 2.0


def test_compare_paired_differences_by_hand():
    from experiments.compare import paired

    def rec(cond, seed, value):
        return {"condition": cond, "seed": seed, "test": {"m": value}}

    records = [rec("a", 0, 2.0), rec("a", 1, 1.0), rec("a", 2, 3.0)]
    records += [rec("b", 0, 1.5), rec("b", 1, 1.5), rec("b", 3, 9.0)]
    p = paired(records, "a", "b", "m")
    # seeds 0 and 1 are in both: +0.5 and -0.5; seeds 2 and 3 are in one condition only
    assert p["seeds"] == [0, 1] and p["diffs"] == [0.5, -0.5]
    assert p["mean"] == 0.0 and p["wins"] == 1 and p["missing"] == [2, 3]
    lo, hi = p["ci95"]  # resampling two values: the interval lies within their range
    assert -0.5 <= lo <= 0.0 <= hi <= 0.5
    with pytest.raises(SystemExit, match="no seed has both"):
        paired(records, "a", "c", "m")


def _pp_record(condition: str, env_name: str, texts_of) -> dict:
    """A hand-made Plan-Path record over 3 test boards; ``texts_of(state)`` gives the replies."""
    from teamrl.config import to_dict
    from teamrl.tasks.registry import task_from_config

    cfg = load_config(
        None,
        [
            f"env.name={env_name}",
            "env.max_turns=1",
            "env.kwargs={size: 3, n_train: 2, n_eval: 1, n_test: 3, tool_library: true}",
            "team.agents=[{name: solver}]"
            if env_name.endswith("single")
            else "team.agents=[{name: tool}, {name: plan}]",
        ],
    )
    task = task_from_config(cfg.env)
    outs = []
    for i, ex in enumerate(task.test):
        env = task.make_env()
        env.reset(ex)
        outs.append({"problem": i, "texts": texts_of(i, env.state)})
    return {"condition": condition, "split": "test", "config": to_dict(cfg), "outputs_after": outs}


def _bump_then_path(state) -> list[str]:
    """An invalid first move (off the grid or into an obstacle), then a shortest path."""
    from teamrl.tasks.games.actions import MOVES

    for move, (dr, dc) in MOVES.items():
        r, c = state.pos[0] + dr, state.pos[1] + dc
        if not (0 <= r < 3 and 0 <= c < 3) or state.grid[r][c] == "#":
            return [move, *state.shortest_path()]
    raise AssertionError("a 3x3 board always has a wall next to some start")


def test_plan_path_outputs_replays_sweeps_copies_and_tool_calls_by_hand():
    from experiments.plan_path_outputs import look
    from experiments.tables import LIBRARY_PREFIX

    right, wrong = LIBRARY_PREFIX + "grid, start, goal))\n", LIBRARY_PREFIX + "board))\n"

    def team_texts(i, state):
        # board 0: the right call, copied; board 1: a wrong call (NameError), the plan bumps
        # once and then walks a shortest path; board 2: the right call, the plan answers []
        path = state.shortest_path()
        plan = {0: None, 1: _bump_then_path(state), 2: []}[i]
        if plan is None:  # copy what the tool's program prints (the library's own path)
            from teamrl.tasks.games.plan_path import TOOL_LIBRARY

            scope: dict = {}
            exec(TOOL_LIBRARY, scope)  # noqa: S102 (our own library)
            plan = scope["shortest_path"](list(state.grid), state.pos, state.goal)
            assert len(plan) == len(path)
        return {"tool@turn0": right if i != 1 else wrong, "plan@turn0": f"#### {plan}"}

    def single_texts(i, state):
        # board 0: a shortest path; board 1: a bump first; board 2: two spare moves after it
        path = state.shortest_path()
        plan = {0: path, 1: _bump_then_path(state), 2: [*path, "U", "L"]}[i]
        return {"solver@turn0": f"#### {plan}"}

    table = look(
        [
            _pp_record("team", "plan_path", team_texts),
            _pp_record("one", "plan_path_single", single_texts),
        ]
    )
    team, one = table["team"], table["one"]
    assert team["boards"] == 3 and one["boards"] == 3
    assert team["solved"] == pytest.approx(2 / 3)  # boards 0 and 1
    assert team["optimal"] == pytest.approx(1 / 3) and team["bumped"] == pytest.approx(1 / 3)
    assert team["padded"] == 0.0
    assert team["tool_ran"] == pytest.approx(2 / 3) and team["tool_solves"] == pytest.approx(2 / 3)
    # copied is measured where the tool printed a list (boards 0 and 2): 1 of 2
    assert team["copied"] == pytest.approx(1 / 2) and team["starts_with_tool"] == pytest.approx(
        1 / 2
    )
    assert team["invalid"] == pytest.approx(1 / 3)
    assert one["solved"] == 1.0 and one["optimal"] == pytest.approx(1 / 3)
    assert one["bumped"] == pytest.approx(1 / 3) and one["padded"] == pytest.approx(1 / 3)
    assert "copied" not in one and "tool_ran" not in one
