"""The demo's two TLDR writers as a plain `openai` program, trained as an app (docs/apps.md).

teamrl train examples/tldr_app.yaml --import examples/tldr_app.py
"""

from teamrl.apps import app_task
from teamrl.envs.base import register_task
from teamrl.tasks.writing.data import offline_texts
from teamrl.tasks.writing.env import TLDR_INSTRUCTIONS, TLDR_ROLES
from teamrl.tasks.writing.reward import WritingRewardConfig, score_pair

REWARD = WritingRewardConfig.tldr()


def ask(client, agent, post):
    reply = client.chat.completions.create(
        model=agent,
        messages=[
            {"role": "system", "content": TLDR_ROLES[agent]},
            {"role": "user", "content": f"Post:\n{post}\n\n{TLDR_INSTRUCTIONS[agent]}"},
        ],
    )
    return reply.choices[0].message.content


def episode(client, example):
    concise = ask(client, "concise", example["text"])
    detailed = ask(client, "detailed", example["text"])
    return score_pair(concise, detailed, REWARD).total


@register_task("tldr_app", "The TLDR writers as an openai-client app (docs/apps.md).")
def tldr_app():
    splits = {s: offline_texts(s) for s in ("train", "eval", "test")}
    return app_task("tldr_app", episode, ["concise", "detailed"], **splits)
