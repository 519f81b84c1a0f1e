"""The local Ray cluster the tests/ray modules share: 2 logical CPUs, no dashboard."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.util")  # "ray" alone would find this folder (a namespace package)
import ray  # noqa: E402

# Fractions of a logical CPU, so that several groups fit on the 2-CPU test cluster at once.
CPU = {"distributed.num_cpus_per_worker": 0.25}


@pytest.fixture(scope="session")
def ray_cluster(_cache):  # after conftest set the model cache the workers inherit
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    return ray.get_runtime_context().gcs_address
