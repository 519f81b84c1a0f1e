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
is written ``\\u003c`` so no text of a sample can close the tag. The page's
Content-Security-Policy runs scripts and applies styles by hash only: ``render`` lists the
SHA-256 of the page's own ``<script>`` and ``<style>`` blocks, so nothing else inline runs
(a script a sample's text smuggled in, or one added to the file after it was written), no
``<base>`` can redirect its links and no form can send anything.

The page's size does not grow with the run's length. Curves longer than ``MAX_CURVE_POINTS``
steps are downsampled (``downsample``: each point the mean of a run of consecutive steps, with
that run's lowest and highest value, so a spike stays visible); samples keep at most
``MAX_SAMPLE_STEPS`` logged steps; evaluations their first and last; the page's tables show a
page of rows at a time.

Every file is read through ``teamrl.run.records``: a malformed line is one error naming the
file and the line; a partial last line (a live run writing it) is skipped with a note.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import warnings
from importlib.resources import files
from pathlib import Path

from teamrl.errors import ConfigError
from teamrl.run.records import (
    EVAL_SAMPLES,
    METRICS,
    RESUMES,
    SAMPLES,
    RunFileError,
    Spec,
    iter_records,
    read_config,
)

MAX_SAMPLE_STEPS = 200  # a long run's samples: this many logged steps, evenly spread
MAX_CURVE_POINTS = 1000  # a longer run's curves: this many points, each a run of steps
MAX_EVAL_STEPS = 20  # evaluation steps the page names (their first and last ten); it counts all
PLACEHOLDER = "__TEAMRL_REPORT_DATA__"
SCRIPT_HASHES = "__TEAMRL_SCRIPT_HASHES__"  # in the page's CSP: its own scripts' and styles'
STYLE_HASHES = "__TEAMRL_STYLE_HASHES__"
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
    """The page with ``data`` inlined and its CSP listing the hashes of its own scripts and
    styles (computed from the template, before the data goes in: the data's tag is JSON,
    which a browser never runs)."""
    page = files("teamrl.commands").joinpath("report_page.html").read_text(encoding="utf-8")
    page = page.replace(SCRIPT_HASHES, csp_hashes(page, "script"))
    page = page.replace(STYLE_HASHES, csp_hashes(page, "style"))
    text = json.dumps(_finite(data), allow_nan=False, separators=(",", ":"))
    return page.replace(PLACEHOLDER, text.replace("<", "\\u003c"))


def csp_hashes(page: str, tag: str) -> str:
    """``'sha256-...'`` of each bare ``<tag>`` block of ``page`` (the data's ``<script
    type=...>`` has attributes and is not matched), space-separated: a CSP source list. A
    browser hashes the element's text as UTF-8, exactly as it stands between the tags."""
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.DOTALL)
    assert blocks, f"the report page has no <{tag}> block"
    return " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(b.encode()).digest()).decode() + "'"
        for b in blocks
    )


def report_data(
    run_dir: str | Path,
    max_sample_steps: int = MAX_SAMPLE_STEPS,
    max_curve_points: int = MAX_CURVE_POINTS,
) -> dict:
    """Everything the page draws. A folder without metrics.jsonl, or with no rows in it, and
    a malformed line of any file are each a one-line ``ConfigError``; missing samples or
    evaluations, and partial last lines skipped, are notes the page shows (the skipped lines
    are warnings too)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ConfigError(f"{run_dir} is not a folder (teamrl report RUN_DIR takes a run folder)")
    metrics_path = run / "metrics.jsonl"
    if not metrics_path.exists():
        raise ConfigError(f"{run_dir} holds no metrics.jsonl: is it a teamrl run folder?")
    skipped: list[str] = []  # partial last lines: notes at the top of the page, and warnings
    by_step: dict[int, dict] = {}
    for r in iter_records(metrics_path, METRICS, skipped):
        by_step.setdefault(r["step"], {}).update(r)  # a resumed step: its later row wins
    if not by_step:
        raise ConfigError(f"{metrics_path} has no rows yet (no step has finished)")
    algorithm, num_generations, team = _config(run / "config.yaml")
    notes: list[str] = []
    samples = _samples(run / "samples.jsonl", max_sample_steps, notes, skipped)
    if not samples:
        notes.append(
            "samples.jsonl has no samples (log.num_groups_to_log=0, or a run from before "
            "whole groups were logged): the sample table and the tree view are empty."
        )
    elif "prompt" not in samples[0]:
        notes.append("samples.jsonl is in the old format (no prompts, no tree positions).")
    evals = _evals(run / "eval_samples.jsonl", skipped)
    if not evals["rows"]:
        notes.append("No evaluation outputs (eval.eval_steps=0, or eval_samples.jsonl absent).")
    steps, series = _series(by_step)
    agents = _agents(team, series, samples)
    panels = curve_panels(list(series), agents)
    curves = downsample(steps, series, max_curve_points)
    if "spans" in curves:
        notes.append(
            f"metrics.jsonl logs {len(steps)} steps: each curve point is the mean of a run of "
            f"up to {curves['per_point']} steps, shaded from its lowest to its highest value."
        )
    resumes = _path_rows(run / "resumes.jsonl", RESUMES, skipped)
    for note in skipped:
        warnings.warn(note, stacklevel=2)
    return {
        "title": run.resolve().name,
        "algorithm": algorithm,
        "num_generations": num_generations,
        "agents": agents,
        "span": [steps[0], steps[-1]],
        **curves,
        "panels": panels,
        "resumes": sorted({r["step"] for r in resumes}),
        "samples": samples,
        "evals": evals,
        "notes": skipped + notes,
    }


def _path_rows(path: Path, spec: Spec, skipped: list[str]) -> list[dict]:
    return list(iter_records(path, spec, skipped)) if path.exists() else []


def _config(path: Path) -> tuple[str, int | None, list[str]]:
    """What the page shows of the run's config.yaml: the algorithm's name, its G and the
    team's agent names (empty when the file is absent). A value of the wrong kind is a
    one-line error naming the file and the key."""
    if not path.exists():
        return "", None, []
    config = read_config(path)

    def section(key: str) -> dict:
        value = config.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise RunFileError(f"{path}: {key} must be a mapping, got {type(value).__name__}")
        return value

    def kind(key: str, value: object, want: type, words: str):
        if value is not None and (not isinstance(value, want) or isinstance(value, bool)):
            raise RunFileError(f"{path}: {key} must be {words}, got {type(value).__name__}")
        return value

    algorithm = section("algorithm")
    name = kind("algorithm.name", algorithm.get("name"), str, "a string") or ""
    g = kind("algorithm.num_generations", algorithm.get("num_generations"), int, "an integer")
    agents = kind("team.agents", section("team").get("agents"), list, "a list") or []
    names = []
    for i, agent in enumerate(agents):
        if not isinstance(agent, dict):
            raise RunFileError(
                f"{path}: team.agents[{i}] must be a mapping, got {type(agent).__name__}"
            )
        names.append(kind(f"team.agents[{i}].name", agent.get("name"), str, "a string"))
    return name, g, [n for n in names if n]


def _agents(team: list[str], series: dict, samples: list[dict]) -> list[str]:
    """The team's agents in config order; else the ones the metrics and samples name."""
    if team:
        return team
    names: list[str] = []
    for key in series:
        if key.startswith("reward/agent/") and key.endswith("/mean"):
            names.append(key.split("/")[2])
        elif key.startswith("advantage/mean/"):
            names.append(key[len("advantage/mean/") :])
    names += [r["agent"] for r in samples if r.get("agent") not in names]
    return list(dict.fromkeys(names))


def _series(by_step: dict[int, dict]) -> tuple[list[int], dict[str, list]]:
    """One x (the step, in order) and per numeric key its value at every step, None where the
    row lacks it (an eval key between evaluations)."""
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


def downsample(steps: list[int], series: dict[str, list], limit: int) -> dict:
    """The curves as the page gets them: ``steps`` and ``series`` as they are when there are
    at most ``limit`` steps; else at most ``limit`` points, each standing for a run of
    ``per_point`` = ceil(n / limit) consecutive logged steps (the last run may be shorter).

    A point's x is its run's middle step and its value the mean of the run's values (None
    where it has none: an eval key between evaluations keeps its own values whenever at most
    one falls in a run); ``ranges[key]`` holds each run's lowest and highest value, which the
    page shades, so a spike one step wide is still drawn at its height; ``spans`` each run's
    first and last step. The page smooths the means."""
    n = len(steps)
    if n <= limit:
        return {"steps": steps, "series": series}
    per = -(-n // limit)
    runs = [(i, min(i + per, n)) for i in range(0, n, per)]
    out: dict[str, list] = {}
    ranges: dict[str, list[list]] = {}
    for key, ys in series.items():
        means, lows, highs = [], [], []
        for a, b in runs:
            vals = [y for y in ys[a:b] if y is not None]
            means.append(sum(vals) / len(vals) if vals else None)
            lows.append(min(vals) if vals else None)
            highs.append(max(vals) if vals else None)
        out[key] = means
        ranges[key] = [lows, highs]
    return {
        "steps": [steps[(a + b - 1) // 2] for a, b in runs],
        "series": out,
        "ranges": ranges,
        "spans": [[steps[a], steps[b - 1]] for a, b in runs],
        "per_point": per,
    }


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
        # turns (an episode's count of them, or of an app's calls) on their own axis: a few
        # turns on the rewards' axis (about 1) would flatten every reward to a line
        ("turns", pick("turns/mean") + prefixed("eval/turns")),
        (
            "evaluation",
            [k for k in prefixed("eval/", (*EVAL_SKIP, "eval/turns")) if not k.endswith("/std")],
        ),
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


def _samples(path: Path, limit: int, notes: list[str], skipped: list[str]) -> list[dict]:
    """The rows of at most ``limit`` logged steps of samples.jsonl (``_spread``). Read twice,
    the steps first, so a long run's file (prompts included, gigabytes) is never held whole."""
    if not path.exists():
        return []
    steps = sorted({r["step"] for r in iter_records(path, SAMPLES, skipped)})
    keep = _spread(steps, limit)
    if len(keep) < len(steps):
        notes.append(f"samples.jsonl logs {len(steps)} steps: the page holds {len(keep)} of them.")
    return [r for r in iter_records(path, SAMPLES, skipped) if r["step"] in keep]


def _spread(steps: list[int], limit: int) -> set[int]:
    """At most ``limit`` of the sorted ``steps``, evenly spread, the first and the last kept."""
    if len(steps) <= limit:
        return set(steps)
    if limit <= 1:
        return set(steps[-1:])
    return {steps[round(i * (len(steps) - 1) / (limit - 1))] for i in range(limit)}


def _evals(path: Path, skipped: list[str]) -> dict:
    """The first and the last evaluation's outputs, in one pass keeping only those rows; the
    number of evaluations and their steps (the first and last ``MAX_EVAL_STEPS // 2`` when
    there are more)."""
    steps: set[int] = set()
    first_step = last_step = None
    first: list[dict] = []
    last: list[dict] = []
    for r in iter_records(path, EVAL_SAMPLES, skipped) if path.exists() else ():
        s = r["step"]
        steps.add(s)
        if first_step is None or s < first_step:
            first_step, first = s, []
        if last_step is None or s > last_step:
            last_step, last = s, []
        if s == first_step:
            first.append(r)
        if s == last_step:
            last.append(r)
    if not steps:
        return {"steps": [], "count": 0, "first": None, "last": None, "rows": []}
    ordered = sorted(steps)
    half = MAX_EVAL_STEPS // 2
    named = ordered if len(ordered) <= MAX_EVAL_STEPS else ordered[:half] + ordered[-half:]
    return {
        "steps": named,
        "count": len(ordered),
        "first": ordered[0],
        "last": ordered[-1],
        "rows": first if first_step == last_step else first + last,
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
