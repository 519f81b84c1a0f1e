"""Which execution a config asks for (``teamrl.execution``): the learner is Ray worker groups
with ``distributed.backend=ray``, else this process; with ``algorithm.max_staleness`` > 0 an
asynchronous generator samples beside it, else the learner samples itself, synchronously."""

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

        learner = RayExecution(cfg, role_prompts, data, rollout)
    else:
        learner = LocalExecution(cfg, role_prompts, data, rollout)
    if cfg.algorithm.max_staleness > 0:
        return AsyncExecution(learner, cfg, role_prompts)
    return learner
