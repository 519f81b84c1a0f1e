"""What one training step holds, per algorithm: the recipes' own answer (each ``Recipe`` carries
its ``shape``), which the config rules and the preflight ask instead of counting again.

    env_steps        env steps of one rollout in the worst case (no early stop): what bounds a
                     step's time
    generation_rows  sequences in the rollout's largest generate call (its last turn)
    samples          samples the update trains on

Pure arithmetic on the config: nothing here loads or imports a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepShape:
    env_steps: int
    generation_rows: int
    samples: int


# Counts past this are reported as CAP + 1: no config that runs gets near it, and a hostile one
# (G = 10^18 over a million turns) must not make the count itself astronomically expensive.
CAP = 10**15


def joint_tree_shape(cfg: Any) -> StepShape:
    """MAGRPO: per prompt a tree whose nodes hold G joint actions ('aligned') or G^N
    ('cross'), over max_turns levels; every node samples G completions per agent."""
    a, t = cfg.algorithm, cfg.train
    n, turns, g = max(1, len(cfg.team.agents)), cfg.env.max_turns, a.num_generations
    branch = min(g**n, CAP + 1) if a.joint_mode == "cross" else g
    level, nodes, last = 1, 0, 1  # nodes of the current turn, of every turn so far, the last
    for _ in range(turns):
        last = level
        nodes += level
        if nodes > CAP:
            break
        level *= branch
    return StepShape(
        env_steps=_capped(t.prompts_per_step * nodes * branch),
        generation_rows=_capped(t.prompts_per_step * last * n * g),
        samples=_capped(t.prompts_per_step * nodes * n * g),
    )


def _capped(count: int) -> int:
    return min(count, CAP + 1)


def agent_turn_shape(cfg: Any) -> StepShape:
    """AT-GRPO and trajectory GRPO: K branches (or episodes) per (turn, agent) and prompt."""
    a, t = cfg.algorithm, cfg.train
    n, turns, k = max(1, len(cfg.team.agents)), cfg.env.max_turns, a.num_generations
    rows = t.prompts_per_step * n * k
    return StepShape(
        env_steps=_capped(rows * turns),
        generation_rows=_capped(rows),
        samples=_capped(rows * turns),
    )


SHAPES = {
    "magrpo": joint_tree_shape,
    "at_grpo": agent_turn_shape,
    "grpo": agent_turn_shape,
    "app": agent_turn_shape,  # K episodes, env.max_turns calls per agent as the estimate
}


def step_shape(cfg: Any) -> StepShape:
    """The shape of ``cfg``'s algorithm (``algorithm.name`` is checked by the config rules)."""
    return SHAPES.get(cfg.algorithm.name, agent_turn_shape)(cfg)
