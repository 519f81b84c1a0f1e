"""``RayExecution``: the ``teamrl.execution.local`` seam on Ray worker groups. The controller runs the
episodes (generation goes to each engine's group through ``RemoteBackend``); each policy
updates on its own group, data-parallel (``RemotePolicy.remote_update``)."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

from teamrl.config import Config
from teamrl.execution.protocol import RolloutBatch, TrainingRollout, UpdateJob, one_by_one
from teamrl.run.data_stream import DataStream
from teamrl.scale.group import ray_team


class RayExecution:
    """Synchronous, as ``LocalExecution``, with the models and optimizers on worker groups."""

    def __init__(self, cfg: Config, rollout: TrainingRollout, data: DataStream):
        self.cfg, self.data, self.rollout = cfg, data, rollout
        self.team = ray_team(cfg, rollout.role_prompts)  # optimizers live on the workers

    def next_batch(self, step: int) -> RolloutBatch:
        examples = self.data.next(self.cfg.train.prompts_per_step)
        return RolloutBatch(step, self.rollout(self.team, examples, step), version=step)

    def update(self, pol, samples, cfg, *, step, max_completion_length, ctx):
        return pol.remote_update(
            samples, cfg, step=step, max_completion_length=max_completion_length
        )

    def update_team(self, jobs: list[UpdateJob], cfg: Config, *, step: int, ctx):
        return one_by_one(self, jobs, cfg, step=step, ctx=ctx)  # each group updates its own

    def weights_updated(self, version: int) -> None:
        pass  # each worker samples from the replica its update just stepped

    @contextmanager
    def paused(self):
        yield

    def apply_schedule(self, pol, lr: float, cfg: Config) -> None:
        pol.apply_schedule(lr, cfg)  # on every rank of its group

    def stop(self) -> None:
        pass  # the groups outlive a train() call (export reads their weights); shutdown_team

    def sampler_team(self):
        """Generation-only worker groups, one per learner group, for ``AsyncExecution``: the
        generator thread samples on them while the learner's groups update. They never step
        an optimizer and always hold plain replicas (sharding=none: they only generate, from
        the weights the learner publishes). Listed among the learner team's worker groups, so
        ``shutdown_team`` ends them too."""
        d = dataclasses.replace(self.cfg.distributed, sharding="none")
        sampler = ray_team(dataclasses.replace(self.cfg, distributed=d), self.rollout.role_prompts)
        self.team.worker_groups.extend(sampler.worker_groups)
        return sampler
