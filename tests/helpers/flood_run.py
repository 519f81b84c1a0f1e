"""An app run flooded mid-run by another user, run as a script in a process of its own
(``python -m helpers.flood_run RUN_DIR EXCESS``, from tests/apps/test_endpoint_load.py, which
lowers its soft open-file limit first; EXCESS: how many connections past the endpoint's cap
the flood opens, which it waits to see closed).

Four steps of two writers (tests/apps/test_app_training.py's app) on tiny-llama. The first
episode of step 3 forks a child that drops to uid 65534 and opens ``FLOOD`` connections to the
endpoint, half of them idle and half sending half a request, and holds them; every episode of
steps 3 and 4 runs during the flood, and the first one opens a pipe and a file. The run has no
periodic checkpoint (``log.save_steps`` at its default), so a run that dies loses every step.
Prints one JSON line: the steps trained, the flood's uid, the soft open-file limit while the
endpoint served and after it stopped, how many flood connections the endpoint closed at once,
and the guard's counts.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import threading
from pathlib import Path

from helpers.apps import tiny_cfg, user
from helpers.flood import Flood

FLOOD = 1100  # more than a soft limit of 256 and than endpoint.max_connections (1024)
FLOOD_AT = 7  # the first episode of step 3 (3 episodes a step)

state: dict = {"episodes": 0, "excess": 0}  # excess: connections past the endpoint's cap
lock = threading.Lock()
flooded = threading.Event()


def writers(client, example):
    with lock:
        state["episodes"] += 1
        first = state["episodes"] == FLOOD_AT
        during = state["episodes"] > FLOOD_AT
    if first:
        flood_now(client.base_url.host, client.base_url.port)
    elif during:
        flooded.wait(600)
    one = client.chat.completions.create(model="alice", messages=user(example["text"]))
    text = one.choices[0].message.content
    two = client.chat.completions.create(model="bob", messages=user(text))
    return len(set(text + two.choices[0].message.content)) / 10


def flood_now(host: str, port: int) -> None:
    try:
        flood = state["flood"] = Flood(host, port)
        state["flood_uid"] = flood.open(FLOOD // 2, "idle")
        flood.open(FLOOD - FLOOD // 2, "half")
        state["closed_at_once"] = flood.wait_closed(state["excess"])
        read, write = os.pipe()  # the trainer can still open pipes and files
        os.close(read)
        os.close(write)
        with tempfile.TemporaryFile() as f:
            f.write(b"still here")
        state["soft_serving"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    finally:
        flooded.set()


def main(run_dir: str, excess: int) -> None:
    import torch

    from teamrl.apps import app_task
    from teamrl.apps.endpoint import shared_endpoint
    from teamrl.trainer import Trainer

    torch.set_num_threads(1)
    state["excess"] = excess
    rows = [{"text": f"post number {i}"} for i in range(6)]
    task = app_task("writers_app", writers, ["alice", "bob"], train=rows)
    trainer = Trainer(tiny_cfg("train.max_steps=4"), task=task, run_dir=Path(run_dir))
    history = trainer.train()
    endpoint = shared_endpoint()
    guard = endpoint.guard
    counts = {"evicted": guard.evicted, "refused": guard.refused, "expired": guard.expired}
    endpoint.stop()
    state.pop("flood").stop()
    out = {
        "steps": [m["step"] for m in history],
        "soft_after": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "guard": counts,
        **{k: v for k, v in state.items() if k != "episodes"},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
