"""Where this process stands among the ranks of a run: rank, world size, device.

Everything that would differ across processes (which examples a rank draws, who writes logs
and checkpoints, how gradients are combined) asks this object. In one process it is trivial:
rank 0 of 1, every collective an identity. A multi-process launcher (Ray) fills it in.
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
        raise NotImplementedError("multi-process runs need a launcher that sets up collectives")
