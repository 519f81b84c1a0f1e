"""Worker groups on Ray, seen from the single controller.

    ray_team(cfg)  ->  a Team whose engines generate on, and whose policies update on,
                       one WorkerGroup per placement-plan group (teamrl.scale.placement)

    WorkerGroup    = a Ray placement group + one PolicyWorker actor per bundle, whose ranks
                     form one torch.distributed process group (gloo on CPU, NCCL on GPU)
    RemoteBackend  = the group behind the generation ``Backend`` seam: the requests of one
                     call are sharded across the workers (round robin) and gathered in order
    RemotePolicy   = a Policy stand-in: ``remote_update`` (every rank gets all the samples and
                     works on its shard, see teamrl.update.policy), and the weights (as
                     the standard files a one-process run writes), optimizer and scheduler
                     states that checkpoints read (rank 0) and restore (every rank)

Placement and transport are Ray's (placement groups, the object store) and torch's; nothing
here schedules or launches a process itself. A worker that dies ends the run with
``WorkerDiedError`` naming its group, policies, rank, process and node (Ray's node id and
address), and a node the cluster marked dead as lost; ``--resume`` continues from the last
checkpoint on fresh workers.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from teamrl.config import Config, ConfigError, to_dict
from teamrl.run.files import log_line
from teamrl.scale.placement import GroupPlan, placement_plan
from teamrl.scale.requires import require_ray
from teamrl.scale.worker import PolicyWorker
from teamrl.team.models import resolve
from teamrl.team.policies import Team
from teamrl.team.weights import ADAPTER_FILES, FULL_FILES

# How long a failed call waits for the other ranks' answers: a peer's death, which Ray reports
# after a heartbeat or two, is the cause to name when a live rank's collective broke on it.
DEATH_WAIT_S = 10.0

# How long a worker that became unreachable waits for the cluster to mark its node dead, so
# that the error names a lost node as such. Ray's default health checks (every 3 s, 5 misses
# in a row) take about 15 s; the RAY_health_check_* settings of the head shorten it
# (docs/distributed.md). The caller's own call already failed: this only words the error.
NODE_DEATH_WAIT_S = 30.0

# Settings a worker process takes from the controller (an offline hub, the builtin model cache).
_ENV_KEYS = ("HF_HUB_OFFLINE", "TEAMRL_CACHE", "HF_HOME", "TOKENIZERS_PARALLELISM")
PLACEMENT_TIMEOUT_S = 120.0


class WorkerDiedError(RuntimeError):
    """A worker process of a policy group died (killed, out of memory, node lost).

    ``death`` says which worker, where and how (a lost node named by its Ray node id and
    address); the message adds how to continue. The command line prints ``death`` with the
    run's last checkpoint and its resume command."""

    def __init__(self, death: str):
        self.death = death
        super().__init__(f"{death}. Continue the run from its last checkpoint with --resume")


def connect(cfg: Config) -> None:
    """Join (or start) the Ray cluster ``distributed.address`` names, once per process."""
    ray = require_ray()
    if ray.is_initialized():
        return
    address = cfg.distributed.address
    if address == "local":
        ray.init(include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)


class WorkerGroup:
    """The Ray actors of one placement-plan group; every call returns once all ranks did."""

    def __init__(self, plan: GroupPlan, cfg: Config):
        ray = require_ray()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.plan = plan
        self.pg = placement_group(plan.bundles, strategy=cfg.distributed.placement_strategy)
        ready, _ = ray.wait([self.pg.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            ray.util.remove_placement_group(self.pg)
            raise ConfigError(
                f"distributed: cannot place group {plan.name!r} ({plan.workers} worker(s) of "
                f"{plan.bundles[0]}) within {PLACEMENT_TIMEOUT_S:g}s; the cluster has "
                f"{ray.available_resources()} free. Lower distributed.num_workers_per_policy "
                "or the resources per worker, or add nodes"
            )
        device = "cuda" if plan.gpus_per_worker > 0 else "cpu"
        env = {k: os.environ[k] for k in _ENV_KEYS if k in os.environ}
        actor = ray.remote(PolicyWorker)
        self.workers = [
            actor.options(
                num_cpus=plan.cpus_per_worker,
                num_gpus=plan.gpus_per_worker,
                max_restarts=0,  # a dead worker ends the run (resume restarts it cleanly)
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.pg, placement_group_bundle_index=rank
                ),
            ).remote(rank, plan.workers, device, env, max(1, int(plan.cpus_per_worker)))
            for rank in range(plan.workers)
        ]
        self.info = [{"pid": None, "node": None}] * plan.workers  # until they answer
        self.info = self._call("describe")
        if plan.workers > 1:
            (address,) = self._call("rendezvous", ranks=[0])
            self._call("join", address)
        self.configure(plan, cfg)

    def configure(self, plan: GroupPlan, cfg: Config) -> None:
        """Build (or rebuild, for another plan of as many workers) every worker's replica."""
        if plan.workers != len(self.workers):
            raise ValueError(
                f"group {self.plan.name!r} has {len(self.workers)} workers, not {plan.workers}"
            )
        self.plan = plan
        self.sharded = cfg.distributed.sharding == "fsdp"
        self._call("configure", to_dict(cfg), list(plan.agents))
        self.info = self._call("describe")

    # --- calls ------------------------------------------------------------------------------

    def _call(self, method: str, *args, ranks: list[int] | None = None, per_rank=None) -> list:
        """Call ``method`` on the given ranks (all by default) and wait for every result.

        ``per_rank`` maps a rank to its own arguments (overrides ``args``). The first failure
        shuts the whole group down (the other ranks may wait on it in a collective) and is
        raised: a dead worker as WorkerDiedError, an exception inside a worker as itself.
        """
        ray = require_ray()
        ranks = list(range(len(self.workers))) if ranks is None else ranks
        refs = [
            getattr(self.workers[r], method).remote(*(per_rank(r) if per_rank else args))
            for r in ranks
        ]
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except ray.exceptions.RayActorError as err:
                rank = ranks[refs.index(done[0])]
                self.shutdown()
                raise WorkerDiedError(self._died(rank, method, err)) from None
            except Exception:
                # A live rank whose collective lost a dead peer can answer first; the death is
                # the cause to report. Ray needs a moment to notice it: wait for the others.
                dead = self._first_death(pending, refs, ranks)
                self.shutdown()
                if dead is not None:
                    rank, err = dead
                    raise WorkerDiedError(self._died(rank, method, err)) from None
                raise
        return ray.get(refs)

    def _first_death(self, pending: list, refs: list, ranks: list[int]):
        """(rank, error) of a worker among ``pending`` that died, waiting up to
        ``DEATH_WAIT_S`` for their answers; None when none died."""
        ray = require_ray()
        ready, _ = ray.wait(pending, num_returns=len(pending), timeout=DEATH_WAIT_S)
        for ref in ready:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as err:
                return ranks[refs.index(ref)], err
            except Exception:  # noqa: BLE001  (another rank's own failure: not a death)
                continue
        return None

    def _died(self, rank: int, method: str, err: Exception) -> str:
        """What ``WorkerDiedError`` says: the worker, its process and node, and the cause; a
        node the cluster marked dead is named as lost (every worker on it is gone)."""
        ray = require_ray()
        p, info = self.plan, self.info[rank]
        # An unreachable actor (its socket closed, no death reported) is a node going down or
        # cut off: give the health checks their time to decide; a reported death needs none.
        unreachable = isinstance(err, getattr(ray.exceptions, "ActorUnavailableError", ()))
        if node_lost(info.get("node_id"), NODE_DEATH_WAIT_S if unreachable else 0.0):
            cause = "its node was lost (the cluster marked it dead: every worker on it is gone)"
        else:
            cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return (
            f"worker {rank} of {p.workers} of policy group {p.name!r} (policies "
            f"{list(p.policies)}, pid {info.get('pid')}, {_where(info)}) died during "
            f"{method}: {cause}"
        )

    def placement(self) -> str:
        """Where each rank runs, one line: ``group 'shared': rank 0 on node 3f2a… (10.0.0.2),
        rank 1 on node 9c41… (10.0.0.3)``."""
        ranks = ", ".join(f"rank {r} on {_where(i)}" for r, i in enumerate(self.info))
        return f"group {self.plan.name!r}: {ranks}"

    def generate(self, requests: list, ignore_eos: bool) -> list:
        """Requests sharded round robin over the workers, results back in request order."""
        n = len(self.workers)
        shards = [list(range(r, len(requests), n)) for r in range(n)]
        ranks = [r for r in range(n) if shards[r]]
        if not ranks:
            return []
        seed = int(torch.randint(0, 2**31 - 1, ()).item())  # the controller's RNG decides
        outs = self._call(
            "generate",
            ranks=ranks,
            per_rank=lambda r: ([requests[i] for i in shards[r]], ignore_eos, seed + 7919 * r),
        )
        results: list = [None] * len(requests)
        for r, out in zip(ranks, outs):
            for i, gens in zip(shards[r], out):
                results[i] = gens
        return results

    def update(self, policy: str, samples: list, cfg: Config, step: int, max_len: int):
        """One data-parallel update; metrics averaged over ranks (grad_norm and lr are the
        same on every rank), the NaN-skip count of rank 0 (every rank skips together)."""
        ray = require_ray()
        ref = ray.put(samples)  # one copy in the object store, read by every rank
        outs = self._call("update", policy, ref, cfg, step, max_len)
        metrics = {}
        for k in outs[0][0]:
            vals = [m[k] for m, _ in outs if m[k] == m[k]]  # skip NaN (no sample on a rank)
            metrics[k] = sum(vals) / len(vals) if vals else float("nan")
        return metrics, outs[0][1]

    def state(self, policy: str, part: str):
        # a sharded optimizer is gathered by every rank together; the rest is rank 0's
        every = self.sharded and part == "optimizer"
        return self._call("state", policy, part, ranks=None if every else [0])[0]

    def load_state(self, policy: str, part: str, value) -> None:
        ray = require_ray()
        self._call("load_state", policy, part, ray.put(value))

    def shutdown(self) -> None:
        ray = require_ray()
        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers = []
        try:
            ray.util.remove_placement_group(self.pg)
        except Exception:  # already gone with its cluster
            pass


def _where(info: dict) -> str:
    """``node <id> (<ip>)``: the id tells apart nodes that share an address."""
    node_id = info.get("node_id")
    return f"node {node_id} ({info.get('node')})" if node_id else f"node {info.get('node')}"


def node_lost(node_id: str | None, wait_s: float) -> bool:
    """Whether the cluster marks node ``node_id`` dead within ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while node_id is not None:
        if node_id in dead_nodes():
            return True
        if time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    return False


def dead_nodes() -> set[str]:
    """The ids of the nodes the cluster has marked dead (its health checks missed them);
    empty when the cluster cannot say."""
    ray = require_ray()
    try:
        return {n["NodeID"] for n in ray.nodes() if not n["Alive"]}
    except Exception:  # noqa: BLE001  (the head itself is unreachable: nothing to name)
        return set()


@dataclass
class RemoteBackend:
    """The generation ``Backend`` of an engine whose model lives on a worker group."""

    group: WorkerGroup
    name: str = "ray"

    def generate(self, requests: list, ignore_eos: bool = False) -> list:
        return self.group.generate(requests, ignore_eos)

    def weights_changed(self, adapter: str | None) -> None:
        pass  # each worker samples from its own live model, which its update just stepped


@dataclass
class RemoteState:
    """The optimizer or scheduler of a remote policy, as checkpoints see it."""

    group: WorkerGroup
    policy: str
    part: str

    def state_dict(self):
        return self.group.state(self.policy, self.part)

    def load_state_dict(self, value) -> None:
        self.group.load_state(self.policy, self.part, value)

    @property
    def param_groups(self) -> list[dict]:
        """(optimizer) Each parameter group's current LR, as rank 0 has it (what trainers log)."""
        return [{"lr": lr} for lr in self.group._call("lrs", self.policy, ranks=[0])[0]]

    def step(self) -> None:
        """(scheduler) One LR-schedule step on every rank."""
        self.group._call("scheduler_step", self.policy)

    def save_sharded(self, folder) -> None:
        """(optimizer, sharding=fsdp) Every rank writes its shards into ``folder``."""
        self.group._call("save_optimizer", self.policy, str(folder))

    def load_sharded(self, folder) -> None:
        self.group._call("load_optimizer", self.policy, str(folder))


@dataclass
class RemotePolicy:
    """A policy whose weights and optimizer live on a WorkerGroup (the fields of ``Policy``
    that the trainer, the team and checkpoints read)."""

    name: str
    engine: object
    adapter: str | None
    agents: list[str]
    group: WorkerGroup
    optimizer: RemoteState = field(init=False)
    scheduler: RemoteState = field(init=False)
    on_workers: ClassVar[bool] = True  # the weights and the optimizer live on ``group``

    def __post_init__(self):
        self.optimizer = RemoteState(self.group, self.name, "optimizer")
        self.scheduler = RemoteState(self.group, self.name, "scheduler")

    @property
    def model(self):
        return None  # on the workers

    @property
    def sharded(self) -> bool:
        """FSDP over its group (several workers with sharding=fsdp)."""
        return self.group.sharded and len(self.group.workers) > 1

    def remote_update(self, samples, cfg: Config, *, step: int, max_completion_length: int):
        return self.group.update(self.name, samples, cfg, step, max_completion_length)

    def state_dict(self):
        return self.group.state(self.name, "weights")

    def load_state_dict(self, state) -> None:
        self.group.load_state(self.name, "weights", state)

    def apply_schedule(self, lr: float, cfg: Config) -> None:
        """``checkpoints.apply_schedule`` on every rank (after a checkpoint load)."""
        self.group._call("apply_schedule", self.name, lr, cfg)

    def hidden_at(self, jobs: list, device) -> list:
        """Rank 0's last hidden states for the controller's critics (``teamrl.credit.critics``)."""
        ray = require_ray()
        feats = self.group._call("hidden_at", self.name, ray.put(jobs), ranks=[0])[0]
        return [f.to(device) for f in feats]

    def save_weights(self, folder: Path) -> None:
        """Rank 0's weights as the files a policy in one process writes (a PEFT adapter or a
        save_pretrained model), so checkpoints and exports of a Ray run hold the same
        standard formats."""
        for name, data in self.group._call("weight_files", self.name, ranks=[0])[0].items():
            (Path(folder) / name).write_bytes(data)

    def load_weights(self, folder: Path) -> None:
        """Load such files into every rank (a resume)."""
        ray = require_ray()
        names = (*ADAPTER_FILES, *FULL_FILES)
        files = {n: (Path(folder) / n).read_bytes() for n in names if (Path(folder) / n).exists()}
        self.group._call("load_weight_files", self.name, ray.put(files))


def ray_team(cfg: Config, role_prompts: dict[str, str] | None = None) -> Team:
    """The controller's Team: tokenizers and prompts here, models on one WorkerGroup per
    placement-plan group. ``team.worker_groups`` lists the groups (``shutdown_team``)."""
    connect(cfg)
    if cfg.distributed.sandbox_tasks:
        from teamrl.scale import sandbox

        sandbox.install()
    team = Team(cfg, role_prompts, load_models=False)
    team.worker_groups = []
    try:
        for plan in placement_plan(cfg):
            # builtin models are built (or converted) into the cache once, here, rather than
            # by several workers of one node at the same time
            resolve(plan.model, cfg.seed)
            group = WorkerGroup(plan, cfg)
            team.worker_groups.append(group)
            log_line(group.placement())  # where each rank runs: on a cluster, which node
            engine = team.policies[plan.policies[0]].engine
            engine.backend = RemoteBackend(group)
            engine.eos_ids = group.info[0]["eos_ids"]
            engine._base_fingerprint = group.info[0]["fingerprint"]  # see fingerprint_of
            engine.hidden_size = group.info[0]["hidden_size"]  # what a critic's head reads
            for name in plan.policies:
                pol = team.policies[name]
                team.policies[name] = RemotePolicy(name, engine, pol.adapter, pol.agents, group)
    except BaseException:
        shutdown_team(team)
        raise
    return team


def shutdown_team(team: Team) -> None:
    """Kill a Ray team's workers and free their placement groups (a no-op for a local Team)."""
    from teamrl.scale import sandbox

    for group in getattr(team, "worker_groups", []):
        group.shutdown()
    team.worker_groups = []
    sandbox.uninstall()  # later code rewards in this process run in its own pool again
