"""The two-node tier runs only when asked (TEAMRL_TEST_RAY_NODES=1, as .ci/run and
`make test-ray-nodes` do): it starts two Ray nodes with `ray start` on this machine, apart from
the one-node cluster tests/ray shares, and takes a few minutes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ASKED = os.environ.get("TEAMRL_TEST_RAY_NODES", "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    if ASKED:
        return
    skip = pytest.mark.skip(reason="two Ray nodes: set TEAMRL_TEST_RAY_NODES=1 (.ci/run does)")
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().parent == here:
            item.add_marker(skip)
