"""Which samples an update sees."""

from __future__ import annotations

from teamrl.sample import Sample


def drop_flat_groups(samples: list[Sample]) -> list[Sample]:
    """DAPO-style dynamic filtering: keep only groups whose returns are not all equal."""
    returns: dict = {}
    for s in samples:
        returns.setdefault(s.group, set()).add(round(s.return_, 12))
    return [s for s in samples if len(returns[s.group]) > 1]
