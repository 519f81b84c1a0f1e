"""Issue 20, item 5: a task's data that cannot be had ends in one line, before any model loads.

``env.kwargs.source`` out of its choices, a hub dataset with no network (or in offline mode),
a hub id or folder that holds no data: each is a ``ConfigError`` naming the field and the
value and saying what to pass instead, for every task family that reads hub data (writing,
math, coding). A bug of our own (a TypeError) still shows its traceback.
"""

from __future__ import annotations

import datasets
import pytest
from helpers.cli import one_line_error

import teamrl.team.policies as team_module
from teamrl.config import ConfigError
from teamrl.tasks.registry import make_task


@pytest.fixture
def no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the error")

    monkeypatch.setattr(team_module, "load_model", refuse)


def quickstart(tmp_path, kwargs: str) -> list[str]:
    """``teamrl train quickstart 'env.kwargs=...' train.max_steps=1``, as a user types it."""
    return ["train", "quickstart", f"env.kwargs={kwargs}", "train.max_steps=1",
            f"log.output_dir={tmp_path}"]  # fmt: skip


@pytest.fixture
def hub_offline(monkeypatch):
    """The hub's offline mode (HF_HUB_OFFLINE=1), set after import as the libraries read it."""
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_a_source_that_is_not_a_choice_is_one_line(tmp_path, capsys, no_model):
    line = one_line_error(capsys, *quickstart(tmp_path, "{source: /etc}"))
    assert line.startswith("teamrl: error: env.kwargs.source: expected 'offline'")
    assert "got '/etc'" in line and "dataset_id=" in line


def test_the_hub_without_network_is_one_line_saying_what_to_pass(
    tmp_path, capsys, no_model, monkeypatch
):
    seen = []

    def no_network(path, *args, **kwargs):  # what datasets raises when the hub is unreachable
        seen.append(path)
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", no_network)
    line = one_line_error(capsys, *quickstart(tmp_path, "{source: hub}"))
    assert seen == ["trl-lib/tldr"]
    assert line.startswith(
        "teamrl: error: env.kwargs.dataset_id: cannot load the dataset 'trl-lib/tldr' "
        "(ConnectionError: Couldn't reach 'trl-lib/tldr' on the Hub"
    )
    assert "env.kwargs.source=offline" in line and "env.kwargs.dataset_id=<a local folder" in line


def test_the_hub_in_offline_mode_is_one_line(tmp_path, capsys, no_model, hub_offline):
    line = one_line_error(
        capsys, *quickstart(tmp_path, "{source: hub, dataset_id: teamrl-tests/no-such-set}")
    )
    assert "cannot load the dataset 'teamrl-tests/no-such-set' (ConnectionError" in line


@pytest.mark.parametrize("folder", ["/etc", "empty", "missing"])
def test_a_folder_with_no_data_is_one_line(tmp_path, capsys, no_model, folder):
    path = {"/etc": "/etc", "empty": tmp_path / "empty", "missing": tmp_path / "missing"}[folder]
    if folder == "empty":
        path.mkdir()
    line = one_line_error(capsys, *quickstart(tmp_path, f"{{source: hub, dataset_id: {path}}}"))
    assert f"env.kwargs.dataset_id: cannot load the dataset '{path}' (" in line
    assert "data file" in line, line  # datasets: "no (supported) data files found" and kin


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ("{limit: 0}", "env.kwargs.limit"),
        ("{limit: abc}", "env.kwargs.limit"),
        ("{source: hub, splits: x}", "env.kwargs.splits"),
        ("{source: hub, dataset_id: 7}", "env.kwargs.dataset_id"),
        ("{source: [hub]}", "env.kwargs.source"),
    ],
)
def test_other_writing_kwargs_are_one_line(tmp_path, capsys, no_model, kwargs, field):
    line = one_line_error(capsys, *quickstart(tmp_path, kwargs))
    assert line.startswith(f"teamrl: error: {field}: expected"), line


def test_math_and_coding_sources_and_data_are_config_errors(tmp_path, hub_offline):
    missing = str(tmp_path / "missing")
    cases = [
        ({"source": "/etc"}, "math", r"^env\.kwargs\.source: expected one of .*got '/etc'"),
        (
            {"source": "aime2024", "train_source": "x"},
            "math",
            r"^env\.kwargs\.train_source: expected 'arithmetic' or 'gsm8k', got 'x'",
        ),
        (
            {"source": "gsm8k", "dataset_id": missing},
            "math",
            rf"^env\.kwargs\.dataset_id: cannot load the dataset '{missing}' .*source=arithmetic",
        ),
        ({"source": "/etc"}, "code_contest", r"^env\.kwargs\.source .*got '/etc'"),
        (
            {"source": "apps", "dataset_id": missing},
            "code_contest",
            rf"^env\.kwargs\.dataset_id: cannot load the dataset '{missing}' ",
        ),
        ({"dataset_id": missing}, "mbpp", rf"cannot load the dataset '{missing}' "),
    ]
    for kwargs, task, pattern in cases:
        with pytest.raises(ConfigError, match=pattern) as err:
            make_task(task, **kwargs)
        assert "\n" not in str(err.value)


def test_a_bug_in_loading_keeps_its_traceback(monkeypatch):
    def bug(*args, **kwargs):
        raise AttributeError("'NoneType' object has no attribute 'oops'")

    monkeypatch.setattr(datasets, "load_dataset", bug)
    with pytest.raises(AttributeError, match="oops"):
        make_task("tldr", source="hub")
