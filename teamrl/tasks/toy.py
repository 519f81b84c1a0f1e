"""Toy cooperative tasks that a tiny random model learns in a few dozen CPU steps.

``digits``: two agents must both answer with digits. The team reward is the mean, over the two
agents, of the fraction of non-space characters that are digits, so each agent's reward is
shared and only rises when both improve. Multi-turn episodes feed back the last score.
``sequential=True`` makes the agents act in turn (for AT-GRPO); the reward after each action
is the mean digit fraction of the answers given so far in the turn.
"""

from __future__ import annotations

from teamrl.envs.base import Task, register_task
from teamrl.envs.functional import FunctionEnv


def digit_fraction(text: str) -> float:
    chars = [c for c in text if not c.isspace()]
    return sum(c.isdigit() for c in chars) / len(chars) if chars else 0.0


def digits_reward(completions: dict[str, str], example: dict) -> tuple[float, dict]:
    parts = {a: digit_fraction(t) for a, t in completions.items()}
    return sum(parts.values()) / len(parts), {f"digits_{a}": v for a, v in parts.items()}


@register_task("digits", "Toy: two agents are rewarded for answering with digits (tests, demos).")
def digits_task(
    n_train: int = 32, n_eval: int = 8, agents: tuple = ("alice", "bob"), sequential: bool = False
) -> Task:
    def transition(example, completions, history):
        score, _ = digits_reward(completions, example)
        return {a: f"Count to {example['n']}. Last team score: {score:.2f}." for a in agents}

    def make_env():
        return FunctionEnv(
            agents=list(agents),
            prompt=lambda ex, agent: f"Count to {ex['n']}.",
            reward=digits_reward,
            transition=transition,
            sequential=sequential,
        )

    examples = [{"n": 3 + i} for i in range(n_train + n_eval)]
    return Task(
        name="digits",
        make_env=make_env,
        train=examples[:n_train],
        eval=examples[n_train:],
        agents={a: f"You are {a}." for a in agents},
        description="toy digits task",
    )
