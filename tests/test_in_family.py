"""experiments/in_family.py: new instances of the training families, and its report by hand."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("in_family", ROOT / "experiments" / "in_family.py")
inf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(inf)


def test_new_instances_are_training_families_no_run_has_seen():
    from experiments.tables import get_table
    from teamrl.config import load_config
    from teamrl.tasks.coding.generated import template_splits
    from teamrl.tasks.registry import make_task

    table = get_table(inf.TABLE)
    kwargs = dict(load_config(table.config, list(table.base)).env.kwargs)
    own = make_task("gencode", **kwargs)
    rows = inf.new_instances(1, 30)
    assert len(rows) == 30
    train_families = set(template_splits()["train"])
    assert {r["template"] for r in rows} <= train_families
    assert {r["template"] for r in rows} >= {r["template"] for r in own.train[:10]}
    seen = {r["prompt"] for s in (own.train, own.eval, own.test) for r in s}
    assert not seen & {r["prompt"] for r in rows}
    assert len({r["prompt"] for r in rows}) == 30


def test_report_means_seeds_by_hand(tmp_path):
    def record(cond, seed, pass_rate, solved, reward):
        per = [{"template": "t_a", "pass_rate": pass_rate}, {"template": "t_b", "pass_rate": 0}]
        return {
            "condition": cond, "seed": seed, "problems": 2, "pass_rate": pass_rate,
            "solved": solved, "reward": reward, "per_problem": per, "machine": "m",
            "date": "d", "git_commit": "c",
        }  # fmt: skip

    for r in (
        record("untrained", 0, 0.5, 0.25, -2.0),
        record("magrpo", 0, 0.25, 0.0, -3.0),
        record("magrpo", 1, 0.75, 0.5, -1.0),
    ):
        (tmp_path / f"{r['condition']}__seed{r['seed']}.json").write_text(json.dumps(r))
    md = inf.report(tmp_path)
    assert "| untrained | 1 | 2 | 0.500 (0.500) | 0.250 | -2.000 |" in md
    # two seeds: the mean 0.5, the bootstrap interval over the two values [0.25, 0.75]
    assert "| magrpo | 2 | 2 | 0.500 [0.250, 0.750] (0.250, 0.750) |" in md
    assert "Families (2): `t_a`, `t_b`." in md
    assert md.index("| untrained") < md.index("| magrpo")  # the table's order


def test_fields_added_since_a_run_are_named_and_only_those(tmp_path):
    import yaml

    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"model": {"name": "m"}, "seed": 1}))
    now = {"model": {"name": "m", "lora_compute_dtype": "model"}, "seed": 2, "extra": {"a": 1}}
    assert inf.added_fields(tmp_path, now) == ["model.lora_compute_dtype", "extra"]
