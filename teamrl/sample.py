"""``Sample``: the one currency between rollout, algorithm and trainer.

One agent's one generated action, with everything an update needs. ``completion_ids`` hold
real tokens only (through EOS, never a pad), so the completion mask is implicit here and is
materialised when samples are padded into a batch.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass
class Sample:
    agent: str
    policy: str
    turn: int
    group: Hashable  # e.g. (problem, node, agent) for MAGRPO, (problem, turn, agent) for AT-GRPO
    prompt_ids: list[int]
    completion_ids: list[int]
    sampler_logprobs: list[float]
    truncated: bool = False
    temperature: float = 1.0  # training-side log-probs use logits / temperature, as sampled
    reward: float = 0.0  # immediate reward credited to this action
    return_: float = 0.0  # reward-to-go the advantage is computed from
    advantage: float = 0.0
    # one advantage per completion token (a token-level critic's GAE); None: ``advantage`` for
    # every token
    token_advantages: list[float] | None = None
    text: str = ""  # decoded completion, for logs
    # The episode this action belongs to, when a group holds several actions of one episode
    # (trajectory GRPO): the baseline is then taken over episodes. None: the sample is its own
    # unit (every tree algorithm).
    episode: Hashable | None = None
    team_reward: float | None = None  # the env's team reward for this action (AT-GRPO, GRPO)
    local_reward: float | None = None  # the acting agent's local reward (AT-GRPO, GRPO)
    info: dict = field(default_factory=dict)  # free-form extras

    @property
    def completion_mask(self) -> list[int]:
        return [1] * len(self.completion_ids)
