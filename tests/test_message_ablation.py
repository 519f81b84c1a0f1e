"""The message ablation (``eval.message_ablation``) through ``evaluate_trainer`` on a tiny model.

For each team task where agents talk (Plan-Path's tool -> plan report, Plan-Path split's scout
-> planner message, TLDR's concise -> detailed summary under AT-GRPO's sequential turns), every
prompt a policy receives is captured in each pass: the un-ablated greedy pass, then one pass per
mode. The receiver's prompt must be the un-ablated one with exactly the message's span replaced
(emptied; by the next problem's message; without its unused part) and every other prompt must
be unchanged. Plan-Path's tool replies are the tiny model's own greedy completions after a
program prefill (the sandbox runs the program on each board, so each board's report differs);
on the other two a random model's greedy reply is the same blank text on every problem, which
would hide a swap, so a prompt-scripted backend stands in for decoding (the team, its
tokenizer, chat template and prompts are still the tiny model's).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import yaml

import teamrl.tasks.games.episode as games
from teamrl.config import load_config
from teamrl.evaluation import evaluate_trainer
from teamrl.generation.types import Generation
from teamrl.trainer import Trainer

PROBLEMS = 3
MODES = ["empty", "swap", "control"]
PASSES = ["base", *MODES]  # the order evaluate_trainer runs them in


@dataclass
class RunResult:  # what ToolPlanEnv reads of a sandbox result
    stdout: str
    stderr: str
    returncode: int
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run_in_process(code: str) -> RunResult:
    """The tool's program (the library preamble and a one-line call, written by this test's
    prefill) run in-process."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(code, {})
    except Exception as err:  # a broken program is the tool's failure, shown to the plan agent
        return RunResult(out.getvalue(), repr(err), 1)
    return RunResult(out.getvalue(), "", 0)


class PromptBackend:
    """Answers each request with ``reply(agent, prompt text)``, then EOS: a deterministic
    stand-in for greedy decoding whose message depends on the prompt."""

    def __init__(self, inner, tokenizer, eos: int, reply: Callable[[str, str], str]) -> None:
        self.inner, self.tok, self.eos, self.reply = inner, tokenizer, eos, reply

    def generate(self, requests, ignore_eos=False):
        out = []
        for r in requests:
            text = self.reply(r.adapter, self.tok.decode(r.prompt_ids))
            ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.eos]
            out.append([Generation(list(r.prompt_ids), ids, [-0.5] * len(ids), False)])
        return out

    def weights_changed(self, adapter):
        self.inner.weights_changed(adapter)


@contextmanager
def prompt_backend(team, reply: Callable[[str, str], str]) -> Iterator[None]:
    (engine,) = team.engines()  # LoRA agents share one engine
    real = engine.backend
    engine.backend = PromptBackend(real, engine.tokenizer, engine.eos_ids[0], reply)
    try:
        yield
    finally:
        engine.backend = real


def scout_and_planner(agent: str, prompt: str) -> str:
    """The scout copies the rows of its view of the board; the planner commits one move."""
    if agent == "scout":
        view = prompt.split("Your view of the board", 1)[1].split("\n\n", 1)[0]
        return "\n".join(view.splitlines()[1:])
    return "#### ['D']"


def concise_and_detailed(agent: str, prompt: str) -> str:
    """The concise writer gives the post's first sentence; the detailed one a fixed line."""
    if agent == "concise":
        post = prompt.split("Post:\n", 1)[1]
        return re.split(r"(?<=\.)\s", post, maxsplit=1)[0]
    return "A detailed summary."


PROGRAM = "```python\nprint(shortest_path(grid, start, goal))\n```\n"


@dataclass
class Case:
    config: str
    overrides: list[str]
    sender: str
    receiver: str
    starts: str  # where the message starts in the receiver's prompt
    ends: str | None  # what follows it (None: the prompt's end)
    unused: Callable[[str], str]  # the message's unused part, by hand
    reply: Callable[[str, str], str] | None  # None: the tiny model's own greedy decoding


CASES = {
    "plan_path": Case(
        "plan_path_at_grpo",
        [
            f"env.kwargs={{size: 3, n_train: 4, n_eval: 2, n_test: {PROBLEMS}, "
            "tool_library: true}",
            "env.max_turns=1",
            "team.agents=[{name: tool, max_completion_length: 4, "
            f"response_prefix: {json.dumps(PROGRAM)}}}, {{name: plan, max_completion_length: 4}}]",
        ],
        "tool",
        "plan",
        "The tool agent wrote this code:",
        "\n\nYou are the plan agent.",
        lambda m: m[: m.index("The code ")],  # the program block and the blank line after it
        None,
    ),
    "plan_path_split": Case(
        "plan_path_split_at_grpo",
        [
            f"env.kwargs={{n_train: 4, n_eval: 2, n_test: {PROBLEMS}}}",
            "env.max_turns=1",
            "team.agents=[{name: scout, max_completion_length: 32}, "
            "{name: planner, max_completion_length: 8}]",
        ],
        "scout",
        "planner",
        "[scout, turn 1]\n",
        "\n\nTurn 1 of 1.",
        lambda m: "[scout, turn 1]\n",
        scout_and_planner,
    ),
    "tldr": Case(
        "tldr_at_grpo",
        [
            f"env.kwargs={{source: offline, limit: {PROBLEMS}}}",
            "team.agents=[{name: concise, max_completion_length: 32}, "
            "{name: detailed, max_completion_length: 8}]",
        ],
        "concise",
        "detailed",
        "[concise wrote]\n",
        None,
        lambda m: "[concise wrote]\n",
        concise_and_detailed,
    ),
}


def evaluate(case: Case, tmp_path, modes: list[str]) -> tuple[dict, dict]:
    """The report of ``evaluate_trainer`` on the first test problems, and every prompt the
    policies received: {(agent, problem): [observation of each pass, in pass order]}."""
    overrides = [
        "model.name_or_path=tiny-llama",
        "env.reward_workers=1",
        "log.progress_bar=false",
        f"eval.message_ablation=[{', '.join(modes)}]",
        *case.overrides,
    ]
    trainer = Trainer(load_config(case.config, overrides), run_dir=tmp_path / "run")
    problems = {json.dumps(ex, sort_keys=True): i for i, ex in enumerate(trainer.task.test)}
    prompts: dict[tuple[str, int], list[str]] = defaultdict(list)
    encode = trainer.team.encode_prompt

    def capture(agent, observation, example):
        prompts[(agent, problems[json.dumps(example, sort_keys=True)])].append(observation)
        return encode(agent, observation, example)

    trainer.team.encode_prompt = capture
    with prompt_backend(trainer.team, case.reply) if case.reply else contextlib.nullcontext():
        report = evaluate_trainer(trainer, "test", num_samples=0, ks=(1,), limit=PROBLEMS)
    return report, dict(prompts)


def split_at_message(case: Case, prompt: str) -> tuple[str, str, str]:
    """(before, message, after) of the receiver's un-ablated prompt."""
    start = prompt.index(case.starts)
    end = len(prompt) if case.ends is None else prompt.index(case.ends, start)
    return prompt[:start], prompt[start:end], prompt[end:]


@pytest.fixture(autouse=True)
def in_process_sandbox(monkeypatch):
    monkeypatch.setattr(games, "sandbox_runner", run_in_process)


@pytest.mark.parametrize("name", list(CASES))
def test_only_the_message_span_changes_and_the_swap_brings_the_next_board(name, tmp_path):
    case = CASES[name]
    report, prompts = evaluate(case, tmp_path, MODES)
    assert set(prompts) == {(a, p) for a in (case.sender, case.receiver) for p in range(PROBLEMS)}
    for problem in range(PROBLEMS):
        # the sender's prompt: the same in every pass (it reads no message this turn)
        sent = prompts[(case.sender, problem)]
        assert len(sent) == len(PASSES) and all(p == sent[0] for p in sent), problem
    received = {p: dict(zip(PASSES, prompts[(case.receiver, p)])) for p in range(PROBLEMS)}
    assert all(len(prompts[(case.receiver, p)]) == len(PASSES) for p in range(PROBLEMS))
    messages = [split_at_message(case, received[p]["base"])[1] for p in range(PROBLEMS)]
    # each board's message is its own: a swap is visible
    assert len(set(messages)) == PROBLEMS, messages
    for problem in range(PROBLEMS):
        before, message, after = split_at_message(case, received[problem]["base"])
        assert message.strip() and case.unused(message) in message
        shown = received[problem]
        assert shown["empty"] == before + after
        assert shown["control"] == before + message.replace(case.unused(message), "", 1) + after
        # the swap: the message of the next evaluated problem, wrapping round
        assert shown["swap"] == before + messages[(problem + 1) % PROBLEMS] + after
    # the ablated metrics sit beside the un-ablated ones, each under a key of its own that
    # names its mode and the un-ablated metric it repeats
    ablated = {k for k in report if k.startswith("ablation/")}
    plain = set(report) - ablated
    for key in ablated:
        _, mode, metric = key.split("/", 2)
        assert mode in MODES and (metric in plain or metric == "messages"), key
    for mode in MODES:
        assert report[f"ablation/{mode}/messages"] == 1.0  # one message per problem
        assert f"ablation/{mode}/greedy/reward" in ablated
        assert f"ablation/{mode}/greedy/reward" in report["ci95"]
    assert "greedy/reward" in plain and not ablated & plain


def test_the_ablation_leaves_the_unablated_report_as_it_was(tmp_path):
    case = CASES["plan_path"]
    plain, plain_prompts = evaluate(case, tmp_path / "plain", [])
    ablated, ablated_prompts = evaluate(case, tmp_path / "ablated", MODES)
    assert not any(k.startswith("ablation/") for k in plain)
    assert {k: v for k, v in ablated.items() if not k.startswith("ablation/")} | {
        "ci95": {k: v for k, v in ablated["ci95"].items() if not k.startswith("ablation/")}
    } == plain
    # the un-ablated pass showed the same prompts with or without the ablation after it
    assert {k: v[:1] for k, v in ablated_prompts.items()} == plain_prompts


def test_a_swap_needs_two_problems(tmp_path):
    case = CASES["plan_path"]
    overrides = ["model.name_or_path=tiny-llama", "eval.message_ablation=[swap]", *case.overrides]
    trainer = Trainer(load_config(case.config, overrides), run_dir=tmp_path / "run")
    with pytest.raises(Exception, match=r"eval.message_ablation: 'swap' .* at least 2 problems"):
        evaluate_trainer(trainer, "test", num_samples=0, ks=(1,), limit=1)


# --------------------------------------------------------------------------------------
# The declared tables: valid configs, the views' teams, the ablation columns, and the twins
# whose runs the messages tables evaluate.


def test_the_split_table_rows_build_their_tasks_and_teams():
    from experiments.runner import run_overrides
    from experiments.tables import TABLES
    from teamrl.tasks.registry import bind_task, task_from_config

    table = TABLES["plan_path_split"]
    assert [c.name for c in table.conditions] == [
        "untrained",
        "traj_grpo_shared",
        "at_grpo_shared",
        "at_grpo_lora",
        "full_grpo",
        "scout_alone_grpo",
        "planner_alone_grpo",
    ]
    assert table.metrics[2:] == (
        "ablation/empty/greedy/accuracy",
        "ablation/swap/greedy/accuracy",
        "ablation/control/greedy/accuracy",
        "ablation/empty/messages",
    )
    teams = {}
    for cond in table.conditions:
        cfg = load_config(table.config, run_overrides(table, cond, 0, "runs"))
        task = task_from_config(cfg.env)
        bind_task(cfg, task, list(task.make_env().agents))  # names and order must match
        assert cfg.eval.message_ablation == MODES and cfg.env.max_turns == 1
        assert (cfg.env.kwargs["size"], len(task.test)) == (4, 64)
        teams[cond.name] = (cfg.env.kwargs["view"], cfg.algorithm.name, cfg.team.policies)
        teams[cond.name] += tuple((a.name, a.response_prefix) for a in cfg.team.agents)
    plan = ("planner", "#### ['")
    assert teams == {
        "untrained": ("split", "at_grpo", "shared", ("scout", ""), plan),
        "traj_grpo_shared": ("split", "grpo", "shared", ("scout", ""), plan),
        "at_grpo_shared": ("split", "at_grpo", "shared", ("scout", ""), plan),
        "at_grpo_lora": ("split", "at_grpo", "lora", ("scout", ""), plan),
        "full_grpo": ("full", "grpo", "shared", plan),
        "scout_alone_grpo": ("scout_alone", "grpo", "shared", ("scout", "#### ['")),
        "planner_alone_grpo": ("planner_alone", "grpo", "shared", plan),
    }


@pytest.mark.parametrize("name", ["plan_path_messages", "tldr_messages"])
def test_a_messages_table_scores_its_twins_runs_under_their_own_config(name, tmp_path):
    from experiments.runner import EVAL_ONLY, check_same_config, config_diff, run_overrides
    from experiments.tables import TABLES
    from teamrl.config import to_dict

    table = TABLES[name]
    reused = [c for c in table.conditions if c.from_run]
    assert reused and all(c.from_run.split(":")[0] != name for c in reused)
    for cond in reused:
        other, _, twin_name = cond.from_run.partition(":")
        (twin,) = [c for c in TABLES[other].conditions if c.name == twin_name]
        mine = to_dict(load_config(table.config, run_overrides(table, cond, 0, "runs")))
        theirs = to_dict(
            load_config(TABLES[other].config, run_overrides(TABLES[other], twin, 0, "runs"))
        )
        assert mine["eval"]["message_ablation"] == MODES
        assert config_diff(mine, theirs) == ["eval.message_ablation", "run_name"]
        # the runner's check on the twin's checkpoint passes on that difference alone
        ckpt = tmp_path / cond.name
        ckpt.mkdir()
        (ckpt / "config.yaml").write_text(yaml.safe_dump(theirs))
        check_same_config(ckpt, mine, ignore=("run_name", *EVAL_ONLY))
    assert EVAL_ONLY == ("eval.message_ablation",)
