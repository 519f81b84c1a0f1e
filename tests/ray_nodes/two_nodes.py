"""Two Ray nodes on one machine, started with the ``ray start`` CLI as a user starts a cluster:
a head (the GCS, a raylet, 1 logical CPU, resource ``node_a``) and a worker node (its own raylet
and temp dir, 1 CPU, resource ``node_b``).

Each ``ray start --block`` runs in its own session, so that its process group holds that
node's daemons (GCS, raylet, agents); killing the group with SIGKILL is a node lost with all
its processes, and it stops nothing else on the machine (never ``ray stop``, which stops every
Ray of this host, other tests' included). Every port is picked free, so the cluster does not
meet another one on this machine.

Health checks are quick (``HEALTH``), so that the head marks a lost node dead within seconds;
a real cluster sets the same ``RAY_health_check_*`` variables on its head (docs/distributed.md).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: the workers import teamrl from it
RAY = str(Path(sys.executable).with_name("ray"))

# The head marks a node dead after 5 missed checks a second apart (each may take 2 s): a few
# seconds, with room for a busy machine's stalls (a false death would fail the test).
HEALTH = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "2000",
    "RAY_health_check_failure_threshold": "5",
}
START_S = 120.0  # a node's `ray start`, and the second node's registration


def node_env() -> dict[str, str]:
    """The environment of the nodes and of the drivers that join them."""
    return {
        **os.environ,
        **HEALTH,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
        # a private test cluster on this host: no token (Ray's default token auth would want
        # the same token on every node and driver) and no usage report
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "OMP_NUM_THREADS": "1",
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _ports() -> list[str]:
    names = (
        "node-manager-port",
        "object-manager-port",
        "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port",
        "runtime-env-agent-port",
        "metrics-export-port",
    )
    return [arg for n in names for arg in (f"--{n}", str(_free_port()))]


class TwoNodes:
    """``with TwoNodes(folder) as nodes:`` a head and a worker node; ``nodes.address`` (the
    head's GCS), ``nodes.head_id`` and ``nodes.worker_id`` (Ray node ids); ``kill_worker()``
    loses the worker node; leaving the block kills both."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)  # the `ray start` logs
        self.folder.mkdir(parents=True, exist_ok=True)
        # Ray's temp dirs hold its sockets, whose paths must stay under 108 bytes: a short
        # folder of its own, removed with the nodes
        self.temp = Path(tempfile.mkdtemp(prefix="teamrl-nodes-"))
        self.procs: list[subprocess.Popen] = []
        self.address = ""
        self.head_id = self.worker_id = ""

    def __enter__(self) -> TwoNodes:
        try:
            port = _free_port()
            self.address = f"127.0.0.1:{port}"
            head = [
                "--head",
                f"--port={port}",
                '--resources={"node_a": 1}',
                "--include-dashboard=false",
                f"--dashboard-port={_free_port()}",
                f"--ray-client-server-port={_free_port()}",
            ]
            self._start("head", head)
            self._start("worker", [f"--address={self.address}", '--resources={"node_b": 1}'])
            ids = self._node_ids()
            self.head_id, self.worker_id = ids["node_a"], ids["node_b"]
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self, name: str, args: list[str]) -> None:
        log = self.folder / f"{name}.log"
        cmd = [RAY, "start", "--block", "--num-cpus=1", "--disable-usage-stats"]
        cmd += ["--temp-dir", str(self.temp / name), *_ports(), *args]
        with open(log, "w") as out:
            proc = subprocess.Popen(
                cmd, env=node_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs.append(proc)
        deadline = time.monotonic() + START_S
        while "Ray runtime started" not in log.read_text():
            assert proc.poll() is None, f"ray start ({name}) failed:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"ray start ({name}): not up in {START_S:g} s"
            time.sleep(0.2)

    def _node_ids(self) -> dict[str, str]:
        """{custom resource: node id} once both nodes are alive, asked of the head by a driver
        in a subprocess (the test process joins no cluster)."""
        script = (
            "import json, sys, time, ray\n"
            "ray.init(address=sys.argv[1], log_to_driver=False)\n"
            "deadline = time.monotonic() + float(sys.argv[2])\n"
            "while True:\n"
            "    nodes = [n for n in ray.nodes() if n['Alive']]\n"
            "    if len(nodes) == 2 or time.monotonic() > deadline:\n"
            "        break\n"
            "    time.sleep(0.2)\n"
            "print(json.dumps({r: n['NodeID'] for n in nodes for r in n['Resources']"
            " if r.startswith('node_')}))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", script, self.address, str(START_S)],
            env=node_env(),
            capture_output=True,
            text=True,
            timeout=START_S + 60,
        )
        assert out.returncode == 0, out.stderr
        ids = json.loads(out.stdout.strip().splitlines()[-1])
        assert sorted(ids) == ["node_a", "node_b"], f"not two nodes: {ids}"
        return ids

    def kill_worker(self) -> None:
        """The worker node lost: SIGKILL to every process of its group (raylet, agents); its
        Ray workers exit with their raylet."""
        _kill_group(self.procs[1])

    def stop(self) -> None:
        for proc in reversed(self.procs):
            _kill_group(proc)
        self.procs = []
        shutil.rmtree(self.temp, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
