"""Which weights answered: the provenance of every reply the endpoint serves.

Every chat completion, and every chunk of a streamed one, carries OpenAI's
``system_fingerprint`` field as

    teamrl:<agent>:s<step>:<hash>

- ``agent``: the agent the call named (its ``model``);
- ``step``: the version of the weights that sampled the reply, as the sampling engine
  recorded it (``teamrl.generation.versions``): the optimizer steps of the agent's policy
  that made them (restored with a checkpoint, so a resumed run counts on). Weights no optimizer
  of this process has stepped (an evaluation of saved weights) are at step 0;
- ``hash``: 12 hex characters identifying those weights (``weights_hash``): of the agent's
  own LoRA adapter under ``team.policies=lora``, of the policy's trained parameters otherwise
  (``shared``: one hash for every agent). It is computed once per (weights, step) and kept
  until the next optimizer step (``digest``), never per call.

The same three fields go in each sample's ``weights`` record (samples.jsonl), so a reply an
app logged can be matched to the sample that trained on it.

The served step comes from what sampled (the backend's ``served_version``), never from the
trainer's counter: a sampler holding its own copy of the weights (the ``hf`` backend's
``sampler_dtype`` copy, vLLM) that was not refreshed after an optimizer step reports the old
step. Synchronous training never serves such weights: the call fails with
``StaleWeightsError``, one line naming the agent, the served step and the current one. In
asynchronous training (``Team.learner`` set, ``teamrl.execution.asynchronous``) the sampler
holds an older snapshot by design: the gap, the learner's optimizer steps minus the served
step, is the reply's ``staleness`` (the ``app/staleness/<agent>`` metrics).

Under Ray the weights live on the worker groups, not in the process that serves: the
fingerprint names the agent and says the rest is not known here (``s?:unknown``).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from teamrl.generation import versions
from teamrl.team.policies import Policy, Team
from teamrl.tensors import is_adapter_param

HASH_BYTES = 6  # 12 hex characters
UNKNOWN = "unknown"  # the hash of weights whose tensors are not in this process


@dataclass(frozen=True)
class Stamp:
    """Which weights answered one call."""

    agent: str
    step: int | None  # the weights' version (optimizer steps); None: not known here (Ray)
    digest: str  # ``weights_hash`` of those weights, or UNKNOWN
    staleness: int | None = None  # asynchronous: the learner's steps minus ``step``

    @property
    def fingerprint(self) -> str:
        """The reply's ``system_fingerprint``: ``teamrl:<agent>:s<step>:<hash>``."""
        step = "?" if self.step is None else self.step
        return f"teamrl:{self.agent}:s{step}:{self.digest}"

    def record(self) -> dict:
        """The sample's ``weights`` field in samples.jsonl."""
        return {"agent": self.agent, "step": self.step, "hash": self.digest}


class StaleWeightsError(RuntimeError):
    """Synchronous training served a call with weights other than the policy's current ones."""


def stamp(team: Team, agent: str) -> Stamp:
    """The weights that answer ``agent``'s calls on ``team`` now. Synchronous (``team.learner``
    is None): a served step other than the policy's own is a ``StaleWeightsError``;
    asynchronous: the gap to the learner's policy is the stamp's ``staleness``."""
    pol = team.policies[team.policy_of[agent]]
    if pol.on_workers:
        return Stamp(agent, None, UNKNOWN)
    served = served_version(pol)
    trainer = (team.learner or team).policies[pol.name]
    current = None if trainer.on_workers else versions.live(trainer.model, trainer.adapter)
    if team.learner is None and served != current:
        raise StaleWeightsError(
            f"agent {agent!r} was answered by the weights of optimizer step {served}, but its "
            f"policy {pol.name!r} is at step {current}: the sampler's copy of the weights was "
            "not refreshed after an optimizer step (Backend.weights_changed)"
        )
    staleness = None if team.learner is None or current is None else current - served
    return Stamp(agent, served, digest(pol, served), staleness)


def fingerprint(team: Team, agent: str) -> str:
    """``stamp(team, agent).fingerprint``: for a route that builds its own reply."""
    return stamp(team, agent).fingerprint


def served_version(pol: Policy) -> int:
    """The version of the weights ``pol``'s engine samples with: what its backend recorded,
    or, for a backend that records none (it samples the live model, as a test double wrapping
    the ``hf`` backend does), the live weights' version."""
    backend = pol.engine.backend
    if isinstance(backend, versions.RecordsVersions):
        return backend.served_version(pol.adapter)
    return versions.live(pol.model, pol.adapter)


# model -> {part: (step, hash)}: the hash of the part's latest version, computed once
_DIGESTS: weakref.WeakKeyDictionary[torch.nn.Module, dict[str | None, tuple[int, str]]] = (
    weakref.WeakKeyDictionary()
)


def digest(pol: Policy, step: int) -> str:
    """``weights_hash`` of ``pol``'s trained tensors at version ``step``, computed at its first
    call and reused until the version changes (the next optimizer step or snapshot). UNKNOWN
    when the live tensors are no longer at ``step`` and it was never computed: only a sampler
    holding weights other than its own team's (asynchronous, its copy left unrefreshed)."""
    model, part = pol.model, pol.adapter
    known = _DIGESTS.get(model, {}).get(part)
    if known is not None and known[0] == step:
        return known[1]
    if versions.live(model, part) != step:
        return UNKNOWN
    value = weights_hash(trained_tensors(pol))
    _DIGESTS.setdefault(model, {})[part] = (step, value)
    return value


def trained_tensors(pol: Policy) -> list[tuple[str, torch.Tensor]]:
    """The tensors the policy's optimizer trains, by parameter name: its LoRA adapter's
    (``...lora_A.<adapter>.weight``), or every parameter that requires a gradient."""
    named = pol.model.named_parameters()
    if pol.adapter is None:
        return [(n, p) for n, p in named if p.requires_grad]
    return [(n, p) for n, p in named if is_adapter_param(n, pol.adapter)]


def weights_hash(tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """BLAKE2b with a 6-byte digest (12 hex characters) over each (name, tensor) in name
    order: the line ``<name>:<dtype>:<shape>`` and a newline (e.g. ``w:float32:[2, 3]``), then
    the tensor's bytes in row-major order. Deterministic for the same values in the same
    dtype, on any device."""
    h = hashlib.blake2b(digest_size=HASH_BYTES)
    for name, t in sorted(tensors, key=lambda item: item[0]):
        t = t.detach()
        h.update(f"{name}:{str(t.dtype).removeprefix('torch.')}:{list(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).cpu().numpy())
    return h.hexdigest()
