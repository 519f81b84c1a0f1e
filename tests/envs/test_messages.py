"""The message seam (teamrl.envs.messages): the bank a swap draws from, the relays of each
mode, and the envs that show a teammate's message through it (SequentialTurns, ToolPlanEnv's
report and history lines)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest

from teamrl.envs.base import Step
from teamrl.envs.messages import (
    PASS_THROUGH,
    Message,
    MessageBank,
    RelayedEnv,
    relayed,
)
from teamrl.envs.sequential import SequentialTurns
from teamrl.tasks.games.plan_path import plan_path_task


def msg(text: str, turn: int = 0, sender: str = "a", unused: str = "") -> Message:
    return Message(sender, "b", turn, text, "message", unused)


def bank_of(texts: dict[int, dict[int, str]]) -> MessageBank:
    """A bank over problems 0..n-1 with ``texts[problem][turn]`` recorded."""
    bank = MessageBank([(i, {"row": i}) for i in range(len(texts))])
    rec = bank.recorder()
    for problem, by_turn in texts.items():
        relay = rec.for_example({"row": problem})
        for turn, text in by_turn.items():
            assert relay.show(msg(text, turn)) == text  # recording shows it as written
    return bank


def test_a_swap_takes_the_next_problem_that_has_the_message_wrapping_round():
    bank = bank_of({0: {0: "m0", 1: "m0 again"}, 1: {0: "m1"}, 2: {0: "m2", 1: "m2 again"}})
    swap = bank.ablation("swap")
    shown = {p: swap.for_example({"row": p}).show(msg("mine")) for p in range(3)}
    assert shown == {0: "m1", 1: "m2", 2: "m0"}
    # turn 1: problem 1 has none, so 0 takes 2's; only problem 0 and 2 have one
    later = {p: swap.for_example({"row": p}).show(msg("mine", 1)) for p in range(3)}
    assert later == {0: "m2 again", 1: "m2 again", 2: "m0 again"}
    # no other problem has one: the empty message
    assert swap.for_example({"row": 0}).show(msg("mine", 5)) == ""
    # distinct messages shown: turns 0, 1 and 5 on problem 0, turns 0 and 1 on the others
    assert swap.messages_per_problem() == pytest.approx((3 + 2 + 2) / 3)


def test_a_repeated_row_is_one_problem_so_a_swap_never_draws_its_own_board():
    bank = MessageBank([(0, {"row": 0}), (1, {"row": 1}), (2, {"row": 0})])
    assert bank.order == [0, 1] and bank.problem({"row": 0}) == 0
    rec = bank.recorder()
    rec.for_example({"row": 0}).show(msg("zero"))
    rec.for_example({"row": 1}).show(msg("one"))
    assert bank.ablation("swap").for_example({"row": 0}).show(msg("x")) == "one"
    with pytest.raises(KeyError, match="not one of the evaluated"):
        bank.problem({"row": 9})


def test_empty_and_control_relays():
    bank = bank_of({0: {}})
    empty = bank.ablation("empty").for_example({"row": 0})
    control = bank.ablation("control").for_example({"row": 0})
    labelled = msg("[a wrote]\nhello", unused="[a wrote]\n")
    assert empty.show(labelled) == ""
    assert control.show(labelled) == "hello"
    assert control.show(msg("no unused part")) == "no unused part"
    assert PASS_THROUGH.show(labelled) == labelled.text
    with pytest.raises(ValueError, match=r"^Message.unused: 'zz' is not a part of its text$"):
        msg("hello", unused="zz")
    with pytest.raises(ValueError, match=r"^message ablation: expected one of \['empty', "):
        bank.ablation("mute")
    # a copied env (a tree's branch) keeps the relay of its episode, not a copy of the bank
    assert copy.deepcopy(empty) is empty


class Pair:
    """Two simultaneous writers; the reward is the total length of their answers."""

    agents = ["first", "second"]

    def reset(self, example):
        return {a: f"{a}: write about {example['topic']}" for a in self.agents}

    def step(self, actions):
        done = {a: True for a in self.agents}
        return Step(
            observations=self.reset({"topic": "done"}),
            reward=float(sum(len(t) for t in actions.values())),
            terminations=done,
        )


class Upper:
    def show(self, message: Message) -> str:
        return message.text.upper()


def test_sequential_turns_relay_a_teammate_answer_and_not_ones_own():
    env = SequentialTurns(Pair(), ["first", "second"])
    env.relay = Upper()
    env.reset({"topic": "cats"})
    step = env.step({"first": "purr"})
    head = "Your teammates' answers so far this turn:\n\n"
    assert step.observations["second"] == f"second: write about cats\n\n{head}[FIRST WROTE]\nPURR"
    assert step.observations["first"] == f"first: write about cats\n\n{head}[first wrote]\npurr"
    # the reward reads the answers as written
    assert env.step({"second": "hiss"}).reward == 8.0


def test_the_relayed_env_binds_each_episode_to_its_problem():
    bank = MessageBank([(0, {"topic": "cats"}), (1, {"topic": "dogs"})])
    rec = bank.recorder()
    make = relayed(lambda: SequentialTurns(Pair(), ["second", "first"]), rec)
    for topic, answer in (("cats", "purr"), ("dogs", "woof")):
        env = make()
        assert isinstance(env, RelayedEnv) and env.turn_order == ["second", "first"]
        env.reset({"topic": topic})
        env.step({"second": answer})
    key = ("second", "first", 0, "turn")
    assert bank.texts == {0: {key: "[second wrote]\npurr"}, 1: {key: "[second wrote]\nwoof"}}
    swapped = relayed(lambda: SequentialTurns(Pair(), ["second", "first"]), bank.ablation("swap"))
    env = swapped()
    env.reset({"topic": "cats"})
    assert env.step({"second": "purr"}).observations["first"].endswith("[second wrote]\nwoof")
    # an env that shows no message is stepped as it is: nothing to count
    quiet = bank.ablation("empty")
    env = relayed(Pair, quiet)()
    assert env.reset({"topic": "cats"}) == Pair().reset({"topic": "cats"})
    assert quiet.messages_per_problem() == 0.0
    assert getattr(env, "turn_order", None) is None  # simultaneous, as the env it wraps


@dataclass
class Printed:
    """A sandbox result: the program printed ``['R']``."""

    stdout: str = "['R']"
    stderr: str = ""
    ok: bool = True
    timed_out: bool = False


def test_the_plan_agent_reads_the_tool_report_and_later_proposals_through_the_relay():
    task = plan_path_task(
        size=3, n_train=1, n_eval=1, n_test=1, max_turns=2, runner=lambda code: Printed()
    )
    seen: list[Message] = []

    class Marked:
        def show(self, message: Message) -> str:
            seen.append(message)
            return f"<{message.channel}>"

    obs = {}
    for name in ("plain", "marked"):
        env = task.make_env()
        if name == "marked":
            env.relay = Marked()
        env.reset(task.test[0])
        first = env.step({"tool": "print(['R'])"}).observations
        env.step({"plan": "#### [nothing]"})  # no list: the board stays, turn 2 comes
        second = env.step({"tool": "print(['R'])"}).observations
        obs[name] = (first, second)
    (p1, p2), (m1, m2) = obs["plain"], obs["marked"]
    assert m1["tool"] == p1["tool"] and m2["tool"] == p2["tool"]  # the tool reads no message
    report = p1["plan"][p1["plan"].index("The tool agent wrote") : p1["plan"].index("\n\nYou are")]
    assert m1["plan"] == p1["plan"].replace(report, "<report>")
    simulated = report.split("Simulated result: ")[1].split("\n")[0]
    applied = "; plan applied (no action list found)"
    assert f"Turn 1: tool proposed ['R'] (simulated: {simulated}){applied}" in p2["plan"]
    assert f"Turn 1: tool proposed ['R'] (simulated: {simulated}){applied}" in p2["tool"]
    report2 = p2["plan"][p2["plan"].index("The tool agent wrote") : p2["plan"].index("\n\nYou are")]
    expected = p2["plan"].replace(report2, "<report>")
    assert m2["plan"] == expected.replace(f"['R'] (simulated: {simulated})", "<history>", 1)
    # each time an observation is built: the report, then the history line at every later one
    assert [(m.channel, m.turn) for m in seen] == [
        ("report", 0),
        ("history", 0),
        ("history", 0),
        ("report", 1),
    ]
    assert seen[0].unused == report[: report.index("The code ")]


class Marking:
    """A relay that records each message and shows its channel in its place."""

    def __init__(self):
        self.seen: list[Message] = []

    def show(self, message: Message) -> str:
        self.seen.append(message)
        return f"<{message.channel}>"


def test_the_math_reasoner_and_tool_read_each_other_through_the_relay():
    from teamrl.sandbox import ExecResult
    from teamrl.tasks.math.env import MathEnv, MathEnvConfig

    printed = {"print(6 * 8)": ExecResult("48\n", "", 0, False, None, 0.01)}
    example = {"question": "Compute 6 x 7.", "answer": "42"}
    fence = "```python\nprint(6 * 8)\n```"
    obs, relays = {}, {}
    for name in ("plain", "marked"):
        env = MathEnv(MathEnvConfig(mode="sequential", max_turns=2), runner=printed.__getitem__)
        if name == "marked":
            env.relay = relays[name] = Marking()
        env.reset(example)
        first = env.step({"tool": fence}).observations
        second = env.step({"reasoner": r"\boxed{42}"}).observations  # 48 vs 42: turn 2
        third = env.step({"tool": fence}).observations
        env.step({"reasoner": r"\boxed{42}"})  # out of turns: nothing more is shown
        obs[name] = (first, second, third)
    (p1, p2, p3), (m1, m2, _) = obs["plain"], obs["marked"]
    report = p1["reasoner"].split("(it may be wrong):\n")[1].split("\n\nSolve")[0]
    assert report.startswith("Program:\n```python\nprint(6 * 8)\n```\nRun: ok.")
    assert report.endswith("Program's answer: 48")
    assert m1["reasoner"] == p1["reasoner"].replace(report, "<report>")
    assert m1["tool"] == p1["tool"]  # the tool reads no message in turn 1
    # turn 2: each is shown its own attempt as it was, the other's through the relay
    assert m2["tool"] == p2["tool"].replace("Reasoner's answer: 42", "Reasoner's answer: <history>")
    assert report in m2["tool"]
    assert m2["reasoner"] == p2["reasoner"].replace(report, "<history>", 1)
    assert "Reasoner's answer: 42" in m2["reasoner"]
    seen = [(m.sender, m.receiver, m.turn, m.channel) for m in relays["marked"].seen]
    assert seen == [
        ("tool", "reasoner", 0, "report"),  # turn 1, the tool's step
        ("reasoner", "tool", 0, "history"),  # the reasoner's step closes turn 1
        ("tool", "reasoner", 0, "history"),
        ("reasoner", "tool", 0, "history"),  # turn 2, the tool's step
        ("tool", "reasoner", 0, "history"),
        ("tool", "reasoner", 1, "report"),
    ]
    first_report = relays["marked"].seen[0]
    assert first_report.text == report and first_report.unused == report.split("Run:")[0]
    assert "<" not in p3["reasoner"]  # the plain env shows everything as written


def test_the_coder_and_tester_read_each_other_through_the_relay():
    from teamrl.tasks.coding.coder_tester import CodeContestConfig, CoderTesterEnv

    row = {
        "question": "Read two integers a and b and print a + b.",
        "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}],
        "solution": "a, b = map(int, input().split())\nprint(a + b)\n",
    }
    wrong = "a, b = map(int, input().split())\nprint(a * b)\n"
    cases = "<input>\n1 2\n</input>\n<output>\n3\n</output>"
    obs, relays = {}, {}
    for name in ("plain", "marked"):
        env = CoderTesterEnv(CodeContestConfig(max_turns=2, max_tests=2))
        if name == "marked":
            env.relay = relays[name] = Marking()
        env.reset(row)
        first = env.step({"coder": f"```python\n{wrong}```"}).observations
        second = env.step({"tester": cases}).observations
        env.step({"coder": f"```python\n{wrong}```"})
        env.step({"tester": cases})  # out of turns: nothing more is shown
        obs[name] = (first, second)
    (p1, p2), (m1, m2) = obs["plain"], obs["marked"]
    program = relays["marked"].seen[0].text  # the program as the env committed it
    assert program.strip() == wrong.strip()
    assert m1["tester"] == p1["tester"].replace(program, "<program>")
    assert m1["coder"] == p1["coder"]  # before any cases, the coder reads no message
    report = p2["coder"].split("what your program did:\n\n")[1].split("\n\nThe teammate's")[0]
    assert "1 2" in report and "FAILED" in report
    assert m2["coder"] == p2["coder"].replace(report, "<cases>")
    assert m2["tester"] == p2["tester"].replace(program, "<program>")
    seen = [(m.sender, m.receiver, m.turn, m.channel) for m in relays["marked"].seen]
    assert seen == [
        ("coder", "tester", 0, "program"),  # the coder's step
        ("tester", "coder", 0, "cases"),  # the tester's step closes turn 1
        ("coder", "tester", 0, "program"),
        ("tester", "coder", 0, "cases"),  # turn 2, the coder's step
        ("coder", "tester", 1, "program"),
    ]
