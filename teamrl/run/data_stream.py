"""The training examples in a seeded order per epoch; the position (epoch, index) is
checkpointed, so a resumed run draws exactly what an uninterrupted one would."""

from __future__ import annotations

import random

from teamrl.distributed import DistContext


class DataStream:
    """Examples in a seeded order per epoch.

    Every rank walks the same order (same seed, same position); with several ranks, rank r
    keeps every world_size-th of the examples drawn in one call, starting at r.
    """

    def __init__(self, examples, seed: int, shuffle: bool, ctx: DistContext | None = None):
        if len(examples) == 0:
            raise ValueError("the task's training split is empty")
        self.examples, self.seed, self.shuffle = examples, seed, shuffle
        self.ctx = ctx or DistContext()
        self.epoch, self.index = 0, 0
        self._order = self._make_order()

    def _make_order(self) -> list[int]:
        order = list(range(len(self.examples)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
        return order

    def next(self, n: int) -> list[tuple[int, dict]]:
        out = []
        for _ in range(n):
            if self.index >= len(self._order):
                self.epoch, self.index = self.epoch + 1, 0
                self._order = self._make_order()
            i = self._order[self.index]
            self.index += 1
            out.append((i, self.examples[i]))
        if self.ctx.world_size > 1:
            out = out[self.ctx.rank :: self.ctx.world_size]
        return out

    def state(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load(self, state: dict) -> None:
        self.epoch, self.index = state["epoch"], state["index"]
        self._order = self._make_order()
