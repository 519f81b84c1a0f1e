"""The two-node tier runs only when asked (TEAMRL_TEST_RAY_NODES=1, as .ci/run and
`make test-ray-nodes` do): it starts two Ray nodes with `ray start` on this machine, apart from
the one-node cluster tests/ray shares, and takes a few minutes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# tests/ray's plain helpers (the exactness check on a worker group, a run's metrics and weights)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ray"))

ASKED = os.environ.get("TEAMRL_TEST_RAY_NODES", "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    if ASKED:
        return
    skip = pytest.mark.skip(reason="two Ray nodes: set TEAMRL_TEST_RAY_NODES=1 (.ci/run does)")
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().parent == here:
            item.add_marker(skip)
