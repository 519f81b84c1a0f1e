"""How a run executes: who samples a step's rollout, where the policies live, how they update.

The trainer drives one ``Execution`` and never asks which one it has:

    batch = execution.next_batch(step)           the step's rollout, tagged with the version
                                                 (learner updates applied) of the weights that
                                                 sampled it
    execution.update(policy, samples, ...)       one policy's update -> (metrics, NaN skips)
    execution.weights_updated(version)           after the step's updates: the sampler's turn
    with execution.paused(): ...                 nothing samples meanwhile (eval, checkpoints)
    execution.apply_schedule(policy, lr, cfg)    after a checkpoint load
    execution.stop()                             end any background sampling (the next
                                                 next_batch starts it again)

Three implementations:

- ``LocalExecution`` (here): this process samples from the live models and updates them.
- ``RayExecution`` (``teamrl.execution.remote``): one worker group of Ray actors per policy.
- ``AsyncExecution`` (``teamrl.execution.asynchronous``): a generator thread samples the next
  steps' rollouts on its own copy of the weights while the learner updates
  (``algorithm.max_staleness`` > 0); the learner is either of the two above, which also
  makes the copy (``sampler_team``: a ``Team`` here, more worker groups on Ray).

``teamrl.execution.choose.make_execution`` picks one from the config; it is the only place that
knows the choice. ``teamrl.execution.protocol`` holds the seam's types: ``Execution`` (the calls
above), ``Learner`` (what ``AsyncExecution`` wraps), ``TrainingRollout`` (the algorithm's recipe
on the task's envs, which every execution receives) and ``RolloutBatch``.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

from teamrl.config import Config
from teamrl.distributed import DistContext
from teamrl.execution.protocol import RolloutBatch, TrainingRollout, UpdateJob, one_by_one
from teamrl.run import checkpoints
from teamrl.run.data_stream import DataStream
from teamrl.sample import Sample
from teamrl.team.optim import lr_lambda, make_optimizer
from teamrl.team.policies import Policy, Team
from teamrl.update.joint import joint_blocker, update_policies
from teamrl.update.policy import UpdateResult, update_policy
from teamrl.update.settings import UpdateSettings, update_settings


class LocalExecution:
    """Sample from the live models and update them, in this process, one after the other."""

    def __init__(self, cfg: Config, rollout: TrainingRollout, data: DataStream):
        self.cfg, self.data, self.rollout = cfg, data, rollout
        self.settings: dict[str, UpdateSettings] = {}  # per policy, built at its first update
        self.told: set[str] = set()  # why a one-pass LoRA update fell back (said once each)
        self.team = Team(cfg, rollout.role_prompts)
        for pol in self.team.policies.values():
            make_optimizer(pol, cfg)

    def next_batch(self, step: int) -> RolloutBatch:
        examples = self.data.next(self.cfg.train.prompts_per_step)
        return RolloutBatch(step, self.rollout(self.team, examples, step), version=step)

    def update(
        self,
        pol: Policy,
        samples: list[Sample],
        cfg: Config,
        *,
        step: int,
        max_completion_length: int,
        ctx: DistContext,
    ) -> tuple[dict[str, float], int]:
        out = update_policy(
            pol,
            samples,
            self._settings(pol, cfg),
            step=step,
            max_completion_length=max_completion_length,
            ctx=ctx,
        )
        return self._done(pol, out)

    def update_team(
        self, jobs: list[UpdateJob], cfg: Config, *, step: int, ctx: DistContext
    ) -> list[tuple[dict[str, float], int]]:
        """With team.policies=lora (train.one_pass_lora), every agent's adapter in one
        forward/backward (teamrl.update.joint); else, or where that cannot apply (a warning
        says why, once), one policy after the other."""
        if cfg.team.policies != "lora" or not cfg.train.one_pass_lora or len(jobs) < 2:
            return one_by_one(self, jobs, cfg, step=step, ctx=ctx)
        pols = [j.pol for j in jobs]
        settings = [self._settings(p, cfg) for p in pols]
        why = joint_blocker(pols, settings, ctx)
        if why:
            if why not in self.told:
                self.told.add(why)
                warnings.warn(
                    f"train.one_pass_lora: the agents' adapters update one after the other: {why}",
                    stacklevel=2,
                )
            return one_by_one(self, jobs, cfg, step=step, ctx=ctx)
        outs = update_policies(
            pols,
            [j.samples for j in jobs],
            settings,
            step=step,
            max_completion_length=[j.max_completion_length for j in jobs],
            ctx=ctx,
        )
        return [self._done(p, out) for p, out in zip(pols, outs)]

    def _settings(self, pol: Policy, cfg: Config) -> UpdateSettings:
        if pol.name not in self.settings:  # once per run: the config does not change
            self.settings[pol.name] = update_settings(cfg, pol.agents)
        return self.settings[pol.name]

    def _done(self, pol: Policy, out: UpdateResult) -> tuple[dict[str, float], int]:
        if out.stepped and pol.engine.backend is not None:  # the sampler reloads its copy
            pol.engine.backend.weights_changed(pol.adapter)
        return out.metrics, out.skipped

    def weights_updated(self, version: int) -> None:
        pass  # the sampler is the live model

    @contextmanager
    def paused(self):
        yield  # nothing samples between steps

    def apply_schedule(self, pol: Policy, lr: float, cfg: Config) -> None:
        checkpoints.apply_schedule(pol, lr, lr_lambda(cfg), cfg)

    def stop(self) -> None:
        pass

    def sampler_team(self) -> Team:
        """A second copy of the models to sample from while these update (``AsyncExecution``)."""
        return Team(self.cfg, self.rollout.role_prompts)
