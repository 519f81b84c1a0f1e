"""Which version of a model's trainable weights is live, and which one a sampler holds.

A *version* counts the optimizer steps that made the weights of one trainable part of a model:
a LoRA adapter (named) or the whole model (None). Whoever moves a part's weights attaches a
clock to it: the learner's optimizer (``teamrl.team.optim``, which counts its steps), or, for
the copy an asynchronous generator samples from, the version of the snapshot it loaded
(``pin``). A part no clock was attached to is at version 0 (the weights as built or loaded).

A backend that holds weights of its own (the ``hf`` backend's ``sampler_dtype`` copy, vLLM's
engine) records the live version when it takes the weights (``Backend.weights_changed``) and
reports it as ``served_version``: so the version of a reply comes from what actually sampled,
and a sampler nobody refreshed shows the old version (``teamrl.apps.provenance`` turns that
into an error or a staleness metric). A backend that samples from the live model serves its
live version.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch

Clock = Callable[[], int]  # the part's optimizer steps so far

# model -> {part: clock}. Weak: a clock must not hold its model (it holds an optimizer, whose
# parameters are the model's tensors, not the module), so the entry dies with the model.
_CLOCKS: weakref.WeakKeyDictionary[torch.nn.Module, dict[str | None, Clock]] = (
    weakref.WeakKeyDictionary()
)


def attach(model: torch.nn.Module, part: str | None, clock: Clock) -> None:
    """``clock`` tells the version of ``model``'s part ``part`` (an adapter, or None: all)."""
    _CLOCKS.setdefault(model, {})[part] = clock


def pin(model: torch.nn.Module, part: str | None, version: int) -> None:
    """The part holds weights of ``version`` until the next ``attach`` or ``pin`` (a copy
    loaded from a snapshot, which no optimizer of its own steps)."""
    attach(model, part, lambda: version)


def live(model: torch.nn.Module, part: str | None) -> int:
    """The version of the weights ``model``'s part holds now (0 when no clock is attached)."""
    clock = _CLOCKS.get(model, {}).get(part)
    return 0 if clock is None else clock()


@runtime_checkable
class RecordsVersions(Protocol):
    """A backend that knows which version of each part it samples with."""

    def served_version(self, adapter: str | None) -> int:
        """The version of the weights that sample requests for ``adapter`` (None: the full
        model): the live one for a backend that samples from the live model, else the one it
        took at its last ``weights_changed``."""
        ...
