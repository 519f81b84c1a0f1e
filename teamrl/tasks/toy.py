"""Toy cooperative tasks that a tiny random model learns in a few dozen CPU steps.

``digits``: two agents must both answer with digits. The team reward is the mean, over the two
agents, of the fraction of non-space characters that are digits, so each agent's reward is
shared and only rises when both improve. Multi-turn episodes feed back the last score.
``sequential=True`` makes the agents act in turn (for AT-GRPO); the reward after each action
is the mean digit fraction of the answers given so far in the turn.

``bandit``: the lowest rung of the learning ladder (docs/results.md). Each agent answers once;
its answer pays 1 when its first non-space character is one of ``target``, else 0, and the team
reward is the mean over agents. The prompt does not say which answer pays, so nothing but the
reward can teach it: a pipeline whose reward does not rise here is broken, whatever the model.
A turn is a success when every agent hit.
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


def first_char_hits(text: str, target: str) -> bool:
    """Whether the first non-space character of ``text`` is one of the characters of ``target``."""
    stripped = text.lstrip()
    return bool(stripped) and stripped[0] in target


@register_task(
    "bandit",
    "Toy: each agent's first character pays 1 if it is a target one (the learning ladder's rung 0).",
)
def bandit_task(
    target: str = "C",
    agents: tuple = ("picker",),
    n_train: int = 64,
    n_eval: int = 16,
    n_test: int = 64,
    sequential: bool = False,
) -> Task:
    if not isinstance(target, str) or not target or any(c.isspace() for c in target):
        raise ValueError(f"bandit.target: expected non-space characters, got {target!r}")
    if isinstance(agents, str) or not agents or not all(isinstance(a, str) for a in agents):
        raise ValueError(f"bandit.agents: expected a list of agent names, got {agents!r}")
    agents = tuple(agents)

    def reward(completions: dict[str, str], example: dict) -> tuple[float, dict]:
        hits = {a: float(first_char_hits(t, target)) for a, t in completions.items()}
        return sum(hits.values()) / len(hits), {f"hit_{a}": v for a, v in hits.items()}

    def make_env():
        return FunctionEnv(
            agents=list(agents),
            prompt=lambda ex, agent: (
                f"Round {ex['n']}. Answer with one capital letter: A, B, C or D."
            ),
            reward=reward,
            success=lambda team_reward, ex: team_reward == 1.0,
            sequential=sequential,
        )

    # Rows differ only by their round number, so the splits share no row (the runner checks).
    rows = [{"n": i} for i in range(n_train + n_eval + n_test)]
    return Task(
        name="bandit",
        make_env=make_env,
        train=rows[:n_train],
        eval=rows[n_train : n_train + n_eval],
        test=rows[n_train + n_eval :],
        agents={a: f"You are {a}." for a in agents},
        description=f"one-token bandit (target {target!r})",
    )
