"""Linux plumbing for the sandbox: syscalls through ctypes, fresh uids, killing and reaping.

The ctypes handles are resolved in the parent; a forked child only calls them.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import stat
import sys
import threading

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x8000000, 0x20000000, 0x40000000
CLONE_NEWUSER = 0x10000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
# The new mount API has the same syscall numbers on every architecture (>= 424 are shared).
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE, O_CLOEXEC, AT_RECURSIVE, AT_FDCWD = 0x1, 0o2000000, 0x8000, -100
MOVE_MOUNT_F_EMPTY_PATH, MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x4, 0x1, 0x2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_GET_CHILD_SUBREAPER = 1, 38, 37

# Fresh uids come from this range: above any real account, below 2**31.
UID_BASE, UID_SPAN = 1_800_000_000, 1 << 28


class _MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("attr_set", "attr_clr", "propagation", "userns")]


_libc_handle: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        handle = ctypes.CDLL(None, use_errno=True)
        handle.syscall.restype = ctypes.c_long
        _libc_handle = handle
    return _libc_handle


def check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def blocked_ancestor(path: str) -> str | None:
    """The topmost directory on ``path`` that other users may not enter (no o+x), if any."""
    current = "/"
    for part in path.strip("/").split("/"):
        current = os.path.join(current, part)
        if not os.stat(current).st_mode & stat.S_IXOTH:
            return current
    return None


def interpreter(python: str | None) -> tuple[str, str]:
    """(real executable, its prefix): the prefix must be visible to the sandbox user."""
    exe = os.path.realpath(python or sys.executable)
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        raise ValueError(f"python: not an executable file: {python!r}")
    return exe, os.path.dirname(os.path.dirname(exe))


def in_initial_userns() -> bool:
    """True unless this process runs in a user namespace (e.g. root of a rootless container)."""
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return True


# --------------------------------------------------------------------------------------
# Fresh uids
# --------------------------------------------------------------------------------------

_uid_lock = threading.Lock()
_uids_in_use: set[int] = set()


def lease_uid() -> int:
    # Random over 2**28 ids, so two processes running sandboxes at once collide with
    # negligible probability; within this process the set makes leases unique.
    with _uid_lock:
        while (uid := UID_BASE + secrets.randbelow(UID_SPAN)) in _uids_in_use:
            pass
        _uids_in_use.add(uid)
        return uid


def release_uid(uid: int) -> None:
    with _uid_lock:
        _uids_in_use.discard(uid)


def kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid``: a forked child becomes ``uid`` and calls kill(-1),
    which signals every process the caller may signal (its own uid) except itself, under the
    kernel's task-list lock, so no process of that uid can fork past it."""
    pid = os.fork()
    if pid == 0:  # the child only makes system calls, then _exits
        code = 0
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:  # nothing left: the normal case
                pass
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"sandbox: could not kill the processes of uid {uid}")


# --------------------------------------------------------------------------------------
# Reaping (item: a trainer that is PID 1 of a container inherits every orphan)
# --------------------------------------------------------------------------------------


def reaps_orphans() -> bool:
    """Whether orphans are reparented to us: we are PID 1 of our pid namespace (a container
    without an init) or a child subreaper. Otherwise the system's init reaps them."""
    if os.getpid() == 1:
        return True
    flag = ctypes.c_int(0)
    done = libc().prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
    return done == 0 and flag.value != 0


def _status_fields(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}


def reap_namespace_init(pid: int) -> None:
    """Reap the sandbox's init (``pid``, as we see it) if it was reparented to us.

    Its parent is killed with it, so when we are PID 1 (or a subreaper) the kernel hands the
    dying init to us, and nobody else would ever wait for it. ``NSpid`` ending in 1 tells it
    from an unrelated child that might have reused the pid after a normal exit."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not ours: the system's init reaps it (or it is gone)
        return
    nspid = _status_fields(pid).get("NSpid", "").split()
    if done == 0 and len(nspid) > 1 and nspid[-1] == "1":
        try:
            os.waitpid(pid, 0)  # it was SIGKILLed with its parent: it is about to exit
        except ChildProcessError:
            pass


def reap_dead_inits() -> None:
    """Reap every sandbox init that was reparented to us, found through ``/proc`` (a run
    killed before its boot process could report init's pid). An init becomes our child only
    once its parent, killed with it, is gone, so each one found is dying: waiting is short."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _status_fields(int(entry))
            nspid = fields.get("NSpid", "").split()
            if fields.get("PPid") == me and len(nspid) > 1 and nspid[-1] == "1":
                try:
                    os.waitpid(int(entry), 0)
                except ChildProcessError:
                    pass


def reap_orphans_of(uid: int) -> None:
    """Reap zombie children of ours owned by ``uid`` (a fresh uid leased to one run, whose
    processes have all been killed): orphans the "setuid" mode leaves to PID 1."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _status_fields(int(entry))
        uids = fields.get("Uid", "").split()
        if fields.get("PPid") == me and uids[:1] == [str(uid)]:
            try:
                os.waitpid(int(entry), 0)
            except ChildProcessError:
                pass
