"""Asynchronous training (``algorithm.max_staleness`` = S > 0): a generator thread samples the
next steps' rollouts on its own copy of the models while the learner updates. In one process
the copy is a second ``Team``; on Ray it is a second set of worker groups (generation only),
which the thread drives while the learner's groups update, so there the two really run on
different processes (and, on a cluster, different devices).

    generator (thread)                          learner (the trainer's thread)
    ------------------                          ------------------------------
    for k = first step, ...:                    for k = first step, ...:
      wait until version >= k - S                 batch k <- wait until it is ready
      load the newest published weights           advantages; update every policy
      draw examples; roll out (sampler copy)      version = k + 1; publish the weights
      batch k ready, tagged with the version      (eval and checkpoints: generator paused)

Version v = the learner updates applied (trainer steps done). Batch k is sampled by weights of
version w_k >= k - S and feeds update k + 1, so its staleness k - w_k is at most S, and at most
S + 1 batches are ever sampled ahead. S = 0 makes the generator wait for every update: the
synchronous schedule, through this same machinery (``tests/execution/test_async.py`` checks it equals the
synchronous trainer).

Stale samples: the update's first pass scores the samples under the learner's current weights
(pi_old, ratio 1) and importance sampling corrects for the sampler, q, with the capped weight
pi_old / q (``teamrl.update.importance``; always on when S > 0); later passes are clipped.

A rollout in flight when the weights change **finishes under its old version**. Dropping it
would waste its generation, which is the whole cost being hidden, and would starve the learner
whenever an update is shorter than a rollout; finishing it costs at most one more version of
staleness, which the bound S already admits (a batch is only started when its version is
fresh enough) and the importance weights correct. Weights move only between batches: the
generator loads the newest published snapshot before it starts one, so no rollout ever mixes
two versions.

Checkpoints record the data stream's position after the last batch the learner consumed, not
after what the generator drew ahead, so a resumed run (``--resume`` after ``kill -9``) draws the
unconsumed examples again: no sample is lost or used twice. Batches sampled ahead are dropped
at a checkpoint's resume and at ``stop``.

Cost: a second copy of the models (the sampler's), and one copy of the trainable weights per
step (a LoRA adapter, or the full model) for the published snapshot; on Ray the snapshot
travels from the learner group's rank 0 through the controller to every sampler worker.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import torch

from teamrl.config import Config, ConfigError
from teamrl.errors import UserCodeError
from teamrl.execution.protocol import Learner, RolloutBatch
from teamrl.generation import versions
from teamrl.team.optim import optimizer_steps
from teamrl.team.policies import Team


class AsyncExecution:
    """The learner is a ``LocalExecution`` or a ``RayExecution``; sampling moves to a thread
    with its own copy of the models, which the learner makes (``sampler_team``: a ``Team`` in
    this process, or generation-only worker groups on Ray)."""

    def __init__(self, learner: Learner, cfg: Config):
        self.learner, self.cfg = learner, cfg
        self.team, self.data, self.rollout = learner.team, learner.data, learner.rollout
        self.max_staleness = cfg.algorithm.max_staleness
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=cuda):  # building the copy must not move the run's RNG
            self.sampler = learner.sampler_team()
        self.sampler.learner = self.team  # whose optimizers the replies' staleness counts
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._ready: dict[int, RolloutBatch] = {}
        self._reset(0)

    def _reset(self, step: int) -> None:
        self._next = step  # the step the generator samples next
        self._version = step  # learner updates applied
        self._snapshot: dict | None = None  # the newest published weights and their version
        self._snapshot_version = -1
        self._loaded = -1  # the version the sampler holds
        self._paused = 0
        self._busy = False
        self._stopping = False
        self._error: BaseException | None = None
        self._consumed_state: dict | None = None  # data position after the last batch taken
        self._generator_idle = 0.0

    # --- the learner's side -------------------------------------------------------------------

    def next_batch(self, step: int) -> RolloutBatch:
        if self._thread is None:
            self._start(step)
        t0 = time.perf_counter()
        with self._cond:
            while step not in self._ready and self._error is None:
                self._cond.wait()
            if isinstance(self._error, UserCodeError | ConfigError):
                raise self._error  # the user's one-line error, as a synchronous run raises it
            if self._error is not None:
                raise RuntimeError(f"asynchronous generator failed: {self._error!r}") from (
                    self._error
                )
            batch = self._ready.pop(step)
            self._cond.notify_all()
        batch.wait_seconds = time.perf_counter() - t0
        batch.stats["async/staleness"] = float(step - batch.version)
        batch.stats["async/learner_wait_s"] = batch.wait_seconds
        self._consumed_state = batch.data_state
        return batch

    def update(self, pol, samples, cfg, *, step, max_completion_length, ctx):
        return self.learner.update(
            pol, samples, cfg, step=step, max_completion_length=max_completion_length, ctx=ctx
        )

    def update_team(self, jobs, cfg, *, step, ctx):
        return self.learner.update_team(jobs, cfg, step=step, ctx=ctx)

    def weights_updated(self, version: int) -> None:
        """Publish the learner's weights as ``version`` (a copy: the learner steps on)."""
        snapshot = _weights(self.team)
        with self._cond:
            self._snapshot, self._snapshot_version = snapshot, version
            self._version = version
            self._cond.notify_all()

    @contextmanager
    def paused(self):
        """No rollout runs inside: evaluation and checkpoints (the RNG, the data position)."""
        with self._cond:
            self._paused += 1
            while self._busy:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._paused -= 1
                self._cond.notify_all()

    def apply_schedule(self, pol, lr: float, cfg: Config) -> None:
        self.learner.apply_schedule(pol, lr, cfg)

    def stop(self) -> None:
        """End the generator; batches sampled ahead are dropped and their examples will be
        drawn again (the data stream goes back to the last consumed batch's position)."""
        if self._thread is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()
        self._thread = None
        self._ready.clear()
        if self._consumed_state is not None:
            self.data.load(self._consumed_state)

    # --- the generator ------------------------------------------------------------------------

    def _start(self, step: int) -> None:
        self._reset(step)
        self._consumed_state = self.data.state()  # where stop() rewinds to if nothing is taken
        # the learner's weights as they are now (fresh, or just loaded from a checkpoint)
        self._snapshot, self._snapshot_version = _weights(self.team), step
        self._thread = threading.Thread(target=self._generate, name="teamrl-generator", daemon=True)
        self._thread.start()

    def _generate(self) -> None:
        try:
            while True:
                t0 = time.perf_counter()
                with self._cond:
                    k = self._next
                    while not self._stopping and (
                        self._paused or self._version < k - self.max_staleness
                    ):
                        self._cond.wait()
                    if self._stopping:
                        return
                    self._busy = True
                    snapshot, version = self._snapshot, self._snapshot_version
                idle = time.perf_counter() - t0
                if version != self._loaded:
                    _load(self.sampler, snapshot)
                    self._loaded = version
                t1 = time.perf_counter()
                examples = self.data.next(self.cfg.train.prompts_per_step)
                state = self.data.state()
                result = self.rollout(self.sampler, examples, k)
                stats = {
                    "async/generator_idle_s": idle,
                    "async/generator_busy_s": time.perf_counter() - t1,
                }
                batch = RolloutBatch(k, result, version=version, data_state=state, stats=stats)
                with self._cond:
                    self._ready[k] = batch
                    self._next = k + 1
                    self._busy = False
                    self._cond.notify_all()
        except BaseException as err:  # re-raised in the learner's thread by next_batch
            with self._cond:
                self._error = err
                self._busy = False
                self._cond.notify_all()


def _weights(team: Team) -> dict[str, tuple[dict[str, torch.Tensor], int]]:
    """Each policy's trainable weights, copied (an adapter's state may be its live tensors),
    and their version: the policy's optimizer steps so far (``teamrl.generation.versions``)."""
    return {
        name: (
            {k: v.detach().clone() for k, v in pol.state_dict().items()},
            0 if pol.on_workers else optimizer_steps(pol.optimizer),  # Ray: not counted here
        )
        for name, pol in team.policies.items()
    }


def _load(team: Team, snapshot: dict[str, tuple[dict[str, torch.Tensor], int]]) -> None:
    for name, (state, steps) in snapshot.items():
        pol = team.policies[name]
        pol.load_state_dict(state)
        if pol.model is not None:  # (on Ray the weights, and their version, are the workers')
            versions.pin(pol.model, pol.adapter, steps)
        if pol.engine.backend is not None:
            pol.engine.backend.weights_changed(pol.adapter)
