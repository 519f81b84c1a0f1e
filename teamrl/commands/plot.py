"""``teamrl plot RUN_DIR``: learning curves from metrics.jsonl into a PNG.

The panels: team reward (with the evaluation points), reward and advantage per agent, reward
components, loss, completion length. ``smooth`` (``--smooth W``, W in [0, 1)) draws each
training curve as its bias-corrected EMA with weight W over the raw values (drawn faintly);
evaluation points are never smoothed. Steps are integers, and so are the x ticks. For an
interactive page with samples and rollout trees, see ``teamrl report``.

metrics.jsonl is read through ``teamrl.run.records`` (as ``teamrl report`` reads it): a
malformed line is one error naming the file and the line; a partial last line (a live run
writing it) is skipped with a warning.
"""

from __future__ import annotations

from pathlib import Path

from teamrl.errors import ConfigError
from teamrl.run.logging import team_reward_key
from teamrl.run.records import METRICS, read_records


def _series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    """The steps where ``key`` is a number, and its values there."""
    pts = [(r["step"], r[key]) for r in rows if _is_number(r.get(key))]
    return [p[0] for p in pts], [p[1] for p in pts]


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def ema(values: list[float], weight: float) -> list[float]:
    """s_t = w s_{t-1} + (1 - w) x_t from s_0 = 0, divided by 1 - w^t so that the first
    points are not pulled towards 0 (weight 0: the values themselves)."""
    out, s, norm = [], 0.0, 0.0
    for x in values:
        s = weight * s + (1 - weight) * x
        norm = weight * norm + (1 - weight)
        out.append(s / norm)
    return out


def plot_panels(keys: set[str]) -> list[tuple[str, list[str]]]:
    """The panels this run has keys for: a title and the keys it draws."""
    agent_reward = sorted(k for k in keys if k.startswith("reward/agent/") and k.endswith("/mean"))
    panels = [
        ("team reward", [k for k in (team_reward_key(keys), "eval/reward/mean") if k in keys]),
        ("reward per agent", agent_reward),
        ("advantage per agent", sorted(k for k in keys if k.startswith("advantage/mean/"))),
        ("reward components", sorted(k for k in keys if k.startswith("reward/components/"))),
        ("loss", sorted(k for k in keys if k.startswith("loss/"))),
        (
            "completion length",
            sorted(
                k
                for k in keys
                if k.startswith("completion_length/") and k != "completion_length/mean"
            ),
        ),
    ]
    return [(t, ks) for t, ks in panels if ks]


def plot_run(run_dir: str | Path, out: str | Path | None = None, smooth: float = 0.0) -> Path:
    if not 0 <= smooth < 1:
        raise ConfigError(f"--smooth: expected an EMA weight in [0, 1), got {smooth}")
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise ConfigError(f"{path} does not exist: is {run_dir} a teamrl run folder?")
    rows = read_records(path, METRICS)
    if not rows:
        raise ConfigError(f"{run_dir}/metrics.jsonl has no rows to plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = plot_panels(set().union(*rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (title, ks) in zip(axes[0], panels):
        for k in ks:
            xs, ys = _series(rows, k)
            label = k if title == "team reward" else k.split("/", 1)[-1]
            if k.startswith("eval/"):
                ax.plot(xs, ys, "o--", label=label, markersize=3)
                continue
            if smooth:
                (raw,) = ax.plot(xs, ys, "-", alpha=0.25, linewidth=1)
                ax.plot(xs, ema(ys, smooth), "-", color=raw.get_color(), label=label)
            else:
                ax.plot(xs, ys, "-", label=label, markersize=3)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(out) if out else Path(run_dir) / "learning_curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
