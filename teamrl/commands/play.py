"""``teamrl play RUN_DIR``: one episode of a trained team, turn by turn, to see what it does.

    trainer, ckpt = load_run("runs/quickstart")     # the run's config.yaml + latest checkpoint
    episode = play_episode(trainer, 0, checkpoint=ckpt)  # greedy, single path (the recipe's eval)
    print(format_episode(episode))

The episode is the recipe's evaluation rollout (``Recipe.eval_rollout``): one sample per agent
per turn and no branch chosen by its reward, exactly what ``teamrl eval`` scores. Weights come
from ``RUN_DIR/checkpoints/step-N`` through ``_load_weights``, the one place that knows the
checkpoint format. ``prompt=`` replaces the task's first observation with the user's text
(every agent sees it); the reward is still the task's, computed on the chosen example.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from teamrl.config import ConfigError
from teamrl.text import clip


@dataclass
class Turn:
    turn: int
    agent: str
    prompt: str  # the full prompt the agent's model saw (chat template included)
    reply: str  # what the env received (response_prefix + completion)
    reward: float  # the reward credited to this action (see the algorithm page)
    truncated: bool  # the reply hit max_completion_length


@dataclass
class Episode:
    task: str
    split: str
    index: int
    checkpoint: str
    greedy: bool
    turns: list[Turn] = field(default_factory=list)
    summary: dict = field(default_factory=dict)  # success, turns, return, team_return, components


def load_run(
    run_dir: str | Path, step: int | None = None, imports: list[str] | None = None, task=None
):
    """(trainer, checkpoint name): a Trainer built from ``RUN_DIR/config.yaml`` with the
    weights of checkpoint ``step`` (the latest when None; ``0`` keeps the untrained weights).
    What the run imported (its run.json) is imported again; ``task``: the Task object a run
    started from Python trained on, when no module registers it."""
    from teamrl.config import load_config
    from teamrl.plugins import ensure_task, import_tasks, restore_run_imports
    from teamrl.trainer import Trainer

    run = Path(run_dir)
    if not (run / "config.yaml").is_file():
        raise ConfigError(f"{run}: not a run folder (no config.yaml)")
    if task is None:
        restore_run_imports(run, imports)
    else:
        import_tasks(imports)
    cfg = load_config(run / "config.yaml")
    if task is None:
        ensure_task(cfg.env.name)
    trainer = Trainer(cfg, task=task, run_dir=run, preflight=False)
    return trainer, _load_weights(trainer, run, step)


def _load_weights(trainer, run: Path, step: int | None) -> str:
    """Load checkpoint ``step`` (latest when None) into the trainer; return its name."""
    from teamrl.run import checkpoints

    if step == 0:
        return "untrained"
    if step is None:
        path = checkpoints.latest_checkpoint(run)
        if path is None:
            raise ConfigError(
                f"{run / 'checkpoints'}: no checkpoint to play (pass --step 0 for the "
                "untrained team)"
            )
    else:
        path = run / "checkpoints" / f"step-{step}"
        if not path.is_dir():
            have = sorted(p.name for p in (run / "checkpoints").glob("step-*"))
            raise ConfigError(
                f"--step {step}: no {path} (checkpoints: {', '.join(have) or 'none'})"
            )
    trainer.load_checkpoint(path)
    return path.name


def pick_example(task, split: str | None, index: int) -> tuple[str, dict]:
    """(split name, example): ``split`` defaults to test, else eval, else train."""
    names = [split] if split else [s for s in ("test", "eval", "train") if getattr(task, s)]
    name = names[0] if names else "train"
    data = getattr(task, name)
    if not 0 <= index < len(data):
        raise ConfigError(
            f"--example {index}: split {name!r} of task {task.name!r} has {len(data)} examples"
        )
    return name, data[index]


class _Prompted:
    """The task's env with its first observation replaced by the user's text.

    The inner env keeps its own state; an env that remembers its observations (FunctionEnv's
    feedback builds on them) has them replaced too, so later turns continue from the text.
    """

    def __init__(self, env, text: str):
        self.env, self.text, self.agents = env, text, list(env.agents)
        if getattr(env, "turn_order", None):
            self.turn_order = list(env.turn_order)

    def reset(self, example: dict) -> dict[str, str]:
        obs = {a: self.text for a in self.env.reset(example)}
        inner = self.env
        while inner is not None:  # e.g. SequentialTurns(FunctionEnv)
            if isinstance(getattr(inner, "observations", None), dict):
                inner.observations = dict(obs)
            if isinstance(getattr(inner, "prompts", None), list):
                inner.prompts = [dict(obs)]
            inner = getattr(inner, "env", None)
        return dict(obs)

    def step(self, actions: dict[str, str]):
        return self.env.step(actions)


def play_episode(
    trainer,
    example: int = 0,
    split: str | None = None,
    *,
    greedy: bool = True,
    prompt: str | None = None,
    checkpoint: str = "",
) -> Episode:
    """Run one single-path episode of the trainer's team on example ``example`` of ``split``."""
    import torch

    task, cfg = trainer.task, trainer.cfg
    name, row = pick_example(task, split, example)
    make_env = task.make_env if prompt is None else (lambda: _Prompted(task.make_env(), prompt))
    with torch.no_grad():
        torch.manual_seed(cfg.seed)
        result = trainer.recipe.eval_rollout(
            trainer.team, make_env, [(example, row)], cfg, n=1, greedy=greedy
        )
    team = trainer.team
    episode = Episode(
        task=task.name,
        split=name,
        index=example,
        checkpoint=checkpoint or "in memory",
        greedy=greedy,
        summary=result.episodes[0] if result.episodes else {},
    )
    for s in sorted(result.samples, key=_order):
        tok = team.engine_of(s.agent).tokenizer
        episode.turns.append(
            Turn(
                turn=s.turn,
                agent=s.agent,
                prompt=tok.decode(s.prompt_ids, skip_special_tokens=False),
                reply=s.text,
                reward=float(s.reward),
                truncated=bool(s.truncated),
            )
        )
    return episode


def _order(sample) -> int:
    """Where an action stands in its episode: an app's call by the order it was served
    (``info["call"]``; its ``turn`` counts that agent's calls only, and a later call of one agent
    may quote an earlier call of another), an env's action by its turn (the sort is stable:
    agent order within a turn)."""
    return sample.info.get("call", sample.turn)


def format_episode(episode: Episode, max_prompt_chars: int | None = 600) -> str:
    """The episode as text: a header, each agent's turn (prompt, reply, reward), the outcome.

    A prompt longer than ``max_prompt_chars`` keeps its head and tail (None: never clipped).
    """
    decoding = "greedy" if episode.greedy else "sampled"
    lines = [
        f"task {episode.task}, {episode.split}[{episode.index}], checkpoint "
        f"{episode.checkpoint}, {decoding}"
    ]
    for t in episode.turns:
        shown = (
            t.prompt
            if max_prompt_chars is None
            else clip(
                t.prompt, max_prompt_chars, marker="\n[... {cut} characters ...]\n", keep="both"
            )
        )
        cut = " (cut at max_completion_length)" if t.truncated else ""
        lines += [
            "",
            f"--- turn {t.turn} | {t.agent} ---",
            "prompt:",
            _indent(shown),
            f"reply{cut}:",
            _indent(t.reply if t.reply.strip() else f"(only whitespace: {t.reply!r})"),
            f"reward: {t.reward:.4f}",
        ]
    s = episode.summary
    lines += ["", "=== outcome ==="]
    if s:
        success = "n/a (the task has no success test)" if s["success"] is None else s["success"]
        lines.append(f"success: {success}")
        lines.append(f"turns: {s['turns']}")
        lines.append(f"return: {s['return']:.4f}  (team reward summed: {s['team_return']:.4f})")
        for k, v in s["components"].items():
            lines.append(f"reward/{k}: {v:.4f}")
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("    " + ln for ln in (text.splitlines() or [""]))
