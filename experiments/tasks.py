"""Tasks only the experiments use (registered on import of ``experiments.runner``).

``tldr_heldout``     the two-agent TLDR task with a larger held-out test split: the built-in
                     offline set has 96 train, its eval and 24 test posts, and the writing
                     table needs >= 32 held-out posts. Train = the first 64 offline train posts;
                     validation = the offline eval posts; test = the 24 offline test posts
                     followed by train posts 64..95 (56 posts, never trained on).
``tldr_one_writer``  the same splits and reward, one agent ``writer`` writing both parts: the
                     concise summary, then a line ``DETAILED:``, then the detailed summary.
``tldr_own_part``    the two-agent task of ``tldr_heldout`` whose steps also carry each writer's
                     own reward (``own_part_rewards``) as ``Step.local_rewards``: with
                     ``algorithm.name=grpo algorithm.alpha=0`` the writers train as independent
                     learners, each on its own reward. ``Step.reward`` stays the team reward,
                     so evaluation is the same as for the team.
"""

from __future__ import annotations

import dataclasses

from teamrl.envs.base import Step, Task, register_task
from teamrl.envs.functional import FunctionEnv
from teamrl.tasks.writing.env import TLDR_INSTRUCTIONS, WritingEnv, tldr_task
from teamrl.tasks.writing.reward import (
    WritingRewardConfig,
    band_score,
    count_tokens,
    jaccard,
    score_pair,
    transition_categories,
    unique_word_count,
)

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


# --- independent learners: each writer's own reward ---------------------------------------------


def own_part_rewards(c1: str, c2: str, cfg: WritingRewardConfig) -> tuple[float, float]:
    """Each writer's own reward, (c1's writer, c2's writer): the team reward's levels that
    concern its own part.

    The per-agent reward design MAGRPO argues against, made from the team reward's own levels
    and thresholds (nothing new is tuned). A level concerns a part when that part's text enters
    it; each writer's levels are gated as the team's are (a level off its band stops the rest):

        level            team (c1 concise, c2 detailed)    concise (c1)        detailed (c2)
        L1 structure     0.5 if c1 and c2 in range         0.5 if c1 in range  0.5 if c2 in range
        L2 length ratio  band(chars c2 / chars c1)         the same            the same
        L3 unique words  band(uniq c2 / uniq c1)           the same            the same
        L4 style         0.4 T(c2) + 0.6 J(c1, c2)         0.6 J(c1, c2)       0.4 T(c2) + 0.6 J

    So L1 splits by part, the ratio and overlap terms concern both parts and go to both, and
    the transitions T are found in c2 only, so only the detailed writer is paid for them.
    Maxima: concise 2.6, detailed 2.98 (the team's). What each writer no longer sees is the
    other's failure: a concise summary in range keeps its L1 even when the detailed one is not.
    """
    n1, n2 = count_tokens(c1), count_tokens(c2)
    ratios = (
        (len(c1), len(c2), cfg.length_band, cfg.length_reward),
        (unique_word_count(c1), unique_word_count(c2), cfg.unique_band, cfg.unique_reward),
    )
    text = c2 if cfg.transition_text == "c2" else c1 + "\n" + c2
    categories = len(transition_categories(text, cfg.transition_match))
    trans = min(1.0, cfg.transition_base + cfg.transition_step * (categories - 1))
    trans = trans if categories else 0.0
    overlap = min(jaccard(c1, c2), cfg.jaccard_cap) / cfg.jaccard_cap
    style = (
        cfg.jaccard_weight * overlap,
        cfg.transition_weight * trans + cfg.jaccard_weight * overlap,
    )
    out = []
    for own_tokens, own_style in ((n1, style[0]), (n2, style[1])):
        total = 0.0
        if cfg.min_tokens <= own_tokens <= cfg.max_tokens:
            total = cfg.structure_reward
            for first, second, band, top in ratios:
                score = band_score(second / first, band, top) if first else None
                if score is None:
                    break
                total += score
            else:
                total += own_style
        out.append(total)
    return out[0], out[1]


@dataclasses.dataclass
class OwnPartWritingEnv:
    """The TLDR env whose step also carries ``own_part_rewards`` as ``Step.local_rewards``."""

    base: WritingEnv

    @property
    def agents(self) -> list[str]:
        return self.base.agents

    def reset(self, example: dict) -> dict[str, str]:
        return self.base.reset(example)

    def step(self, actions: dict[str, str]) -> Step:
        step = self.base.step(actions)
        c1, c2 = (actions[a] for a in self.base.agents)
        own = own_part_rewards(c1, c2, self.base.reward_config)
        return dataclasses.replace(step, local_rewards=dict(zip(self.base.agents, own)))


@register_task(
    "tldr_own_part",
    "TLDR (offline, held-out split) with each writer's own reward as its local reward.",
)
def tldr_own_part_task() -> Task:
    base = tldr_heldout_task()

    def make_env() -> OwnPartWritingEnv:
        return OwnPartWritingEnv(base.make_env())

    return dataclasses.replace(base, name="tldr_own_part", make_env=make_env)


def _tldr_app_module():
    """examples/tldr_app.py, loaded from its file (examples/ is not a package): the app the
    endpoint table trains is the documented example itself, not a copy of it."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "tldr_app.py"
    spec = importlib.util.spec_from_file_location("teamrl_example_tldr_app", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@register_task(
    "tldr_endpoint",
    "examples/tldr_app.py's openai-client writers as an app task, on the demo's splits.",
)
def tldr_endpoint_task() -> Task:
    from teamrl.apps import app_task

    native = tldr_task(source="offline")
    return app_task(
        "tldr_endpoint",
        _tldr_app_module().episode,
        ["concise", "detailed"],
        train=native.train,
        eval=native.eval,
        test=native.test,
    )
