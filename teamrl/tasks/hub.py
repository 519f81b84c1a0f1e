"""A task's dataset from the hub or a local folder; a failure to get it is one line.

Every task loader reads upstream data through ``load_dataset`` here. Whatever stops the data
from arriving (no network, the hub's offline mode, a hub id or folder that does not exist, a
folder holding no data files, an unknown split) is the user's input or machine, so it ends as
one ``ConfigError`` naming the dataset and saying what to pass instead, before any model
loads. A programming error (``TypeError``, ``AttributeError``...) keeps its traceback.
"""

from __future__ import annotations

from typing import Any

from teamrl.errors import ConfigError

LOCAL_COPY = "env.kwargs.dataset_id=<a local folder holding a copy of the dataset>"

# Errors of our own code, never of the data or the network: they keep their traceback.
_BUGS = (TypeError, AttributeError, NameError, AssertionError, ImportError)


def check_dataset_id(dataset_id: Any) -> None:
    """``env.kwargs.dataset_id`` must be a non-empty string (a hub id or a local folder)."""
    if not isinstance(dataset_id, str) or not dataset_id.strip():
        raise ConfigError(
            f"env.kwargs.dataset_id: expected a hub id or a local folder, got {dataset_id!r}"
        )


def load_dataset(*args: Any, dataset: str, instead: str = LOCAL_COPY, **kwargs: Any) -> Any:
    """``datasets.load_dataset(*args, **kwargs)``; a failure is a ConfigError naming
    ``dataset`` (the hub id or folder the user gave) and ``instead`` (what to pass instead)."""
    import datasets  # heavy: imported only when a loader runs

    try:
        return datasets.load_dataset(*args, **kwargs)
    except _BUGS:
        raise
    except Exception as err:  # network, offline mode, missing data, bad split: the input
        raise ConfigError(
            f"env.kwargs.dataset_id: cannot load the dataset {dataset!r} ({reason(err)}); "
            f"pass {instead}"
        ) from None


def reason(err: BaseException) -> str:
    """``Type: first line of the message``, clipped to 160 characters."""
    lines = str(err).strip().splitlines()
    text = f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
    return text if len(text) <= 160 else text[:160] + "..."
