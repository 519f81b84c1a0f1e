"""The one place teamrl.scale imports Ray: a missing extra is a one-line error naming it."""

from __future__ import annotations

from teamrl.errors import ConfigError


def require_ray():
    try:
        import ray
    except ImportError:
        ray = None
    # a folder named ``ray`` on the path (this repository's tests/ray, run from tests/) imports
    # as an empty namespace package: that is not Ray either
    if not hasattr(ray, "init"):
        raise ConfigError("distributed.backend=ray needs Ray: pip install 'teamrl[ray]'")
    return ray
