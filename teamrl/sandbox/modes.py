"""Which isolation a run gets: probing, the user's opt-in to a weak mode, logging.

``"auto"`` means the strongest mode that works here; the weak modes (``"setuid"``, which
leaves world-writable folders and host unix sockets open, and ``"rlimits"``, which runs as
the caller's uid) are never chosen silently: only when asked for by name, through
``isolation=`` or the ``TEAMRL_SANDBOX_ISOLATION`` environment variable.
"""

from __future__ import annotations

import logging
import os
import threading

from teamrl.sandbox import landlock, linux, seccomp
from teamrl.sandbox.limits import FRESH_UID_MODES, ISOLATION_MODES, WEAK_MODES, Limits

ISOLATION_ENV = "TEAMRL_SANDBOX_ISOLATION"
logger = logging.getLogger("teamrl.sandbox")

# What each mode leaves open, as the hostile corpus in tests/sandbox/test_sandbox.py measures it
# (docs/sandbox.md has a table per mode of the memory, disk, sockets and IPC a program can use).
_COMMON = (
    "memory is bounded per process (memory_mb of address space, up to max_processes), plus "
    "kernel buffers no RSS counts: a pipe or socket per descriptor (open_files), each socket "
    "at the system's default buffer size"
)
RESIDUAL_RISKS = {
    "namespaces": "reads world-readable files; sees host processes in /proc (not their "
    "environment); may connect or send to a unix socket file it may write outside the "
    f"private /tmp, /run, /dev/shm, /var/tmp; {_COMMON}, and its tmpfs (disk_mb)",
    "userns": "runs as your uid outside its namespaces: reads files you can read outside your "
    "home and the private /tmp, /run, /dev/shm, /var/tmp (read-only), and may connect or "
    f"send to your unix sockets elsewhere; {_COMMON}, and its tmpfs (disk_mb)",
    "landlock": "reads world-readable files; sees host processes in /proc (not their "
    "environment); the working directory is on disk, bounded (disk_mb, disk_files, and "
    "the files its processes hold there without a name) by a watcher that looks every "
    "50 ms, so a program may write past the bound for that long (each file within "
    "file_size_mb) before it is killed, and a process that runs an executable it may not "
    f"read is not watched; {_COMMON}",
    "setuid": "WEAK: writes to world-writable places (/tmp, /dev/shm, any 0777 folder), "
    "directly or through any program it runs, each file within file_size_mb (/dev/shm is "
    "memory); connects or sends (datagrams) to unix sockets in /tmp and abstract ones (the "
    "seccomp filter refuses every other socket family, also to ctypes, curl or a child "
    "interpreter); the working directory is on disk, bounded by a watcher only (as in "
    f"landlock); {_COMMON}",
    "rlimits": "WEAK: runs as your uid without namespaces: it can write and read wherever you "
    "can, read the trainer's /proc/<pid>/environ and its memory (/proc/<pid>/mem), signal "
    "the trainer, connect or send to your unix sockets and abstract ones, and leave "
    "daemons running (which the disk watcher does not see either); the seccomp filter "
    "refuses ptrace, io_uring, keyrings, memfds, IPC, new namespaces and every socket "
    f"family but unix; {_COMMON}",
}

_lock = threading.Lock()
_modes: dict[str, str] = {}
_logged: set[str] = set()


def _log_once(mode: str) -> None:
    with _lock:
        if mode in _logged:
            return
        _logged.add(mode)
    level = logging.WARNING if mode in WEAK_MODES else logging.INFO
    logger.log(level, "sandbox isolation %r; residual risks: %s", mode, RESIDUAL_RISKS[mode])


def check_mode(isolation: str) -> str:
    """``isolation`` if this process may use it, else ValueError saying why."""
    if isolation not in ISOLATION_MODES:
        raise ValueError(
            f"isolation: expected 'auto' or one of {ISOLATION_MODES}, got {isolation!r}"
        )
    root = os.geteuid() == 0
    real_root = root and linux.in_initial_userns()
    if isolation in ("rlimits", "userns") and real_root:
        raise ValueError(
            f"isolation: {isolation!r} is refused as root (RLIMIT_NPROC is not enforced for "
            "root, so a fork bomb would be unbounded); use 'namespaces' or 'landlock'"
        )
    if isolation in FRESH_UID_MODES and not root:
        raise ValueError(f"isolation: {isolation!r} needs root, running as uid {os.geteuid()}")
    return isolation


def mode_problem(isolation: str) -> str | None:
    """Why ``isolation`` cannot run here, in one line, or None; without running a program,
    so a config check can call it before anything loads. ``"auto"`` is None: which mode it
    gets is probed at the first program (``isolation_mode``). A named mode is checked for
    what it needs of this process and kernel (``check_mode``: root or not; seccomp, which
    every mode installs; Landlock for "landlock"); what only a run shows (namespaces a
    container forbids) still fails at the first program."""
    if isolation == "auto":
        return None
    try:
        check_mode(isolation)
        seccomp.require(isolation)
        if isolation == "landlock":
            landlock.require()
    except (ValueError, RuntimeError) as exc:
        return str(exc).removeprefix("isolation: ").removeprefix("sandbox: ")
    return None


def _candidates() -> list[str]:
    """The strong modes this process may use, strongest first (never a weak one)."""
    root = os.geteuid() == 0
    found = ["namespaces"] if root else []
    if not (root and linux.in_initial_userns()):
        found.append("userns")
    if root:
        found.append("landlock")
    return found


def _advice(tried: list[str]) -> str:
    """What to enable for each strong mode that failed, and the weak mode to opt in to."""
    steps = {
        "namespaces": "give the process CAP_SYS_ADMIN",
        "userns": "allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0, "
        "kernel.unprivileged_userns_clone = 1)",
        "landlock": "run on a kernel with Landlock ABI >= 3 and seccomp, with an interpreter "
        "other users can reach",
    }
    advice = [steps[mode] for mode in tried if mode in steps]
    if "landlock" not in tried:
        advice.append("run as root")
    weak = "setuid" if "landlock" in tried else "rlimits"
    return ", ".join(advice) + f", or accept the weak mode with {ISOLATION_ENV}={weak}"


def _probe(mode: str, exe: str) -> str | None:
    """None if a trivial program runs under ``mode``, else why not."""
    from teamrl.sandbox.execute import execute  # the sandbox itself: only when probing

    try:
        probe = execute("print('ok')", "", Limits(wall_seconds=20), (), mode, exe)
    except (RuntimeError, OSError) as exc:
        return str(exc)
    if probe.ok and probe.stdout == "ok\n":
        return None
    return f"the probe program gave {probe}"


def isolation_mode(python: str | None = None) -> str:
    """The isolation ``run_python`` gets by default for ``python`` (probed once, cached).

    ``TEAMRL_SANDBOX_ISOLATION`` names a mode to use instead of probing (``rlimits`` is
    reachable only this way or by ``isolation="rlimits"``, and so is ``setuid``). Otherwise
    the strongest that runs a trivial program: ``"namespaces"`` as root, ``"userns"`` for
    everyone else and for root inside a user namespace, then ``"landlock"`` as root. Never a
    weak mode: RuntimeError, in one line saying what to enable or set, when none works.
    """
    exe, _ = linux.interpreter(python)
    requested = os.environ.get(ISOLATION_ENV, "").strip()
    if requested and requested != "auto":
        try:
            mode = check_mode(requested)
        except ValueError as exc:
            raise ValueError(f"{ISOLATION_ENV}={requested}: {exc}") from None
        _log_once(mode)
        return mode
    with _lock:
        mode = _modes.get(exe)
    if mode is None:
        failures, tried = [], _candidates()
        for candidate in tried:
            if (why := _probe(candidate, exe)) is None:
                mode = candidate
                break
            failures.append(f"{candidate}: {why}".replace("\n", " "))
        if mode is None:
            raise RuntimeError(
                "sandbox: no strong isolation works here ("
                + "; ".join(failures)
                + "): "
                + _advice(tried)
            )
        with _lock:
            _modes[exe] = mode
    _log_once(mode)
    return mode


def resolve_mode(isolation: str, python: str | None) -> str:
    if isolation == "auto":
        return isolation_mode(python)
    mode = check_mode(isolation)
    _log_once(mode)
    return mode
