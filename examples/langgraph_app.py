"""The TLDR writers as a LangGraph graph, each node a langchain-openai ``ChatOpenAI`` pointed at
its episode's base URL; the detailed writer reads the concise one's summary (docs/apps.md).

    pip install 'teamrl[apps-langgraph]'
    teamrl train examples/langgraph_app.yaml --import examples/langgraph_app.py
"""

from typing import TypedDict

from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

from teamrl.apps import app_task
from teamrl.envs.base import register_task
from teamrl.tasks.writing.data import offline_texts
from teamrl.tasks.writing.env import TLDR_INSTRUCTIONS, TLDR_ROLES
from teamrl.tasks.writing.reward import WritingRewardConfig, score_pair

REWARD = WritingRewardConfig.tldr()


class Draft(TypedDict, total=False):
    post: str
    concise: str
    detailed: str


def writer(agent, base_url, api_key, shows_concise=False):
    llm = ChatOpenAI(model=agent, base_url=base_url, api_key=api_key, max_retries=0)

    def node(state: Draft) -> Draft:
        seen = f"\n\nYour teammate's summary: {state['concise']}" if shows_concise else ""
        user = f"Post:\n{state['post']}\n\n{TLDR_INSTRUCTIONS[agent]}{seen}"
        reply = llm.invoke([("system", TLDR_ROLES[agent]), ("user", user)])
        return {agent: reply.content}

    return node


def episode(example, base_url, api_key):
    graph = StateGraph(Draft)
    graph.add_node("concise", writer("concise", base_url, api_key))
    graph.add_node("detailed", writer("detailed", base_url, api_key, shows_concise=True))
    graph.add_edge(START, "concise")
    graph.add_edge("concise", "detailed")
    graph.add_edge("detailed", END)
    out = graph.compile().invoke({"post": example["text"]})
    return score_pair(out["concise"], out["detailed"], REWARD).total


@register_task("tldr_langgraph", "The TLDR writers as a LangGraph app (docs/apps.md).")
def tldr_langgraph():
    splits = {s: offline_texts(s) for s in ("train", "eval", "test")}
    return app_task("tldr_langgraph", episode, ["concise", "detailed"], **splits)
