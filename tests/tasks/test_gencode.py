"""gencode: the generated function problems, their template splits, and the task."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from teamrl.cli import main
from teamrl.tasks.coding.gen_templates import TEMPLATES
from teamrl.tasks.coding.generated import (
    TIERS,
    draw,
    gencode_splits,
    template_splits,
)
from teamrl.tasks.coding.harness import check_units
from teamrl.tasks.coding.reward import AuxMainJob, leveled_rewards
from teamrl.tasks.registry import make_task, registered_tasks

ROOT = Path(__file__).resolve().parents[2]


def _functions(source: str) -> dict[str, str]:
    tree = ast.parse(source)
    head = "from typing import Dict, List\n\n\n"
    return {n.name: head + ast.unparse(n) for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_there_are_enough_templates_in_every_tier_and_split():
    assert len(TEMPLATES) >= 40
    by_split = template_splits()
    for split, names in by_split.items():
        assert {TEMPLATES[n].tier for n in names} == set(TIERS), split
    assert sum(1 for t in TEMPLATES.values() if t.tier == 2) >= 10


def test_splits_are_disjoint_by_template_and_cover_them_all():
    by_split = template_splits()
    train, eval_, test = (set(by_split[s]) for s in ("train", "eval", "test"))
    assert not (train & eval_) and not (train & test) and not (eval_ & test)
    assert train | eval_ | test == set(TEMPLATES)
    rows = gencode_splits([1, 2, 3], n_train=120, n_eval=30, n_test=30)
    used = {s: {r["template"] for r in rows[s]} for s in rows}
    assert used["train"] <= train and used["eval"] <= eval_ and used["test"] <= test
    assert used["test"] == test  # every test family appears in a 30-row split


def test_rows_are_distinct_and_from_the_asked_tier():
    rows = gencode_splits(3, n_train=60, n_eval=20, n_test=20)
    for split in rows.values():
        assert {r["tier"] for r in split} == {3}
        keys = [(r["prompt"], r["test"]) for r in split]
        assert len(set(keys)) == len(keys)


def test_generation_is_deterministic_for_a_seed():
    a = gencode_splits([1, 2, 3], n_train=40, n_eval=10, n_test=10, seed=7)
    b = gencode_splits([1, 2, 3], n_train=40, n_eval=10, n_test=10, seed=7)
    c = gencode_splits([1, 2, 3], n_train=40, n_eval=10, n_test=10, seed=8)
    assert a == b
    assert a["train"] != c["train"]
    assert draw("add_constant", 3, 5) == draw("add_constant", 3, 5)


def test_a_drawn_row_by_hand():
    row = draw("sum_multiples", 0, 0)
    k = int(row["prompt"].split("divisible by ")[1].split(".")[0])
    assert row["helper_spec"] == f"aux(x: int) -> bool, which returns True if x is divisible by {k}"
    assert f"Call the helper {row['helper_spec']}." in row["prompt"]
    for unit in check_units(row["test"]):
        call = ast.parse(unit).body[0].test
        (xs,) = [ast.literal_eval(a) for a in call.left.args]
        assert ast.literal_eval(call.comparators[0]) == sum(x for x in xs if x % k == 0)
    assert len(check_units(row["test"])) == 5


def test_the_helper_spec_is_there_exactly_for_the_cooperative_families():
    cooperative = set()
    for name in TEMPLATES:
        row = draw(name, 0, 0)
        fns = _functions(row["canonical_solution"])
        if row["helper_spec"]:
            cooperative.add(name)
            assert "aux" in fns and "aux(" in fns[row["entry_point"]]
            assert row["helper_spec"].startswith("aux(") and "aux(" in row["prompt"]
        else:
            assert set(fns) == {row["entry_point"]} and "aux" not in row["prompt"]
    assert len(cooperative) >= 10
    assert {"count_vowels", "sum_multiples", "caesar_shift", "primes_only"} <= cooperative


def test_no_reference_solution_reaches_the_agents():
    task = make_task("gencode", tier=[1, 2, 3], n_train=60, n_eval=20, n_test=30)
    env = task.make_env()
    for row in task.train + task.eval + task.test:
        seen = "\n".join(env.reset(row).values())
        for fn in ast.parse(row["canonical_solution"]).body:
            body = "\n".join(ast.unparse(stmt) for stmt in fn.body)
            assert body not in seen, (row["task_id"], body)
            # no line of the reference long enough to carry its logic
            for line in body.splitlines():
                assert len(line.strip()) < 16 or line.strip() not in seen, (row["task_id"], line)
        assert row["test"] not in seen


def test_every_reference_passes_its_tests_in_the_sandbox_and_a_wrong_one_fails():
    """Every family, one instance from each of two seeds, scored through the leveled reward
    in the process sandbox: the helper agent sends the reference aux, the main agent the
    reference entry point."""
    jobs, expected = [], []
    for name in sorted(TEMPLATES):
        for seed in (0, 1):
            row = draw(name, seed, 0)
            fns = _functions(row["canonical_solution"])
            helper = fns.get("aux", "")
            main_ = fns[row["entry_point"]]
            jobs.append(AuxMainJob(helper, main_, row["prompt"], row["test"], row["entry_point"]))
            # 1.0 definitions (0.6 without aux's 0.4) + 0.5 syntax + 1.0 tests + 1.5 cooperation
            expected.append(4.0 if helper else 2.1)
    wrong = draw("count_vowels", 0, 0)
    wrong_main = f"def {wrong['entry_point']}(s):\n    return len(s)\n"
    jobs.append(AuxMainJob("", wrong_main, wrong["prompt"], wrong["test"], wrong["entry_point"]))
    scores = leveled_rewards(jobs)
    got = [(j.entry_point, s.score, s.run_error) for j, s in zip(jobs, scores)]
    assert got[:-1] == [(j.entry_point, pytest.approx(e), "") for j, e in zip(jobs, expected)]
    assert all(s.all_passed for s in scores[:-1])
    assert not scores[-1].all_passed and scores[-1].tests < 1.0


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"tier": 4}, "tier"),
        ({"tier": "2"}, "tier"),
        ({"tier": []}, "tier"),
        ({"n_train": 0}, "n_train"),
        ({"n_test": 2.5}, "n_test"),
    ],
)
def test_bad_kwargs_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"env.kwargs.{field}"):
        gencode_splits(**kwargs)


def test_the_task_loads_via_the_registry_and_the_config_passes_dry_run(capsys):
    assert "gencode" in registered_tasks()
    task = make_task("gencode", tier=2, n_train=30, n_eval=10, n_test=12, limit=8)
    assert (len(task.train), len(task.eval), len(task.test)) == (8, 8, 8)
    assert list(task.agents) == ["helper", "main"]
    config = ROOT / "teamrl" / "configs" / "gencode_magrpo.yaml"
    assert main(["train", str(config), "--dry-run", "model.name_or_path=tiny-llama"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("task gencode: rows 512 train, 64 eval, 128 test; agents helper, main")


def _pair_and_solo(row):
    fns = _functions(row["canonical_solution"])
    return fns.get("aux", ""), fns[row["entry_point"]]


def test_one_agent_writes_both_parts_and_gets_the_pairs_reward():
    """The one-agent baseline: ``coder`` sees one prompt asking for aux and the entry point,
    and its one text is scored as the helper's aux plus main's entry point would be."""
    pair = make_task("gencode", tier=2, n_train=4, n_eval=4, n_test=4)
    solo = make_task("gencode", tier=2, n_train=4, n_eval=4, n_test=4, solo=True)
    assert list(solo.agents) == ["coder"]
    row = next(r for r in pair.train if r["helper_spec"])
    aux, entry = _pair_and_solo(row)
    solo_env, pair_env = solo.make_env(), pair.make_env()
    prompt = solo_env.reset(row)
    assert list(prompt) == ["coder"] and "`aux`" in prompt["coder"]
    assert row["entry_point"] in prompt["coder"]
    pair_env.reset(row)
    together = solo_env.step({"coder": aux + "\n\n" + entry})
    apart = pair_env.step({"helper": aux, "main": entry})
    assert together.reward == apart.reward == 4.0  # unshifted: every level at full marks
    assert together.reward_components == apart.reward_components
    assert together.terminations == {"coder": True}
    # Only the entry point, inlined: 0.6 + 0.5 + 1.0 (no aux, so no cooperation): 2.1.
    solo_env.reset(row)
    inline = f"def {row['entry_point']}(*args):\n    return None\n"
    assert solo_env.step({"coder": inline}).reward_components["definitions"] == 0.6
    with pytest.raises(ValueError, match="solo: one agent writes both functions"):
        make_task("gencode", tier=2, n_train=4, n_eval=4, n_test=4, solo=True, max_turns=2)
    with pytest.raises(ValueError, match="env.kwargs.solo"):
        make_task("gencode", tier=2, n_train=4, n_eval=4, n_test=4, solo="yes")


def test_each_agents_own_reward_counts_only_what_it_wrote():
    """local_rewards: helper 0.4 (aux returns) + 0.5 (aux compiles alone); main the leveled
    reward of its text with no helper (0.6 + 0.5 + pass rate). The team reward is unchanged."""
    task = make_task("gencode", tier=2, n_train=4, n_eval=4, n_test=4, local_rewards=True)
    row = next(r for r in task.train if r["helper_spec"])
    aux, entry = _pair_and_solo(row)
    env = task.make_env()

    env.reset(row)  # the reference team: main relies on aux, so alone it fails every test
    step = env.step({"helper": aux, "main": entry})
    assert step.reward == 4.0
    assert step.local_rewards == {"helper": pytest.approx(0.9), "main": pytest.approx(1.1)}

    # main inlines the helper's work (a nested copy of aux): alone it passes everything, 2.1;
    # a helper that does not return earns nothing.
    inner = "\n".join("    " + line for line in aux.split("\n\n\n", 1)[1].splitlines())
    body = entry.split("\n\n\n", 1)[1]
    head, rest = body.split("\n", 1)
    inlined = f"{head}\n{inner}\n{rest}"
    env.reset(row)
    step = env.step({"helper": "def aux(x):\n    print(x)\n", "main": inlined})
    assert step.local_rewards == {"helper": 0.0, "main": pytest.approx(2.1)}

    plain = make_task("gencode", tier=2, n_train=4, n_eval=4, n_test=4).make_env()
    plain.reset(row)
    assert plain.step({"helper": aux, "main": entry}).local_rewards == {}
