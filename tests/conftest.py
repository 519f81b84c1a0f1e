"""Shared fixtures and hooks: a per-session model cache, CUDA tests skipped without CUDA.

Plain helpers (small configs on tiny models, runs in a subprocess) live in tests/helpers/."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# tests/vllm needs vLLM in its own venv (make test-vllm sets TEAMRL_TEST_VLLM=1): the main
# suite never collects it, with or without vLLM installed.
collect_ignore = [] if os.environ.get("TEAMRL_TEST_VLLM") else ["vllm"]
# tests/frameworks runs apps built on real multi-agent frameworks (the apps-langgraph extra): its
# own tier in .ci/run (TEAMRL_TEST_FRAMEWORKS=1), never collected by the main suite.
if not os.environ.get("TEAMRL_TEST_FRAMEWORKS"):
    collect_ignore.append("frameworks")
# tests/browser drives Chromium: its own tier (make test-browser sets TEAMRL_TEST_BROWSER=1)
if not os.environ.get("TEAMRL_TEST_BROWSER"):
    collect_ignore.append("browser")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` are skipped where there is no CUDA GPU (tests/test_cuda.py)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _cache(tmp_path_factory):
    # Tiny models and their tokenizer are built once per session, offline, into a temp cache.
    if "TEAMRL_TEST_CACHE" in os.environ:
        os.environ["TEAMRL_CACHE"] = os.environ["TEAMRL_TEST_CACHE"]
    else:
        os.environ["TEAMRL_CACHE"] = str(tmp_path_factory.mktemp("teamrl-cache"))
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    # Tiny models gain nothing from intra-op threads, and on a busy 2-core machine the threads
    # spin against each other and against sandbox subprocesses (one thread was ~5x faster).
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
