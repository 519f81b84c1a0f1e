"""A tiny two-agent team shared by the app tests (tests/helpers/apps.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("openai", reason="the apps extra: pip install 'teamrl[apps]'")


@pytest.fixture(scope="session")
def team():
    from helpers.apps import tiny_cfg

    from teamrl.team.policies import Team

    return Team(tiny_cfg())
