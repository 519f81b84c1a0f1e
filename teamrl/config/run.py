"""The config sections around a run's training: evaluation during training, and logging."""

from __future__ import annotations

from dataclasses import dataclass

from teamrl.config.fields import _f


@dataclass
class EvalConfig:
    eval_steps: int = _f(0, "Evaluate every K steps (0 = never), plus before the first step.")
    num_examples: int = _f(8, "Held-out examples per evaluation.")
    greedy: bool = _f(True, "Greedy decoding in evaluation.")
    message_ablation: list[str] = _f(
        [],
        "Message ablation of the held-out evaluation (`teamrl eval`, the experiment tables): "
        "after the greedy pass, one more greedy pass per mode with every message an agent "
        "receives from a teammate replaced: 'empty' (the empty string), 'swap' (what the same "
        "teammate wrote on the next evaluated problem, in the greedy pass), 'control' (the "
        "message without a part the receiver does not need, e.g. its sender label). Reported "
        "as ablation/<mode>/<metric>; ablation/<mode>/messages counts the messages shown per "
        "problem (0: the agents never read each other). [] = none.",
    )


@dataclass
class LogConfig:
    output_dir: str = _f("runs", "Parent folder of run folders.")
    save_steps: int = _f(50, "Checkpoint every K steps (0: at the end only; SIGTERM also saves).")
    overwrite: bool = _f(
        False, "Start afresh in a run folder that already holds a run (else it is an error)."
    )
    save_total_limit: int | None = _f(2, "Keep at most this many checkpoints (None = all).")
    num_groups_to_log: int = _f(
        1,
        "Examples per step whose whole groups (every agent's samples at every node or turn, "
        "with prompts, rewards, returns, advantages and tree positions) go to samples.jsonl, "
        "which `teamrl report` shows (0: none).",
    )
    progress_bar: bool = _f(True, "Show a tqdm progress bar.")
    tensorboard: bool = _f(False, "Also log to TensorBoard (needs `tensorboard`).")
    wandb: bool = _f(False, "Also log to Weights & Biases (needs `wandb`).")
    wandb_project: str = _f("teamrl", "wandb project.")
    warn_after_steps: int = _f(
        3,
        "Warn (once each, naming the setting to change) when a run is not learning for this "
        "many consecutive steps: every group's rewards identical, every completion of an agent "
        "truncated, a policy's gradient norm 0, or an app's agent with no call to train on "
        "(0 = never warn). A policy's mean importance weight below 0.1 warns at its first "
        "such step whatever this is (the weight is the scaling itself, not a trend). 3: one "
        "such step happens by chance (a small group, a hard example), three in a row seldom "
        "do, and the warning still comes before much compute is spent (teamrl/run/watch.py).",
    )
