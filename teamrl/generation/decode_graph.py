"""The decode step as a graph: captured once per shape, replayed at every later step.

A decode step of a small model at a few hundred rows is a few hundred small kernels (per layer:
norms, projections, rotary, attention, the MLP), each launched from Python. On a GPU the
launches, not the arithmetic, set its time. A CUDA graph records the kernels of one step with
their arguments (device addresses and every Python value the step read) and replays them with
one launch. Replaying is only correct if everything that changes between steps lives in device
memory that the graph reads at the same address:

- the inputs (the tokens just sampled, their positions, the attention mask) are copied into
  static buffers before each replay, never passed as fresh tensors;
- the KV cache is written in place at a position held in a device tensor (transformers'
  ``StaticCache`` keeps its write counter as a tensor), not a Python int;
- the step asks the host nothing (no ``.item()``, no data-dependent shape): a capture cannot
  wait for the device, and a value read once would be frozen into every replay;
- the weights are updated in place (the optimizer, the LoRA stacks of ``multi_lora``), so the
  replay reads the current ones.

``StepGraph`` is the seam: ``warmup`` runs the step for real (on CUDA, on a side stream, so
that lazy initialisation happens outside the capture), ``capture`` records it without running
it, ``replay`` runs what was recorded and returns the step's output buffer (overwritten by the
next replay). ``CudaGraph`` implements it with ``torch.cuda.CUDAGraph``, the graphs of one model
sharing one memory pool (only one replays at a time and each keeps its output alive).

``OpTape`` implements the same seam on any device by recording the step's ATen operators with
the tensors they read and wrote, then re-running exactly those operators on exactly those
tensors, each result copied into the tensor the capture produced: Python values (sizes, an int
position, a flag) are frozen as a graph freezes them, and a fresh tensor built outside the step
is not seen by a replay. A host read during capture is an error, as it is in a CUDA capture.
It is how the CPU proves that the graphed decode loop gives the eager loop's tokens
(tests/generation/test_decode_graph.py); it is not faster than eager, and never a default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# ATen operators that hand a device value to the host: a CUDA capture fails on them (the stream
# cannot synchronise while capturing), and a graph would freeze the value read at capture.
HOST_READS = frozenset(
    {
        "_local_scalar_dense",
        "item",
        "is_nonzero",
        "equal",
        "nonzero",
        "masked_select",
        "unique",
        "_unique",
        "_unique2",
        "unique_consecutive",
        "unique_dim",
        "repeat_interleave",
    }
)
# Tensors made from Python data inside the step (``torch.tensor([...])``): the values are the
# capture's forever, and on CUDA the host-to-device copy is not allowed while capturing.
HOST_DATA = frozenset({"lift_fresh", "lift_fresh_copy"})


class CaptureError(RuntimeError):
    """The step cannot be captured as a graph (it reads the host, or the device refused)."""


class StepGraph(Protocol):
    def warmup(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Run ``fn`` once for real and return its output."""
        ...

    def capture(self, fn: Callable[[], torch.Tensor]) -> None:
        """Record ``fn``; nothing it does takes effect until ``replay``."""
        ...

    def replay(self) -> torch.Tensor:
        """Run what was captured; the returned tensor is overwritten by the next replay."""
        ...


class CudaGraph:
    """``StepGraph`` over ``torch.cuda.CUDAGraph``; ``pool``: the memory pool it shares."""

    def __init__(self, pool: Any, device: torch.device):
        self.pool, self.device = pool, device
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: torch.Tensor | None = None

    def warmup(self, fn):
        # PyTorch's recipe: run once on a side stream before capturing, so that lazily created
        # state (cuBLAS workspaces, autotuned kernels) exists before the capture starts.
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            out = fn()
        torch.cuda.current_stream(self.device).wait_stream(side)
        return out

    def capture(self, fn):
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.pool):
                out = fn()
        except RuntimeError as e:
            raise CaptureError(str(e).splitlines()[0] if str(e) else type(e).__name__) from e
        self.graph, self.out = graph, out

    def replay(self):
        self.graph.replay()
        return self.out


class _Recorder(TorchDispatchMode):
    """Runs every operator as usual and records (operator, arguments, result); before the first
    write to a tensor that existed before the capture, keeps a copy to put back afterwards."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[Any, tuple, dict, Any]] = []
        self.saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.made: set[int] = set()  # ids of tensors the capture created

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.__name__.split(".")[0]
        if name in HOST_READS:
            raise CaptureError(f"the step reads a device value on the host ({func})")
        if name in HOST_DATA:
            raise CaptureError(f"the step builds a tensor from Python data ({func})")
        for i, arg in enumerate(func._schema.arguments):
            alias = arg.alias_info
            if alias is not None and alias.is_write:
                t = kwargs.get(arg.name) if arg.kwarg_only else (args[i] if i < len(args) else None)
                if isinstance(t, torch.Tensor) and id(t) not in self.made:
                    self.saved.setdefault(id(t), (t, t.clone()))
        out = func(*args, **kwargs)
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.made.add(id(t))
        self.ops.append((func, args, kwargs, out))
        return out


def _fresh(func) -> bool:
    """Whether the operator returns new memory (not a view of, nor an argument written in place)."""
    return all(r.alias_info is None for r in func._schema.returns)


class OpTape:
    """``StepGraph`` by recording ATen operators and replaying them (see the module docstring).
    ``captures`` and ``replays`` count what happened, for tests."""

    def __init__(self):
        self.ops: list[tuple[Any, tuple, dict, Any]] = []
        self.out: torch.Tensor | None = None
        self.captures = 0
        self.replays = 0

    def warmup(self, fn):
        return fn()

    def capture(self, fn):
        rec = _Recorder()
        try:
            with torch.no_grad(), rec:
                out = fn()
        finally:
            # A capture runs nothing: what the recorded operators wrote goes back as it was.
            with torch.no_grad():
                for t, before in rec.saved.values():
                    t.copy_(before)
        self.ops, self.out = rec.ops, out
        self.captures += 1

    def replay(self):
        with torch.no_grad():
            for func, args, kwargs, out in self.ops:
                res = func(*args, **kwargs)
                if not _fresh(func):
                    continue  # a view of a recorded tensor, or written in place: already there
                if isinstance(out, torch.Tensor):
                    out.copy_(res)
                elif isinstance(out, (tuple, list)):
                    for o, r in zip(out, res):
                        if isinstance(o, torch.Tensor):
                            o.copy_(r)
        self.replays += 1
        return self.out
