"""FSDP2 inside a policy's worker group (``distributed.sharding=fsdp``).

Each worker of a group wraps its policy model with torch's ``fully_shard``, per decoder layer
and then the whole model, over the group's process group: every parameter (a LoRA adapter's and
the frozen base's alike), its gradient and its optimizer state live 1/W on each of the W
workers, and a layer's full weights exist only while it runs. The update is the data-parallel
one of ``teamrl.update.policy`` with three changes:

- FSDP reduce-scatters the gradients itself, as a mean over the ranks; each rank's loss is its
  share of one global sum, so the rank scales its loss by W and the mean gives the sum back (no
  all-reduce of its own; gloo has no pre-scaled sum to ask FSDP for);
- every rank runs every forward and backward, since each all-gathers and reduce-scatters with
  the others: a rank with no sample in a chunk runs one of the chunk's rows with its loss times
  0 (a ghost row), which adds nothing to any gradient;
- norms and clipping read the sharded gradients (DTensors) through torch's own helpers.

Generation needs full weights on every worker, for every decode step, and a worker generates
only its share of the requests, so it cannot join collectives per step. Each worker keeps a
**plain replica** of the model for sampling, taken before sharding and refreshed after every
update tensor by tensor (each trainable parameter all-gathered in turn, so the full model is
never gathered at once; a LoRA run moves only its adapters). The replica also serves what reads
weights without a collective: the weights a checkpoint or export writes, and the critics'
features. Its memory is one full copy of the weights per worker, next to the sharded training
state (weights, gradients, AdamW's two moments: 16 bytes per parameter in fp32, / W).
"""

from __future__ import annotations

import copy
import dataclasses

import torch

from teamrl.generation import make_backend


def shard_model(model: torch.nn.Module, world_size: int, device: str, param_dtype: str) -> None:
    """``fully_shard`` each decoder layer, then the model, over the default process group."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cuda" if device.startswith("cuda") else "cpu", (world_size,))
    mp = MixedPrecisionPolicy()
    if param_dtype == "bfloat16":  # compute in bf16, keep fp32 masters, reduce in fp32
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)


class ReplicaBackend:
    """Generation from a plain replica of a sharded model; ``weights_changed`` (called on every
    rank by the worker after an update) gathers the trainable parameters into it."""

    name = "hf"

    def __init__(self, inner, replica: torch.nn.Module, sharded: torch.nn.Module):
        self.inner, self.replica, self.sharded = inner, replica, sharded

    def generate(self, requests, ignore_eos: bool = False):
        return self.inner.generate(requests, ignore_eos)

    @torch.no_grad()
    def weights_changed(self, adapter: str | None) -> None:
        gather_into(self.replica, self.sharded, trainable_only=True)
        self.inner.weights_changed(adapter)


@torch.no_grad()
def gather_into(replica: torch.nn.Module, sharded: torch.nn.Module, trainable_only: bool) -> None:
    """Copy the sharded model's parameters into the replica, one all-gathered tensor at a
    time (every rank calls it: each gather is a collective)."""
    from torch.distributed.tensor import DTensor

    mine = dict(replica.named_parameters())
    for name, p in sharded.named_parameters():
        if trainable_only and not p.requires_grad:
            continue
        mine[name].copy_(p.full_tensor() if isinstance(p, DTensor) else p)


@torch.no_grad()
def scatter_from(replica: torch.nn.Module, sharded: torch.nn.Module) -> None:
    """The replica's full weights into each rank's shards (after a checkpoint is loaded into
    the replica); every rank holds the same replica, so each cuts its own shard locally."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    full = dict(replica.named_parameters())
    for name, p in sharded.named_parameters():
        if isinstance(p, DTensor):
            local = distribute_tensor(
                full[name].detach(), p.device_mesh, p.placements, src_data_rank=None
            )
            p.to_local().copy_(local.to_local())
        else:
            p.copy_(full[name])


def shard_team(team, cfg, world_size: int, device: str) -> dict:
    """Shard every model of a worker's team; return {policy: a Policy view of its replica}
    (what checkpoints, exports and critics read). Each engine then samples from its replica."""
    from teamrl.team.weights import fingerprint_of

    replicas = {}
    for engine in team.engines():
        fingerprint_of(engine)  # of the base, cached on the engine before the weights shard
        replica = copy.deepcopy(engine.model)
        spec = dataclasses.replace(team.engine_spec(engine), model=replica)
        engine.backend = ReplicaBackend(make_backend(cfg.generation, spec), replica, engine.model)
        shard_model(engine.model, world_size, device, cfg.distributed.fsdp_param_dtype)
        replicas[id(engine)] = dataclasses.replace(engine, model=replica, backend=None)
    views = {}
    for name, pol in team.policies.items():
        pol.sharded = True
        views[name] = dataclasses.replace(pol, engine=replicas[id(pol.engine)], optimizer=None)
    return views


def full_optimizer_state(pol) -> dict:
    """The sharded optimizer's state as one full, FQN-keyed dict on the CPU (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(pol.model, pol.optimizer, options=options)


def load_full_optimizer_state(pol, state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True)
    set_optimizer_state_dict(pol.model, pol.optimizer, state, options=options)
