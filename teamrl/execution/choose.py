"""Which execution a config asks for (``teamrl.execution.local``): the learner is Ray worker groups
with ``distributed.backend=ray``, else this process; with ``algorithm.max_staleness`` > 0 an
asynchronous generator samples beside it, else the learner samples itself, synchronously."""

from __future__ import annotations

from teamrl.algorithms.recipe import Recipe
from teamrl.config import Config
from teamrl.envs.base import Task
from teamrl.execution.asynchronous import AsyncExecution
from teamrl.execution.local import LocalExecution
from teamrl.execution.protocol import Execution, Learner, TrainingRollout
from teamrl.run.data_stream import DataStream


def make_execution(cfg: Config, task: Task, data: DataStream, recipe: Recipe) -> Execution:
    """The execution the config asks for (see the module docstring), running ``recipe``'s
    training rollout on ``task``'s envs."""
    rollout = TrainingRollout(recipe, task, cfg)
    learner: Learner
    if cfg.distributed.backend == "ray":
        from teamrl.execution.remote import RayExecution

        learner = RayExecution(cfg, rollout, data)
    else:
        learner = LocalExecution(cfg, rollout, data)
    if cfg.algorithm.max_staleness > 0:
        return AsyncExecution(learner, cfg)
    return learner
