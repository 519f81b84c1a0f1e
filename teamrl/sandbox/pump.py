"""Reading a running sandbox: its output pipes, its limits, its end, and what killed it."""

from __future__ import annotations

import os
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Callable

from teamrl.sandbox import linux
from teamrl.sandbox.disk import LOOK_EVERY
from teamrl.sandbox.limits import UID_KILL_MODES, Limits


def kill_tree(proc: subprocess.Popen, mode: str, uid: int | None) -> None:
    """SIGKILL the process group (with a pid namespace that includes init, which takes the
    whole namespace with it); without one ("landlock", "setuid") also every process of the
    uid. Called before the leader is reaped, so its pid (= the group id) cannot have been
    reused."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if mode in UID_KILL_MODES:
        linux.kill_uid(uid)


def pump(
    proc: subprocess.Popen,
    limits: Limits,
    deadline: float,
    kill: Callable[[], None],
    report_fd: int = -1,
    over_disk: Callable[[], bool] | None = None,
) -> tuple[bytes, bytes, bytes, str | None, float]:
    """Read stdout, stderr (and the report channel) until the program ends or hits a limit;
    kill and reap it. ``over_disk``: asked every ``disk.LOOK_EVERY`` seconds whether the
    program's folder is past its bound (the modes without a tmpfs, ``teamrl.sandbox.disk``).

    Returns (stdout, stderr, report, the limit we enforced or None, CPU seconds of the
    reaped tree).
    """
    cap = limits.output_bytes
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    if report_fd >= 0:
        bufs[report_fd] = bytearray()
    sel = selectors.DefaultSelector()
    pidfd = os.pidfd_open(proc.pid)
    reason, killed = None, False
    next_look = time.monotonic() + LOOK_EVERY
    try:
        for fd in (*bufs, pidfd):
            sel.register(fd, selectors.EVENT_READ)
        # Until the leader has exited and every pipe is closed (the selector is empty then).
        while reason is None and sel.get_map():
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                reason = "wall_time"
                break
            if over_disk is not None:
                if now >= next_look:
                    if over_disk():
                        reason = "disk_limit"
                        break
                    next_look = time.monotonic() + LOOK_EVERY
                remaining = min(remaining, max(next_look - now, 0.0))
            for key, _ in sel.select(remaining):
                if key.fd == pidfd:
                    # The leader is a zombie: kill what it left behind, so the pipes close.
                    sel.unregister(pidfd)
                    kill()
                    killed = True
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = bufs[key.fd]
                buf += chunk
                if len(buf) > cap:
                    del buf[cap:]
                    reason = "output_limit"
        if not killed:
            kill()
            killed = True
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if reason is not None:
            _drain(sel, bufs, cap, pidfd)
    finally:
        if not killed:  # an error above: never leave the program running
            kill()
        if proc.returncode is None:
            proc.wait()
        sel.close()
        os.close(pidfd)
    report = bytes(bufs.get(report_fd, b""))
    cpu = usage.ru_utime + usage.ru_stime
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), report, reason, cpu


def _drain(sel: selectors.BaseSelector, bufs: dict[int, bytearray], cap: int, pidfd: int) -> None:
    """After a kill, keep what is already in the pipes: up to the cap, for at most 0.5 s
    (once every writer is dead the pipes reach EOF at once)."""
    end = time.monotonic() + 0.5
    while any(fd in bufs for fd in sel.get_map()) and (left := end - time.monotonic()) > 0:
        ready = sel.select(left)
        if not ready:
            return
        for key, _ in ready:
            if key.fd not in bufs:
                continue
            chunk = os.read(key.fd, 65536)
            buf = bufs[key.fd]
            if not chunk or len(buf) >= cap:
                sel.unregister(key.fd)
            else:
                buf += chunk[: cap - len(buf)]


def namespace_status(status_fd: int) -> tuple[int | None, int | None]:
    """(init's pid as we see it, the program's wait status) from the boot script's status
    pipe ("I<pid>" then "S<status>"); None where it never came (init killed first). Reads
    until every writer is gone (they were killed), for at most 1 s."""
    data, end = b"", time.monotonic() + 1.0
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select([status_fd], [], [], left)
        chunk = os.read(status_fd, 64) if ready else b""
        if not chunk:
            break
        data += chunk
    found: dict[str, int] = {}
    for line in data.decode().split():
        found[line[:1]] = int(line[1:])
    return found.get("I"), found.get("S")


def classify(
    reason: str | None, returncode: int, cpu: float, limits: Limits, stderr: str
) -> str | None:
    if reason is not None:
        return reason
    # SIGXCPU at the soft CPU limit, SIGKILL at the hard one (a program ignoring SIGXCPU).
    if returncode == -signal.SIGXCPU or (
        returncode == -signal.SIGKILL and cpu >= limits.cpu_seconds - 0.05
    ):
        return "cpu_time"
    if returncode < 0:
        return f"signal {-returncode}"
    if returncode != 0:
        lines = stderr.rstrip().splitlines()
        last = lines[-1] if lines else ""
        if last.startswith("MemoryError"):
            return "memory"
        if "[Errno 27] File too large" in last:
            return "file_size"
        if "[Errno 28] No space left" in last:  # its tmpfs is full (teamrl.sandbox.disk)
            return "disk_limit"
    return None
