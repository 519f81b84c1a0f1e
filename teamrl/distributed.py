"""Where this process stands among the ranks of a run: rank, world size, device.

Everything that would differ across processes (which examples a rank draws, who writes logs
and checkpoints, how gradients are combined) asks this object. In one process it is trivial:
rank 0 of 1, every collective an identity. Under Ray (``teamrl.scale``) each worker of a
policy group is one rank of that group's ``torch.distributed`` process group (gloo on CPU,
NCCL on GPU), set up by ``init_group`` before the first update.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    device: str = "cpu"  # this rank's torch device

    @property
    def is_main(self) -> bool:
        """The one rank that writes logs, checkpoints and exports."""
        return self.rank == 0

    def all_reduce_sum(self, tensor):
        """Sum ``tensor`` over ranks, in place, and return it (the identity in one process)."""
        if self.world_size == 1:
            return tensor
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError(
                f"rank {self.rank} of {self.world_size}: torch.distributed is not initialised "
                "(init_group must run first)"
            )
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor


def init_group(rank: int, world_size: int, init_method: str, device: str) -> DistContext:
    """Join a ``torch.distributed`` process group (NCCL for CUDA devices, else gloo)."""
    import torch.distributed as dist

    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size)
    return DistContext(rank=rank, world_size=world_size, device=device)
