"""Collaborative writing tasks: two agents write complementary texts about one source text.

* ``tldr``: ``concise`` writes a one- or two-sentence summary of a post, ``detailed`` a
  longer summary with varied words and transitions.
* ``arxiv``: from a paper abstract, ``background`` writes the background and motivation of
  an introduction, ``methods`` the methods and implications.

Both are simultaneous and single-turn: one joint action, scored by the gated 4-level
reward of ``teamrl.tasks.writing.reward`` (agent 1's text is c1, agent 2's is c2), then done.
Data loads when a task is built, never at import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from teamrl.envs.base import Step, Task, register_task
from teamrl.errors import ConfigError
from teamrl.tasks.hub import check_dataset_id
from teamrl.tasks.rows import check_limit, limit_rows
from teamrl.tasks.writing.data import (
    ARXIV_DATASET,
    TLDR_DATASET,
    load_arxiv,
    load_tldr,
    offline_texts,
)
from teamrl.tasks.writing.reward import WritingRewardConfig, score_pair

# --------------------------------------------------------------------------------------
# Prompts: a default role (system) prompt per agent, and the per-agent instruction that
# follows the source text in the observation.
# --------------------------------------------------------------------------------------

TLDR_ROLES = {
    "concise": "You are a careful editor. You write short, factual summaries that keep only "
    "the main point.",
    "detailed": "You are a thorough writer. You explain a text in a detailed, well-connected "
    "paragraph with varied vocabulary.",
}
TLDR_INSTRUCTIONS = {
    "concise": "Write a concise summary of this post in one or two sentences. A teammate is "
    "writing the detailed summary, so give only the main point.",
    "detailed": "Write a detailed summary of this post in one paragraph of three to five "
    "sentences. A teammate is writing a one-sentence summary, so yours should be about two "
    "to three times as long and add the details, using varied words rather than repeating "
    "the post. Link your sentences with transition words such as 'however', 'for example', "
    "'as a result' and 'overall'.",
}
ARXIV_ROLES = {
    "background": "You are a research writer. You explain why a problem matters and what "
    "earlier work left open.",
    "methods": "You are a research writer. You explain how a study was done and what its "
    "results imply.",
}
ARXIV_INSTRUCTIONS = {
    "background": "Expand the text above into the first part of the paper's introduction: the "
    "background and motivation (the problem, why it matters, what earlier work missed). A "
    "teammate writes the methods and implications, so do not describe them. Write one "
    "paragraph of 150 to 200 words.",
    "methods": "Expand the text above into the second part of the paper's introduction: the "
    "methods and their implications (what was done, how, and what the results mean). A "
    "teammate writes the background and motivation, so do not repeat it. Write one "
    "paragraph of 150 to 200 words.",
}


def _observation(kind: str, text: str, instruction: str) -> str:
    return f"{kind}:\n{text}\n\n{instruction}"


@dataclass
class WritingEnv:
    """Two agents, one simultaneous turn. ``agents[0]`` writes c1, ``agents[1]`` writes c2.

    ``reset(example)`` needs ``example["text"]``; ``step`` needs every agent's completion and
    returns the team reward with ``Step.reward_components`` = the four level values
    (they sum to the reward), ``infos["reward_metrics"]`` = raw measures and
    ``infos["levels_passed"]``.
    """

    agents: list[str]
    instructions: dict[str, str]
    source_kind: str
    reward_config: WritingRewardConfig
    _observations: dict[str, str] = field(default_factory=dict, repr=False)

    def reset(self, example: dict) -> dict[str, str]:
        text = example.get("text") if isinstance(example, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ValueError(
                f"writing example: field 'text' must be a non-empty string, got {text!r:.80}"
            )
        self._observations = {
            a: _observation(self.source_kind, text.strip(), self.instructions[a])
            for a in self.agents
        }
        return dict(self._observations)

    def step(self, actions: dict[str, str]) -> Step:
        if not self._observations:
            raise RuntimeError("WritingEnv.step: call reset(example) first")
        if set(actions) != set(self.agents):
            raise ValueError(
                f"WritingEnv.step: expected actions for {self.agents}, got {sorted(actions)}"
            )
        score = score_pair(actions[self.agents[0]], actions[self.agents[1]], self.reward_config)
        done = {a: True for a in self.agents}
        return Step(
            observations=dict(self._observations),  # nothing new to see: the episode is over
            reward=score.total,
            terminations=done,
            truncations={a: False for a in self.agents},
            infos={
                "reward_metrics": dict(score.metrics),
                "levels_passed": score.levels_passed,
            },
            reward_components=score.components(),
        )


def _offline_splits() -> tuple[list[dict], list[dict], list[dict]]:
    return offline_texts("train"), offline_texts("eval"), offline_texts("test")


def _hub_splits(loader: Any, splits: Any, limit, dataset_id: Any):
    names_ok = isinstance(splits, (list, tuple)) and all(isinstance(s, str) for s in splits)
    if not names_ok or len(splits) != 3:
        raise ConfigError(
            f"env.kwargs.splits: expected 3 split names (train, eval, test), got {splits!r}"
        )
    check_dataset_id(dataset_id)
    return tuple(loader(split=s, limit=limit, dataset_id=dataset_id) for s in splits)


def _task_rows(source: Any, loader: Any, splits: Any, limit: Any, dataset_id: Any):
    """(train, eval, test) rows: the built-in texts offline, else the three hub splits."""
    _check_source(source)
    check_limit(limit)
    if source == "offline":
        return tuple(limit_rows(rows, limit) for rows in _offline_splits())
    return _hub_splits(loader, splits, limit, dataset_id)


def _writing_task(
    name: str,
    rows: tuple[list[dict], list[dict], list[dict]],
    roles: dict[str, str],
    instructions: dict[str, str],
    kind: str,
    cfg: Any,
    description: str,
) -> Task:
    """The two-agent writing ``Task`` (one env per episode, all sharing ``cfg``)."""
    agents = list(roles)

    def make_env() -> WritingEnv:
        return WritingEnv(agents, dict(instructions), kind, cfg)

    train, eval_, test = rows
    return Task(
        name=name,
        make_env=make_env,
        train=train,
        eval=eval_,
        test=test,
        agents=dict(roles),
        description=description,
    )


def _check_source(source: Any) -> None:
    if source not in ("offline", "hub"):
        raise ConfigError(
            f"env.kwargs.source: expected 'offline' (the builtin texts) or 'hub', got "
            f"{source!r}; for a local copy of the dataset pass source=hub and "
            "dataset_id=<its folder>"
        )


@register_task(
    "tldr",
    "Two-agent summarisation of Reddit posts (concise + detailed), gated 4-level reward "
    "(max 3). source='offline' (built-in posts) or 'hub' (trl-lib/tldr).",
)
def tldr_task(
    source: str = "offline",
    limit: int | None = None,
    dataset_id: str = TLDR_DATASET,
    splits: tuple[str, str, str] = ("train", "validation", "test"),
    reward: dict | None = None,
) -> Task:
    """Build the TLDR task.

    ``limit`` caps the rows of each split; ``splits`` are the hub split names for
    (train, eval, test); ``reward`` overrides ``WritingRewardConfig`` fields, e.g.
    ``{"transition_match": "word"}``.
    """
    rows = _task_rows(source, load_tldr, splits, limit, dataset_id)
    cfg = WritingRewardConfig.tldr(**(reward or {}))
    description = "TLDR: concise and detailed summaries of one post."
    return _writing_task("tldr", rows, TLDR_ROLES, TLDR_INSTRUCTIONS, "Post", cfg, description)


@register_task(
    "arxiv",
    "Two-agent introduction writing from arXiv abstracts (background + methods), gated "
    "4-level reward (max 3); variant='paper' or 'current' thresholds. source='offline' or 'hub'.",
)
def arxiv_task(
    source: str = "offline",
    variant: str = "paper",
    limit: int | None = None,
    dataset_id: str = ARXIV_DATASET,
    splits: tuple[str, str, str] = ("train", "val[:50%]", "val[50%:]"),
    reward: dict | None = None,
) -> Task:
    """Build the arXiv task.

    ``variant`` picks the L2 thresholds (``"paper"``: init commit, ``"current"``: reference
    HEAD). The hub set has ``train`` and ``val`` splits only, so by default eval and test are
    the two halves of ``val``. Offline, the built-in posts stand in for abstracts (no offline
    abstract set exists); they are shorter than real abstracts.
    """
    rows = _task_rows(source, load_arxiv, splits, limit, dataset_id)
    cfg = WritingRewardConfig.arxiv(variant, **(reward or {}))
    kind = "Abstract" if source == "hub" else "Text"
    description = f"arXiv: introduction background and methods from one abstract ({variant})."
    return _writing_task("arxiv", rows, ARXIV_ROLES, ARXIV_INSTRUCTIONS, kind, cfg, description)
