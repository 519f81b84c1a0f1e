"""Which execution a config asks for (``teamrl.execution``): Ray worker groups with
``distributed.backend=ray``, an asynchronous generator with ``algorithm.max_staleness`` > 0,
else this process, synchronously."""

from __future__ import annotations

from teamrl.async_execution import AsyncExecution
from teamrl.config import Config
from teamrl.data_stream import DataStream
from teamrl.execution import LocalExecution, RolloutFn


def make_execution(
    cfg: Config, role_prompts: dict | None, data: DataStream, rollout: RolloutFn
) -> LocalExecution:
    """The execution the config asks for (see the module docstring)."""
    if cfg.distributed.backend == "ray":
        from teamrl.scale.execution import RayExecution

        return RayExecution(cfg, role_prompts, data, rollout)
    learner = LocalExecution(cfg, role_prompts, data, rollout)
    if cfg.algorithm.max_staleness > 0:
        return AsyncExecution(learner, cfg, role_prompts)
    return learner
