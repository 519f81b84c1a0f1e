"""Landlock through ctypes: where the "landlock" mode's program may write, and its scopes.

Landlock (Linux 5.13+) lets an unprivileged process restrict itself and every process it
later starts, across ``exec``: once a thread calls ``landlock_restrict_self``, each access
the ruleset *handles* is refused unless a rule allows it beneath a given folder. We handle
every kind of write (writing, truncating, creating, removing, renaming or linking across
folders) and allow them beneath the run's working directory only, plus writing to
``/dev/null``, ``/dev/zero`` and ``/dev/full``. Reads and execution are not handled: the
fresh uid's file permissions govern them, as in the "namespaces" mode.

Layers by ABI version (``landlock_create_ruleset(NULL, 0, VERSION)`` returns it):

* 1: writes, creation and removal of files; 2 (5.19): ``REFER`` (rename/link across
  folders); 3 (6.2): ``TRUNCATE``. Without 3, a world-writable file outside could still be
  truncated, so the mode needs at least ``MIN_ABI = 3``.
* 4 (6.7): TCP ``bind``/``connect`` handled with no port allowed: no TCP at all.
* 6 (6.12): scopes: no connecting to abstract unix sockets made outside the sandbox, no
  signals to processes outside it.

The network layers back up the seccomp filter (``teamrl.sandbox.seccomp``), which refuses
``socket(2)`` itself; they are used when the kernel has them.

The ruleset is built in the parent (``ruleset``), so an unsupported kernel is a one-line
error before any fork; the forked child only calls ``restrict_self`` on the inherited fd.
"""

from __future__ import annotations

import ctypes
import os

from teamrl.sandbox import linux

# Syscall numbers >= 424 are the same on every architecture.
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
MIN_ABI = 3

# Filesystem rights (include/uapi/linux/landlock.h).
WRITE_FILE, TRUNCATE, REFER = 1 << 1, 1 << 14, 1 << 13
REMOVE_DIR, REMOVE_FILE = 1 << 4, 1 << 5
MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK = 1 << 6, 1 << 7, 1 << 8, 1 << 9
MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 10, 1 << 11, 1 << 12
# Network rights (ABI 4) and scopes (ABI 6).
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

# Devices every program may write to (a sink, and two sources that ignore writes).
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("handled_access_fs", "handled_access_net", "scoped")]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _syscall(number: int, *args) -> int:
    return linux.libc().syscall(ctypes.c_long(number), *args)


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled at boot."""
    version = _syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(version, 0)


def write_rights(version: int) -> int:
    """Every write-like filesystem right this ABI version knows."""
    rights = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG
    rights |= MAKE_SOCK | MAKE_FIFO | MAKE_BLOCK | MAKE_SYM
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    return rights


def require() -> int:
    """The ABI version, or RuntimeError (one line) when it is below ``MIN_ABI``."""
    version = abi()
    if version < MIN_ABI:
        found = f"ABI {version}" if version else "no Landlock"
        raise RuntimeError(
            f"sandbox: isolation 'landlock' needs Landlock ABI >= {MIN_ABI} (Linux 6.2+ with "
            f"'landlock' in the lsm= boot list); this kernel has {found}"
        )
    return version


def _allow(ruleset_fd: int, path: str, rights: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        rule = _PathBeneathAttr(rights, fd)
        args = (ctypes.c_int(ruleset_fd), ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(rule))
        linux.check(_syscall(SYS_ADD_RULE, *args, ctypes.c_uint32(0)), f"landlock rule {path}")
    finally:
        os.close(fd)


def ruleset(workdir: str, network: bool) -> int:
    """A Landlock ruleset fd (close-on-exec) for one run: writes beneath ``workdir`` and to
    the ``WRITABLE_DEVICES`` only; unless ``network``, no TCP and no abstract unix sockets
    made outside; never a signal to a process outside. RuntimeError if the kernel is too old.
    """
    version = require()
    rights = write_rights(version)
    attr = _RulesetAttr(rights, 0, 0)
    if version >= 4 and not network:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
    if version >= 6:
        attr.scoped = SCOPE_SIGNAL | (0 if network else SCOPE_ABSTRACT_UNIX_SOCKET)
    # The struct grew with the ABI; an older kernel takes only the fields it knows.
    size = 8 if version < 4 else 16 if version < 6 else ctypes.sizeof(attr)
    made = _syscall(
        SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    fd = linux.check(made, "landlock_create_ruleset")
    try:
        _allow(fd, workdir, rights)
        for device in WRITABLE_DEVICES:
            if os.path.exists(device):  # a rule on a file may hold file rights only
                _allow(fd, device, WRITE_FILE | (TRUNCATE if version >= 3 else 0))
    except BaseException:
        os.close(fd)
        raise
    return fd


def restrict_self(ruleset_fd: int) -> None:
    """Put the calling thread (the forked child, single-threaded) under the ruleset; every
    process it execs or forks inherits it. Needs ``no_new_privs`` (or CAP_SYS_ADMIN)."""
    done = _syscall(SYS_RESTRICT_SELF, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0))
    linux.check(done, "landlock_restrict_self")
