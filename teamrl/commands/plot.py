"""``teamrl plot RUN_DIR``: learning curves from metrics.jsonl into a PNG."""

from __future__ import annotations

from pathlib import Path

from teamrl.run.logging import read_metrics


def _series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    if not rows:
        raise ValueError(f"{run_dir}/metrics.jsonl has no rows to plot")
    keys = set().union(*rows)
    panels = [
        ("team reward", [k for k in ("reward/mean", "eval/reward/mean") if k in keys]),
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
    panels = [(t, ks) for t, ks in panels if ks]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (title, ks) in zip(axes[0], panels):
        for k in ks:
            xs, ys = _series(rows, k)
            style = "o-" if k.startswith("eval/") else "-"
            ax.plot(
                xs,
                ys,
                style,
                label=k.split("/", 1)[-1] if title != "team reward" else k,
                markersize=3,
            )
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(out) if out else Path(run_dir) / "learning_curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
