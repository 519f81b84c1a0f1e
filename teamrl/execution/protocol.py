"""The execution seam, as types: what the trainer drives (``Execution``), what an asynchronous
generator wraps (``Learner``), the rollout every execution runs (``TrainingRollout``: the
algorithm's recipe on the task's envs) and what a step's rollout arrives as (``RolloutBatch``).
``teamrl.execution.local`` says what each call means; ``choose.make_execution`` picks one."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from teamrl.algorithms.recipe import Recipe
from teamrl.config import Config
from teamrl.distributed import DistContext
from teamrl.envs.base import Task
from teamrl.rollout.common import RolloutResult
from teamrl.run.data_stream import DataStream
from teamrl.sample import Sample
from teamrl.team.policies import Team


@dataclass(frozen=True)
class TrainingRollout:
    """The run's training rollout: ``recipe.rollout`` on fresh envs of ``task``. Every execution
    calls it on its own team (the learner's, or an asynchronous generator's copy)."""

    recipe: Recipe
    task: Task
    cfg: Config

    def __call__(self, team: Team, examples: Sequence, step: int) -> RolloutResult:
        return self.recipe.rollout(team, self.task.make_env, examples, self.cfg, step=step)

    @property
    def role_prompts(self) -> dict[str, str]:
        """The task's default system prompt per agent (a config may override them)."""
        return self.task.agents


@dataclass
class RolloutBatch:
    """One step's rollout as the learner receives it."""

    step: int  # the trainer step it feeds (0-based)
    result: RolloutResult
    version: int  # learner updates applied to the weights that sampled it
    # the data stream's position right after this batch's examples were drawn (what a
    # checkpoint after this step records); None: the stream's own position is it (synchronous)
    data_state: dict | None = None
    wait_seconds: float = 0.0  # how long the learner waited for it
    stats: dict[str, float] = field(default_factory=dict)  # the generator's own timings


@dataclass(frozen=True)
class UpdateJob:
    """One policy's update of a step: its samples and its agents' largest budget."""

    pol: Any
    samples: list[Sample]
    max_completion_length: int


def one_by_one(
    execution: Execution, jobs: list[UpdateJob], cfg: Config, *, step: int, ctx: DistContext
) -> list[tuple[dict[str, float], int]]:
    """``update_team`` as one ``update`` per policy, in order."""
    return [
        execution.update(
            j.pol, j.samples, cfg, step=step, max_completion_length=j.max_completion_length, ctx=ctx
        )
        for j in jobs
    ]


class Execution(Protocol):
    """Who samples a step's rollout, where the policies live, how they update."""

    team: Team
    data: DataStream

    def next_batch(self, step: int) -> RolloutBatch: ...

    def update(
        self,
        pol: Any,
        samples: list[Sample],
        cfg: Config,
        *,
        step: int,
        max_completion_length: int,
        ctx: DistContext,
    ) -> tuple[dict[str, float], int]:
        """One policy's update: its metrics and the number of steps skipped (NaN)."""

    def update_team(
        self, jobs: list[UpdateJob], cfg: Config, *, step: int, ctx: DistContext
    ) -> list[tuple[dict[str, float], int]]:
        """Several policies' updates of one step (``update``'s result for each, in order): an
        execution may run them together (LocalExecution: one pass for LoRA agents)."""

    def weights_updated(self, version: int) -> None: ...

    def paused(self) -> AbstractContextManager[None]: ...

    def apply_schedule(self, pol: Any, lr: float, cfg: Config) -> None: ...

    def stop(self) -> None: ...


class Learner(Execution, Protocol):
    """An execution an asynchronous generator can sample beside: it makes the generator's copy
    of the models and lends it its training rollout."""

    rollout: TrainingRollout

    def sampler_team(self) -> Team: ...
