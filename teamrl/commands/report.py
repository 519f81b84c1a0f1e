"""``teamrl report RUN_DIR``: one self-contained HTML page of a run, read from its files only.

    path = write_report("runs/quickstart")        # RUN_DIR/report.html
    data = report_data("runs/quickstart")         # what the page draws, as plain JSON

The page (``report_page.html``, hand-written HTML, CSS and JS with no library and no request
beyond the file itself) has four sections, each fed by one file of the run folder:

    learning curves    metrics.jsonl (panels chosen here: ``curve_panels``), resumes.jsonl
    joint samples      samples.jsonl: a table filterable by agent and step
    the rollout tree   samples.jsonl: a MAGRPO node and its joint actions, an AT-GRPO turn and
                       its candidates, a trajectory-GRPO episode
    before / after     eval_samples.jsonl: the first and the last evaluation side by side

The data is inlined as JSON in a ``<script type="application/json">`` tag; every ``<`` in it
is written ``\\u003c`` so no text of a sample can close the tag.
"""

from __future__ import annotations

import json
import math
from importlib.resources import files
from pathlib import Path

import yaml

from teamrl.errors import ConfigError
from teamrl.run.files import read_jsonl

MAX_SAMPLE_STEPS = 200  # a long run's samples: this many logged steps, evenly spread
PLACEHOLDER = "__TEAMRL_REPORT_DATA__"
EVAL_SKIP = ("eval/completion_length", "eval/on_train_split")  # not scores: no eval panel line


def write_report(
    run_dir: str | Path, out: str | Path | None = None, max_sample_steps: int = MAX_SAMPLE_STEPS
) -> Path:
    """Write the page for ``run_dir`` to ``out`` (default ``RUN_DIR/report.html``)."""
    data = report_data(run_dir, max_sample_steps)
    path = Path(out) if out else Path(run_dir) / "report.html"
    path.write_text(render(data), encoding="utf-8")
    return path


def render(data: dict) -> str:
    """The page with ``data`` inlined."""
    page = files("teamrl.commands").joinpath("report_page.html").read_text(encoding="utf-8")
    text = json.dumps(_finite(data), allow_nan=False, separators=(",", ":"))
    return page.replace(PLACEHOLDER, text.replace("<", "\\u003c"))


def report_data(run_dir: str | Path, max_sample_steps: int = MAX_SAMPLE_STEPS) -> dict:
    """Everything the page draws. A folder without metrics.jsonl, or with no rows in it, is a
    one-line ``ConfigError``; missing samples or evaluations are notes the page shows."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ConfigError(f"{run_dir} is not a folder (teamrl report RUN_DIR takes a run folder)")
    metrics_path = run / "metrics.jsonl"
    if not metrics_path.exists():
        raise ConfigError(f"{run_dir} holds no metrics.jsonl: is it a teamrl run folder?")
    rows = [r for r in read_jsonl(metrics_path) if isinstance(r.get("step"), int)]
    if not rows:
        raise ConfigError(f"{metrics_path} has no rows yet (no step has finished)")
    config = _config(run)
    notes: list[str] = []
    samples = _rows(run / "samples.jsonl")
    if not samples:
        notes.append(
            "samples.jsonl has no samples (log.num_groups_to_log=0, or a run from before "
            "whole groups were logged): the sample table and the tree view are empty."
        )
    elif "prompt" not in samples[0]:
        notes.append("samples.jsonl is in the old format (no prompts, no tree positions).")
    samples = _spread_steps(samples, max_sample_steps, notes)
    evals = _evals(_rows(run / "eval_samples.jsonl"))
    if not evals["rows"]:
        notes.append("No evaluation outputs (eval.eval_steps=0, or eval_samples.jsonl absent).")
    steps, series = _series(rows)
    algorithm = config.get("algorithm", {}) or {}
    agents = _agents(config, series, samples)
    return {
        "title": run.resolve().name,
        "algorithm": algorithm.get("name", ""),
        "num_generations": algorithm.get("num_generations"),
        "agents": agents,
        "steps": steps,
        "series": series,
        "panels": curve_panels(list(series), agents),
        "resumes": sorted({r["step"] for r in _rows(run / "resumes.jsonl")}),
        "samples": samples,
        "evals": evals,
        "notes": notes,
    }


def _rows(path: Path) -> list[dict]:
    return [r for r in read_jsonl(path) if isinstance(r, dict)] if path.exists() else []


def _config(run: Path) -> dict:
    path = run / "config.yaml"
    if not path.exists():
        return {}
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _agents(config: dict, series: dict, samples: list[dict]) -> list[str]:
    """The team's agents in config order; else the ones the metrics and samples name."""
    team = (config.get("team") or {}).get("agents") or []
    names = [a["name"] for a in team if isinstance(a, dict) and a.get("name")]
    if names:
        return names
    for key in series:
        if key.startswith("reward/agent/") and key.endswith("/mean"):
            names.append(key.split("/")[2])
        elif key.startswith("advantage/mean/"):
            names.append(key[len("advantage/mean/") :])
    names += [r["agent"] for r in samples if r.get("agent") not in names]
    return list(dict.fromkeys(names))


def _series(rows: list[dict]) -> tuple[list[int], dict[str, list]]:
    """One x (the step, in order, a resumed step's later row winning) and per numeric key its
    value at every step, None where the row lacks it (an eval key between evaluations)."""
    by_step: dict[int, dict] = {}
    for r in rows:
        by_step.setdefault(r["step"], {}).update(r)
    steps = sorted(by_step)
    keys = sorted(
        {
            k
            for r in by_step.values()
            for k, v in r.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
    )
    series = {k: [_number(by_step[s].get(k)) for s in steps] for k in keys}
    return steps, series


def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return v


def curve_panels(keys: list[str], agents: list[str]) -> list[dict]:
    """The learning-curve panels, in reading order: each a title, the keys it draws, and
    ``bands`` (a key -> the key of its spread, drawn as mean +- std). Panels with no key in
    this run are left out; a training key no panel names goes to "other"."""
    have = set(keys)

    def pick(*names: str) -> list[str]:
        return [k for k in names if k in have]

    def prefixed(prefix: str, exclude: tuple[str, ...] = ()) -> list[str]:
        return sorted(k for k in have if k.startswith(prefix) and not k.startswith(exclude))

    per_agent_reward = [
        k
        for a in agents
        for k in pick(f"reward/agent/{a}/mean", f"reward/team/{a}/mean", f"reward/local/{a}/mean")
    ]
    advantage = [
        k for a in agents for k in pick(f"advantage/mean/{a}", f"advantage/abs_mean/{a}")
    ] + prefixed("advantage/partner_spread/")
    panels = [
        (
            "team reward",
            pick("reward/mean", "reward/team/mean", "success_rate", "eval/reward/mean"),
        ),
        ("reward per turn", prefixed("reward/turn_")),
        ("reward per agent", per_agent_reward),
        ("advantage per agent", advantage),
        ("reward components", prefixed("reward/components/")),
        ("loss", prefixed("loss/")),
        ("KL", prefixed("kl")),
        ("entropy", prefixed("entropy/")),
        ("clip fraction", prefixed("clip_fraction/")),
        ("lengths", prefixed("completion_length/") + prefixed("prompt_length/")),
        ("truncation", prefixed("truncated_fraction/") + pick("terminated_fraction")),
        ("grad norm", prefixed("grad_norm/")),
        ("evaluation", [k for k in prefixed("eval/", EVAL_SKIP) if not k.endswith("/std")]),
    ]
    out = []
    for title, ks in panels:
        if not ks:
            continue
        bands = {k: _std_of(k) for k in ks if _std_of(k) != k and _std_of(k) in have}
        out.append({"title": title, "keys": ks, "bands": bands})
    return out


def _std_of(key: str) -> str:
    """The key that holds the spread of ``key``: reward/mean -> reward/std,
    advantage/mean/a -> advantage/std/a; else itself (no partner)."""
    if key.endswith("/mean") and key.count("/") == 1:
        return key[: -len("/mean")] + "/std"
    if key.startswith("advantage/mean/"):
        return "advantage/std/" + key[len("advantage/mean/") :]
    return key


def _spread_steps(samples: list[dict], limit: int, notes: list[str]) -> list[dict]:
    """At most ``limit`` logged steps, evenly spread, the first and the last kept."""
    steps = sorted({r.get("step") for r in samples if isinstance(r.get("step"), int)})
    if len(steps) <= limit:
        return samples
    if limit <= 1:
        keep = set(steps[-1:])
    else:
        keep = {steps[round(i * (len(steps) - 1) / (limit - 1))] for i in range(limit)}
    notes.append(f"samples.jsonl logs {len(steps)} steps: the page holds {len(keep)} of them.")
    return [r for r in samples if r.get("step") in keep]


def _evals(rows: list[dict]) -> dict:
    """The first and the last evaluation's outputs (every evaluation's step is listed)."""
    steps = sorted({r["step"] for r in rows if isinstance(r.get("step"), int)})
    if not steps:
        return {"steps": [], "first": None, "last": None, "rows": []}
    ends = {steps[0], steps[-1]}
    return {
        "steps": steps,
        "first": steps[0],
        "last": steps[-1],
        "rows": [r for r in rows if r.get("step") in ends],
    }


def _finite(obj):
    """NaN and infinities (a diverged loss) as None: JSON has no word for them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj
