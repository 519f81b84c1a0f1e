"""One worker of a policy group: a Ray actor process holding one replica of the group's
model(s), its optimizer(s), and one rank of the group's ``torch.distributed`` process group.

The controller calls it through ``teamrl.scale.group``; nothing here imports Ray, so the
class is plain Python (``ray.remote`` wraps it there) and the tests can read it top to bottom.
"""

from __future__ import annotations

import os
import socket


class PolicyWorker:
    def __init__(
        self, rank: int, world_size: int, device: str, env: dict[str, str], num_threads: int
    ):
        os.environ.update(env)  # offline hub, model cache: the controller's settings
        import torch

        from teamrl.distributed import DistContext

        torch.set_num_threads(num_threads)
        self.ctx = DistContext(rank=rank, world_size=world_size, device=device)
        self.team = None
        self.views: dict = {}  # sharding=fsdp: each policy's full replica
        self.settings: dict = {}  # each policy's UpdateSettings, built at its first update
        self.mmap_threshold_kib = 0  # teamrl.scale.cpu_malloc; 0: glibc's adaptive one

    def configure(self, cfg_data: dict, agents: list[str]) -> None:
        """(Re)build this replica: the group's agents' model(s) and optimizer(s)."""
        import dataclasses

        from teamrl.config import Config, from_dict
        from teamrl.run.seeding import set_seed
        from teamrl.scale.cpu_malloc import set_mmap_threshold, threshold_kib
        from teamrl.team.optim import make_optimizer
        from teamrl.team.policies import Team

        device = self.ctx.device
        cfg = from_dict(Config, cfg_data)
        # This group's agents only ('separate': one agent; 'shared'/'lora': all of them), on
        # this worker's device. Same seed as one process: the same initial weights.
        team_cfg = dataclasses.replace(
            cfg.team, agents=[a for a in cfg.team.agents if a.name in agents]
        )
        model_cfg = dataclasses.replace(cfg.model, device=device)
        self.cfg = dataclasses.replace(cfg, team=team_cfg, model=model_cfg)
        sharded = cfg.distributed.sharding == "fsdp" and self.ctx.world_size > 1  # 1: whole
        # before the model loads, so that its allocations follow the same policy
        # (once fixed, glibc's adaptation stays off for the process; not glibc: nothing set)
        kib = threshold_kib(cfg.distributed.cpu_mmap_threshold_kib, device, sharded)
        if kib and set_mmap_threshold(kib):
            self.mmap_threshold_kib = kib
        set_seed(cfg.seed)
        self.team = Team(self.cfg)
        self.settings = {}  # a new config: each policy's settings are built again
        # sharding=fsdp: shard before the optimizers (they hold the shards); ``views`` are the
        # policies' full replicas, what reads weights without a collective
        self.views = {}
        if sharded:
            from teamrl.scale.sharding import shard_team

            self.views = shard_team(self.team, self.cfg, self.ctx.world_size, device)
        for pol in self.team.policies.values():
            make_optimizer(pol, self.cfg)

    # --- set-up -----------------------------------------------------------------------------

    def rendezvous(self) -> str:
        """(rank 0) A TCP address for the group's process group: this node and a free port."""
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return f"tcp://{_node_ip()}:{port}"

    def join(self, init_method: str) -> None:
        from teamrl.distributed import init_group

        self.ctx = init_group(self.ctx.rank, self.ctx.world_size, init_method, self.ctx.device)

    def describe(self) -> dict:
        """What the controller needs to know: process, node, the engine's EOS token ids and
        its base weights' fingerprint (``base_model.json``, ``team.yaml``)."""
        from teamrl.team.weights import fingerprint_of

        engine = self.team.engines()[0] if self.team is not None else None
        return {
            "pid": os.getpid(),
            "node": _node_ip(),
            "node_id": _node_id(),  # several nodes may share an IP (one machine, containers)
            "eos_ids": engine.eos_ids if engine else None,
            "hidden_size": int(engine.model.config.hidden_size) if engine else None,
            # computed on the first call after configure, before any update moves the weights
            "fingerprint": fingerprint_of(engine) if engine else "",
        }

    def memory(self) -> dict:
        """This worker process's resident memory now and at its peak, in GiB (Linux)."""
        from teamrl.team.memory import measured_memory

        return {**measured_memory(), "mmap_threshold_kib": self.mmap_threshold_kib}

    # --- work -------------------------------------------------------------------------------

    def generate(self, requests: list, ignore_eos: bool, seed: int) -> list:
        """Generate this worker's share of the group's requests, from a seed the controller
        drew (so the controller's checkpointed RNG decides every sample: resume is exact)."""
        import torch

        torch.manual_seed(seed)
        return self.team.engines()[0].backend.generate(requests, ignore_eos)

    def update(self, policy: str, samples: list, cfg, step: int, max_completion_length: int):
        """One data-parallel update of ``policy`` (every rank gets all its samples; see
        ``teamrl.update.policy``) -> (metrics, NaN skips). ``cfg`` is the controller's config,
        read once per policy (``update_settings``)."""
        from teamrl.update.policy import update_policy
        from teamrl.update.settings import update_settings

        pol = self.team.policies[policy]
        if policy not in self.settings:  # once per run: the config does not change
            self.settings[policy] = update_settings(cfg, pol.agents)
        out = update_policy(
            pol,
            samples,
            self.settings[policy],
            step=step,
            max_completion_length=max_completion_length,
            ctx=self.ctx,
        )
        if out.stepped and pol.engine.backend is not None:  # the sampler reloads its copy
            pol.engine.backend.weights_changed(pol.adapter)
        return out.metrics, out.skipped

    def hidden_at(self, policy: str, jobs: list) -> list:
        """(rank 0) The policy's last hidden states at the given positions, on the CPU: what
        the controller's critics read (``Policy.hidden_at``; every rank holds the same weights,
        so one answers)."""
        pol = self.views.get(policy) or self.team.policies[policy]  # sharded: the replica
        return [h.cpu() for h in pol.hidden_at(jobs, pol.model.device)]

    def state(self, policy: str, part: str):
        """'weights' | 'optimizer' | 'scheduler' of ``policy``, on the CPU. Sharded: the
        weights from the replica, the optimizer gathered in full (every rank calls it)."""
        import torch

        pol = self.team.policies[policy]
        if part == "weights":
            obj = (self.views.get(policy) or pol).state_dict()
        elif part == "optimizer" and pol.sharded:
            from teamrl.scale.sharding import full_optimizer_state

            obj = full_optimizer_state(pol)
        else:
            obj = getattr(pol, part).state_dict()
        return _to_cpu(obj, torch)

    def load_state(self, policy: str, part: str, value) -> None:
        pol = self.team.policies[policy]
        if part == "weights" and pol.sharded:  # into the replica, then each rank's shards
            from teamrl.scale.sharding import scatter_from

            self.views[policy].load_state_dict(value)
            scatter_from(self.views[policy].model, pol.model)
        elif part == "weights":
            pol.load_state_dict(value)
        elif part == "optimizer" and pol.sharded:
            from teamrl.scale.sharding import load_full_optimizer_state

            load_full_optimizer_state(pol, value)
        else:
            getattr(pol, part).load_state_dict(value)

    def save_optimizer(self, policy: str, folder: str) -> None:
        """(every rank) The sharded optimizer state, each rank its shards, into ``folder``
        (torch.distributed.checkpoint; on a shared filesystem across nodes)."""
        from teamrl.run.checkpoints import save_optimizer

        pol = self.team.policies[policy]
        save_optimizer(pol.model, pol.optimizer, folder)

    def load_optimizer(self, policy: str, folder: str) -> None:
        from teamrl.run.checkpoints import load_optimizer

        pol = self.team.policies[policy]
        load_optimizer(pol.model, pol.optimizer, folder)

    def scheduler_step(self, policy: str) -> None:
        """Once per trainer step, whether or not the policy had samples (as in one process)."""
        import warnings

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step")
            self.team.policies[policy].scheduler.step()

    def lrs(self, policy: str) -> list[float]:
        return [g["lr"] for g in self.team.policies[policy].optimizer.param_groups]

    def apply_schedule(self, policy: str, lr: float, cfg) -> None:
        """After a checkpoint load: follow the controller's config (``checkpoints``)."""
        from teamrl.run.checkpoints import apply_schedule
        from teamrl.team.optim import lr_lambda

        apply_schedule(self.team.policies[policy], lr, lr_lambda(cfg), cfg)

    def weight_files(self, policy: str) -> dict[str, bytes]:
        """(rank 0) The files ``save_policy`` writes for ``policy`` (a PEFT adapter or a
        save_pretrained model; no tokenizer, the controller has it), as bytes: the controller
        writes them into its checkpoint, so they are the files a one-process run writes."""
        import tempfile
        from pathlib import Path

        from teamrl.team.weights import save_policy

        pol = self.views.get(policy) or self.team.policies[policy]  # sharded: the replica
        with tempfile.TemporaryDirectory(prefix="teamrl-weights-") as tmp:
            save_policy(pol, Path(tmp), tokenizer=False)
            return {f.name: f.read_bytes() for f in sorted(Path(tmp).iterdir()) if f.is_file()}

    def load_weight_files(self, policy: str, files: dict[str, bytes]) -> None:
        """(every rank) Load files written by ``weight_files`` with ``load_policy``."""
        import tempfile
        from pathlib import Path

        from teamrl.team.weights import load_policy

        pol = self.team.policies[policy]
        with tempfile.TemporaryDirectory(prefix="teamrl-weights-") as tmp:
            for name, data in files.items():
                (Path(tmp) / name).write_bytes(data)
            load_policy(self.views.get(policy) or pol, Path(tmp))
        if pol.sharded:  # the replica holds them: each rank cuts its shards
            from teamrl.scale.sharding import scatter_from

            scatter_from(self.views[policy].model, pol.model)


def _node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # outside Ray (a plain-Python test of this class)
        return "127.0.0.1"


def _node_id() -> str | None:
    """The Ray node this worker runs on (hex), None outside Ray."""
    try:
        import ray
    except ImportError:
        return None
    # outside Ray (or tests/ray as a namespace package): none; get_runtime_context() would
    # start a local cluster
    if not getattr(ray, "is_initialized", lambda: False)():
        return None
    return ray.get_runtime_context().get_node_id()


def _to_cpu(obj, torch):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v, torch) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v, torch) for v in obj]
    return obj
