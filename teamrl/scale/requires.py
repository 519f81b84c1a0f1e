"""The one place teamrl.scale imports Ray: a missing extra is a one-line error naming it."""

from __future__ import annotations

from teamrl.errors import ConfigError


def require_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("distributed.backend=ray needs Ray: pip install 'teamrl[ray]'") from None
    return ray
