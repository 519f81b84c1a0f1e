"""Tiny training runs with rewards the test knows, for ``teamrl report`` (tests/commands and
tests/browser): a MAGRPO run of two agents, an AT-GRPO run of two agents in turn. The model is
tiny-llama, so the texts are noise; every reward is a function of the texts, recomputed by the
test from what samples.jsonl or the page shows."""

from __future__ import annotations

from pathlib import Path

from helpers.runs import tiny_overrides
from teamrl.config import load_config
from teamrl.envs.base import Step, Task
from teamrl.envs.functional import FunctionEnv
from teamrl.trainer import Trainer

G = 3  # joint actions per MAGRPO node, candidates per AT-GRPO node


def joint_reward(completions: dict[str, str], example: dict) -> float:
    """MAGRPO's team reward: a quarter step in [0, 1] from the two replies' lengths."""
    return ((len(completions["alice"]) + 2 * len(completions["bob"])) % 5) / 4


def turn_reward(text: str) -> float:
    """AT-GRPO's team reward of one agent's action, from its reply's length."""
    return (len(text) % 4) / 4


class TurnEnv:
    """Two agents in turn (alice then bob) for two turns; each action is rewarded at once by
    ``turn_reward`` (no local term), and every prompt shows the actions so far."""

    agents = ["alice", "bob"]
    turn_order = ["alice", "bob"]

    def reset(self, example: dict) -> dict[str, str]:
        self.prompt, self.log = example["prompt"], []
        return {a: self.prompt for a in self.agents}

    def step(self, actions: dict[str, str]) -> Step:
        ((agent, text),) = actions.items()
        self.log.append(f"{agent}: {text}")
        obs = {a: "\n".join([self.prompt, *self.log]) for a in self.agents}
        return Step(observations=obs, reward=turn_reward(text))


def _examples(n: int, start: int = 0) -> list[dict]:
    return [{"prompt": f"Say {i}."} for i in range(start, start + n)]


def magrpo_run(run_dir: Path, steps: int = 2, resume: bool = False, **extra) -> Trainer:
    """Train a MAGRPO team (G joint actions per node, one turn) to ``steps``, evaluating
    every step on 2 held-out examples and checkpointing every step."""
    task = Task(
        "known_joint", lambda: FunctionEnv(["alice", "bob"], joint_reward), _examples(4),
        eval=_examples(2, start=10),
    )  # fmt: skip
    options = {
        "env.name": "known_joint",
        "algorithm.num_generations": G,
        "train.prompts_per_step": 2,
        "eval.eval_steps": 1,
        "eval.num_examples": 2,
        "log.save_steps": 1,
        **extra,
    }
    cfg = load_config(None, tiny_overrides(steps=steps, **options))
    trainer = Trainer(cfg, task=task, run_dir=run_dir)
    trainer.train(resume=resume)
    return trainer


def at_grpo_run(run_dir: Path, steps: int = 1) -> Trainer:
    """Train an AT-GRPO team (K = G candidates per (turn, agent) node, greedy selection, two
    turns) for ``steps``, evaluating before and after."""
    task = Task("known_turns", TurnEnv, _examples(2), eval=_examples(2, start=10))
    options = {
        "env.name": "known_turns",
        "algorithm.name": "at_grpo",
        "algorithm.num_generations": G,
        "algorithm.selection": "greedy",
        "env.max_turns": 2,
        "train.prompts_per_step": 1,
        "eval.eval_steps": 1,
        "eval.num_examples": 2,
    }
    cfg = load_config(None, tiny_overrides(steps=steps, **options))
    trainer = Trainer(cfg, task=task, run_dir=run_dir)
    trainer.train()
    return trainer
