"""Tasks only the experiments use (registered on import of ``experiments.runner``).

``tldr_heldout``     the two-agent TLDR task with a larger held-out test split: the built-in
                     offline set has 96 train, its eval and 24 test posts, and the writing
                     table needs >= 32 held-out posts. Train = the first 64 offline train posts;
                     validation = the offline eval posts; test = the 24 offline test posts
                     followed by train posts 64..95 (56 posts, never trained on).
``tldr_one_writer``  the same splits and reward, one agent ``writer`` writing both parts: the
                     concise summary, then a line ``DETAILED:``, then the detailed summary.
"""

from __future__ import annotations

import dataclasses

from teamrl.envs.base import Task, register_task
from teamrl.envs.functional import FunctionEnv
from teamrl.tasks.writing.env import TLDR_INSTRUCTIONS, tldr_task
from teamrl.tasks.writing.reward import WritingRewardConfig, score_pair

N_TRAIN = 64
MARKER = "DETAILED:"


def _heldout_splits(task: Task) -> Task:
    train = list(task.train)
    return dataclasses.replace(task, train=train[:N_TRAIN], test=list(task.test) + train[N_TRAIN:])


@register_task("tldr_heldout", "TLDR (offline) with 64 train and 56 held-out test posts.")
def tldr_heldout_task() -> Task:
    return _heldout_splits(tldr_task(source="offline"))


def split_parts(text: str) -> tuple[str, str]:
    """(concise, detailed): the text before and after the last ``DETAILED:`` line marker."""
    if MARKER not in text:
        return text.strip(), ""
    head, tail = text.rsplit(MARKER, 1)
    return head.strip(), tail.strip()


def one_writer_reward(completions: dict[str, str], example: dict) -> tuple[float, dict]:
    concise, detailed = split_parts(completions["writer"])
    score = score_pair(concise, detailed, WritingRewardConfig.tldr())
    return score.total, score.components()


def one_writer_prompt(example: dict, agent: str) -> str:
    return (
        f"Post:\n{example['text'].strip()}\n\nWrite two summaries of this post. First: "
        f"{TLDR_INSTRUCTIONS['concise'].split('. A teammate')[0]}. Then a line '{MARKER}' and: "
        f"{TLDR_INSTRUCTIONS['detailed'].replace('A teammate is writing', 'The first is')}"
    )


@register_task("tldr_one_writer", "TLDR (offline, held-out split): one agent writes both parts.")
def tldr_one_writer_task() -> Task:
    base = tldr_heldout_task()

    def make_env() -> FunctionEnv:
        return FunctionEnv(agents=["writer"], reward=one_writer_reward, prompt=one_writer_prompt)

    return dataclasses.replace(
        base,
        name="tldr_one_writer",
        make_env=make_env,
        agents={"writer": "You write a concise and a detailed summary of a post."},
    )
