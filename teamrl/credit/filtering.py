"""Which samples an update sees."""

from __future__ import annotations

from collections.abc import Callable

from teamrl.sample import Sample


def drop_flat_groups(samples: list[Sample]) -> list[Sample]:
    """DAPO-style dynamic filtering: keep only groups whose returns are not all equal."""
    returns: dict = {}
    for s in samples:
        returns.setdefault(s.group, set()).add(round(s.return_, 12))
    return [s for s in samples if len(returns[s.group]) > 1]


def flat_groups_filled(
    first: list[Sample], kept: list[Sample], more: Callable[[], list[Sample]], max_rounds: int
) -> tuple[list[Sample], int]:
    """DAPO's dynamic sampling: draw more problems (``more()``: a new rollout, advantages
    already computed) until the step holds as many non-flat groups as its first rollout had
    groups, or ``max_rounds`` extra rollouts have run. Returns (samples, rounds used); extra
    groups beyond the target are dropped, and each round's group keys are tagged with the
    round so that groups of different rounds never merge.
    """
    target = len({s.group for s in first})
    have = list(dict.fromkeys(s.group for s in kept))
    rounds = 0
    while len(have) < target and rounds < max_rounds:
        rounds += 1
        extra = drop_flat_groups(more())
        for s in extra:
            s.group = ("resample", rounds, s.group)
        room = list(dict.fromkeys(s.group for s in extra))[: target - len(have)]
        kept = kept + [s for s in extra if s.group in set(room)]
        have += room
    return kept, rounds
