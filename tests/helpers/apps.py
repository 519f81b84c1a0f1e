"""App tests: a tiny two-agent config (LoRA adapters on tiny-llama) and a helper that runs an
app's episodes on a team through the real endpoint on loopback."""

from __future__ import annotations

from teamrl.config import load_config

AGENTS = ["alice", "bob"]


def tiny_cfg(*extra: str):
    return load_config(
        None,
        [
            "model.name_or_path=tiny-llama",
            "team.policies=lora",
            "algorithm.name=app",
            "team.agents=[{name: alice, max_completion_length: 6}, "
            "{name: bob, max_completion_length: 6}]",
            "algorithm.num_generations=3",
            "train.learning_rate=0.01",
            "train.lr_scheduler_type=constant",
            "log.progress_bar=false",
            *extra,
        ],
    )


def run(team, episode, examples=({"x": 0},), copies=1, greedy=False, timeout=0.0, limits=None):
    """``copies`` episodes of each example through the shared endpoint: their records
    (``limits``: the run's ``endpoint`` section, None for its defaults)."""
    from teamrl.apps.episodes import run_episodes
    from teamrl.apps.task import AppEnv
    from teamrl.rollout.common import RolloutClock

    env = AppEnv(list(AGENTS), episode)
    batch = list(enumerate(examples))
    return run_episodes(
        team, env, batch, copies, greedy=greedy, ignore_eos=False, clock=RolloutClock(),
        timeout=timeout, limits=limits,
    )  # fmt: skip


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]
