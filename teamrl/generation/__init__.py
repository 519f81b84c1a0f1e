"""Generation backends, below ``Team``: torch (and peft, lazily) only, never the team, the
envs or the rollouts. See backend.py for the seam."""

from teamrl.generation.backend import Backend, EngineSpec, make_backend
from teamrl.generation.types import Generation, Request, stop_end, stop_floor

__all__ = [
    "Backend",
    "EngineSpec",
    "Generation",
    "Request",
    "make_backend",
    "stop_end",
    "stop_floor",
]
