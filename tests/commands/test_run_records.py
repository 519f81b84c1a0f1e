"""Malformed run files, as ``teamrl report`` and ``teamrl plot`` read them (through
teamrl.run.records): each is exit status 2 and one line naming the file and the line; a partial
last line (a live run writing it) is skipped with a note; config.yaml's aliases are bounded."""

from __future__ import annotations

import json
import warnings

import pytest
from helpers.cli import one_line_error

from teamrl.cli import main
from teamrl.commands.report import report_data

GOOD = {"step": 1, "reward/mean": 1.0, "loss/a": 0.5}
SAMPLE = {"step": 1, "example": 0, "slot": 0, "agent": "a", "turn": 0, "completion": "x"}


def _run(tmp_path, files: dict[str, str | bytes]):
    """A run folder with a good metrics.jsonl, and ``files`` (name -> contents) over it."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps(GOOD) + "\n")
    for name, text in files.items():
        (run / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return run


def _lines(*rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


GOOD_LINE = json.dumps(GOOD)
MALFORMED = {
    # name: (file, contents, the line named, what the error says)
    "a line that is a list": (
        "metrics.jsonl",
        _lines(GOOD, [1, 2]),
        2,
        "expected one JSON object per line, got a list",
    ),
    "a number line": ("metrics.jsonl", _lines(GOOD, "3", GOOD), 2, "got a number"),
    "a torn line mid-file": (
        "metrics.jsonl",
        _lines(GOOD, '{"step": 2, "rew', GOOD),
        2,
        "not JSON (Unterminated string starting at column 13)",
    ),
    "a torn line ended by its newline": (
        "metrics.jsonl",
        _lines(GOOD, '{"step": 2, "rew'),
        2,
        "not JSON",
    ),
    "bad UTF-8": (
        "metrics.jsonl",
        GOOD_LINE.encode() + b'\n{"step": 2, "x": "\xff"}\n',
        2,
        "not UTF-8 text (byte 0xff at column 19)",
    ),
    "a row without its step": ("metrics.jsonl", _lines(GOOD, {"loss/a": 1}), 2, "has no 'step'"),
    "a step that is no integer": (
        "metrics.jsonl",
        _lines({"step": "7", "loss/a": 1}),
        1,
        "'step' must be an integer, got \"7\"",
    ),
    "a sample whose joint is no list": (
        "samples.jsonl",
        _lines(SAMPLE, {**SAMPLE, "node": "root", "joint": 5}),
        2,
        "'joint' must be a list of strings or null, got 5",
    ),
    "a sample without its agent": (
        "samples.jsonl",
        _lines({k: v for k, v in SAMPLE.items() if k != "agent"}),
        1,
        "has no 'agent'",
    ),
    "a sample that is a string": ("samples.jsonl", _lines(SAMPLE, '"hi"'), 2, "got a string"),
    "an evaluation output that is no text": (
        "eval_samples.jsonl",
        _lines({**SAMPLE, "step": 0}, {**SAMPLE, "step": 0, "completion": 5}),
        2,
        "'completion' must be a string or null, got 5",
    ),
    "a resume without its step": ("resumes.jsonl", _lines({"time": 1.0}), 1, "has no 'step'"),
    "nested too deeply": ("metrics.jsonl", _lines("[" * 100_000 + "]" * 100_000), 1, "nested"),
    "config.yaml that does not parse": (
        "config.yaml",
        "algorithm:\n  name: magrpo\nteam: [a,\n  b: c\n",
        5,
        "invalid YAML",
    ),
    "config.yaml in bad UTF-8": ("config.yaml", b"algorithm:\n  name: \xffmagrpo\n", 2, "UTF-8"),
    "config.yaml with a NUL": (
        "config.yaml",
        "algorithm:\n  name: mag\x00rpo\n",
        2,
        "invalid YAML: character '\\x00' is not allowed",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_run_file_is_one_line_naming_the_file_and_line(tmp_path, capsys, case):
    name, contents, line, says = MALFORMED[case]
    run = _run(tmp_path, {name: contents})
    error = one_line_error(capsys, "report", str(run))
    assert f"{run / name}:{line}: " in error and says in error, error
    assert not (run / "report.html").exists()
    if name == "metrics.jsonl":  # plot reads it through the same reader
        assert one_line_error(capsys, "plot", str(run)) == error


@pytest.mark.parametrize(
    "config, says",
    [
        ("algorithm: [magrpo]\n", "algorithm must be a mapping, got list"),
        ("algorithm: {name: 3}\n", "algorithm.name must be a string, got int"),
        ("team: {agents: [{name: [a, b]}]}\n", "team.agents[0].name must be a string, got list"),
        ("team: {agents: [a]}\n", "team.agents[0] must be a mapping, got str"),
        ("- a\n- b\n", "expected a YAML mapping (a run's config), got a list"),
    ],
)
def test_a_config_value_the_page_shows_of_the_wrong_kind_is_one_line(
    tmp_path, capsys, config, says
):
    run = _run(tmp_path, {"config.yaml": config})
    error = one_line_error(capsys, "report", str(run))
    assert f"{run / 'config.yaml'}: {says}" in error


def test_a_partial_last_line_is_skipped_with_a_note_naming_it(tmp_path):
    """The trainer writes each line whole with its newline, so a last line without one that
    does not parse is being written (or was torn by a crash): the page leaves it out and says
    so, on the page and on stderr."""
    run = _run(
        tmp_path,
        {
            "metrics.jsonl": _lines(GOOD) + '{"step": 2, "reward/me',
            "samples.jsonl": _lines(SAMPLE) + '{"step": 1, "agent": "b", "comp',
        },
    )
    with pytest.warns(UserWarning) as warned:
        assert main(["report", str(run)]) == 0
    notes = [
        f"{run / name}:2: a partial last line (a run still writing it, or a write torn by a "
        "crash): skipped"
        for name in ("metrics.jsonl", "samples.jsonl")
    ]
    assert [str(w.message) for w in warned] == notes  # on stderr: one line each
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = report_data(run)
    assert data["steps"] == [1] and [s["agent"] for s in data["samples"]] == ["a"]
    assert [n for n in data["notes"] if "partial last line" in n] == notes
    # a complete object that only lacks its newline (a hand-written file) is kept
    (run / "metrics.jsonl").write_text(_lines(GOOD) + json.dumps({**GOOD, "step": 2}))
    (run / "samples.jsonl").unlink()
    assert report_data(run)["steps"] == [1, 2]


def _alias_bomb(levels: int) -> str:
    """Nine aliases of nine aliases ... of nine strings, as the first agent's name: a few
    hundred bytes that expand to 9**levels strings."""
    names = "abcdefghij"[:levels]
    lines = [f'{names[0]}: &{names[0]} ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip(names, names[1:]):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    lines.append("algorithm: {name: magrpo}")
    lines.append(f"team: {{agents: [{{name: *{names[-1]}}}]}}")
    return "\n".join(lines) + "\n"


def test_yaml_aliases_in_config_yaml_are_bounded(tmp_path, capsys):
    bomb = _alias_bomb(6)  # 9**6 strings: a page of megabytes from 400 bytes
    assert len(bomb) < 600
    run = _run(tmp_path, {"config.yaml": bomb})
    error = one_line_error(capsys, "report", str(run))
    assert f"{run / 'config.yaml'}: its YAML aliases expand it" in error and "alias bomb" in error
    assert not (run / "report.html").exists()
    # an alias that shares a few settings (a merge key) is read as YAML means it
    shared = "base: &base {lr: 0.001}\nteam:\n  agents:\n  - {name: alice, <<: *base}\n"
    (run / "config.yaml").write_text(shared + "  - {name: bob, <<: *base}\n")
    assert main(["report", str(run)]) == 0
    assert report_data(run)["agents"] == ["alice", "bob"]


def test_a_recursive_yaml_alias_is_one_line(tmp_path, capsys):
    run = _run(tmp_path, {"config.yaml": "algorithm: {name: magrpo}\nteam: &t {agents: [*t]}\n"})
    error = one_line_error(capsys, "report", str(run))
    assert f"{run / 'config.yaml'}:2: a recursive YAML alias" in error
