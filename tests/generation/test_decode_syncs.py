"""The decode loop reads the device once per step: whether every row has finished.

Counted with a ``TorchDispatchMode`` over whole ``generate`` calls that differ only in their
token budget, so that what a call does once (building the batch, the prefill, collecting the
results) cancels out: (syncs at budget 12 - syncs at budget 6) / 6 is what one decode step
costs. On a GPU each host read waits for the device to finish the step, and with a captured
step every extra one is a pause between replays; which sampling passes a batch needs (greedy
rows, temperature, top-k/top-p) is known from its requests before the loop starts.
"""

from __future__ import annotations

import traceback

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from teamrl.generation import fast_decode
from teamrl.generation.hf import generate
from teamrl.generation.types import Request
from teamrl.team.models import load_model

SYNCS = {"_local_scalar_dense", "equal", "is_nonzero", "item"}


class Syncs(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] in SYNCS:
            files = [f.filename for f in traceback.extract_stack()]
            if not any("/transformers/" in f for f in files):  # the model's own, not the loop's
                self.count += 1
        return func(*args, **(kwargs or {}))


def requests(budget: int) -> list[Request]:
    # every kind of row at once: greedy, temperature 0.7 with top-p, temperature 1 with top-k
    return [
        Request([5, 9, 14, 3], n=2, temperature=0.0, max_new_tokens=budget),
        Request([7, 21], n=2, temperature=0.7, top_p=0.9, max_new_tokens=budget),
        Request([30, 2, 8], n=1, temperature=1.0, top_k=20, max_new_tokens=budget),
    ]


@pytest.mark.parametrize("loop", ["reference", "fast", "graphed"])
def test_one_host_read_per_decode_step(loop):
    model = load_model("tiny-llama").eval()

    def run(budget: int) -> int:
        mode = Syncs()
        torch.manual_seed(0)
        with mode:
            if loop == "reference":
                generate(model, requests(budget), eos_ids=[0], pad_id=0, ignore_eos=True)
            else:
                fast_decode.generate(
                    model, requests(budget), [0], 0, ignore_eos=True, graph=loop == "graphed"
                )
        return mode.count

    run(6)  # a graph is captured in the first call; count the calls that replay it
    assert (run(12) - run(6)) / 6 == 1
    fast_decode.release(model)
