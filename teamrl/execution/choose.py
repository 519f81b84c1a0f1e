"""Which execution a config asks for (``teamrl.execution.local``): the learner is Ray worker groups
with ``distributed.backend=ray``, else this process; with ``algorithm.max_staleness`` > 0 an
asynchronous generator samples beside it, else the learner samples itself, synchronously."""

from __future__ import annotations

from teamrl.config import Config
from teamrl.execution.asynchronous import AsyncExecution
from teamrl.execution.local import LocalExecution, RolloutFn
from teamrl.run.data_stream import DataStream


def make_execution(
    cfg: Config, role_prompts: dict | None, data: DataStream, rollout: RolloutFn
) -> LocalExecution:
    """The execution the config asks for (see the module docstring)."""
    if cfg.distributed.backend == "ray":
        from teamrl.execution.remote import RayExecution

        learner = RayExecution(cfg, role_prompts, data, rollout)
    else:
        learner = LocalExecution(cfg, role_prompts, data, rollout)
    if cfg.algorithm.max_staleness > 0:
        return AsyncExecution(learner, cfg, role_prompts)
    return learner
