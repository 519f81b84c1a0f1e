"""A seccomp filter through ctypes: the system calls a sandboxed program may not make.

A seccomp filter is a small classic-BPF program the kernel runs on every system call of the
process and of everything it later forks or execs; it sees the call's number, architecture
and raw arguments (not the memory they point to). Every mode installs one as the last step
before the program runs ("namespaces", "landlock" and the weak "setuid" and "rlimits" in the
child before it execs the interpreter, "setuid" after its drop to the fresh uid; "userns" in
the boot script once the program's own user namespace is made, see ``teamrl.sandbox.boot``).
Ours refuses, with ``EPERM``:

* ``socket(2)`` unless the run allows the network. "landlock": every family, so no TCP,
  UDP, raw, netlink, nor unix sockets (a socket file in ``/tmp`` or an abstract one both
  start with ``socket``; Landlock has no rule for connecting to a socket file). Every other
  mode: every family but ``AF_UNIX``. With a network namespace ("namespaces", "userns") unix
  sockets reach only the sandbox's own files and network namespace; in the weak modes they
  are the family the Python-level socket guard lets through (``teamrl.sandbox.boot``), and
  the filter holds the same line for ctypes, a child interpreter or ``curl``. The other
  families (netlink, vsock, which no network namespace fences, the kernel's crypto
  sockets...) are kernel surface a program has no use for. ``socketpair`` stays: a
  connected pair reaches nothing outside. io_uring, which could open and connect sockets
  past the filter, is refused outright.
* reaching into other processes: ``ptrace``, ``process_vm_readv``/``writev``,
  ``pidfd_getfd``;
* new namespaces and mounts: ``unshare``, ``setns``, ``clone`` with a ``CLONE_NEW*`` flag,
  the mount calls (Landlock forbids them too);
* kernel surfaces a program has no use for: ``bpf``, ``perf_event_open``, ``userfaultfd``,
  the keyrings, and System V IPC (its objects would outlive the run: there is no IPC
  namespace here).

``clone3`` passes its flags in memory the filter cannot read, so it gets ``ENOSYS``, on
which the C library falls back to ``clone`` (whose flags it can). A call from another
architecture's ABI (32-bit ``int 0x80``, x32) would use other numbers: the process is
killed for it (x32 numbers get ``EPERM``).
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct
from functools import lru_cache

from teamrl.sandbox import linux

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
_NR, _ARCH, _ARG0 = 0, 4, 16
# Classic BPF opcodes.
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
RET_KILL_PROCESS, RET_ALLOW, RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_GET_SECCOMP = 22, 2, 21
X32_SYSCALL_BIT = 0x40000000
AF_UNIX = 1
# Which sockets a program may open: none, unix ones only, or any (the run allows the network).
SOCKET_POLICIES = ("none", "unix", "all")
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET.
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x70000000

# machine -> (AUDIT_ARCH_*, whether it has an x32 ABI to refuse).
ARCHES = {"x86_64": (0xC000003E, True), "aarch64": (0xC00000B7, False)}
# name -> (x86_64 number, aarch64 number); then the calls numbered alike everywhere (>= 424).
_SYSCALLS = {
    "socket": (41, 198),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "shmget": (29, 194),
    "shmat": (30, 196),
    "shmctl": (31, 195),
    "shmdt": (67, 197),
    "semget": (64, 190),
    "semop": (65, 193),
    "semctl": (66, 191),
    "semtimedop": (220, 192),
    "msgget": (68, 186),
    "msgsnd": (69, 189),
    "msgrcv": (70, 188),
    "msgctl": (71, 187),
    "clone": (56, 220),
}
_SHARED = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "pidfd_getfd": 438,
    "mount_setattr": 442,
}
DENIED = tuple(n for n in (*_SYSCALLS, *_SHARED) if n not in ("socket", "clone", "clone3"))


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def machine() -> str:
    return platform.machine()


def syscall_number(name: str, arch: str) -> int:
    if name in _SHARED:
        return _SHARED[name]
    return _SYSCALLS[name][list(ARCHES).index(arch)]


def require(mode: str = "landlock") -> str:
    """This machine's architecture, or RuntimeError (one line) when the filter cannot be
    installed here (an architecture without a table, or a kernel without seccomp)."""
    arch = machine()
    if arch not in ARCHES:
        raise RuntimeError(
            f"sandbox: isolation {mode!r} has no seccomp filter for machine {arch!r} "
            f"(known: {', '.join(ARCHES)})"
        )
    if linux.libc().prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
        raise RuntimeError(f"sandbox: isolation {mode!r} needs seccomp (CONFIG_SECCOMP)")
    return arch


def socket_policy(mode: str, network: bool) -> str:
    """What ``socket(2)`` may open in ``mode``: any family when the run allows the network;
    else none in "landlock" (which has no rule for unix sockets), unix sockets elsewhere
    (fenced by a network namespace, or in the weak modes the family their socket guard
    allows)."""
    if network:
        return "all"
    return "none" if mode == "landlock" else "unix"


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _deny(number: int, action: int) -> bytes:
    """If the call is ``number``, return ``action`` (else fall through to the next pair)."""
    return _insn(_JEQ, number, 0, 1) + _insn(_RET, action)


@lru_cache(maxsize=8)
def program(arch: str, sockets: str) -> bytes:
    """The filter's instructions (``struct sock_filter[]``) for ``arch``; ``sockets``: which
    ``socket(2)`` calls pass (one of ``SOCKET_POLICIES``, see ``socket_policy``)."""
    if sockets not in SOCKET_POLICIES:
        raise ValueError(f"sockets: expected one of {SOCKET_POLICIES}, got {sockets!r}")
    audit_arch, has_x32 = ARCHES[arch]
    eperm, enosys = RET_ERRNO | errno.EPERM, RET_ERRNO | errno.ENOSYS
    code = _insn(_LD_W_ABS, _ARCH) + _insn(_JEQ, audit_arch, 1, 0) + _insn(_RET, RET_KILL_PROCESS)
    code += _insn(_LD_W_ABS, _NR)
    if has_x32:
        code += _insn(_JGE, X32_SYSCALL_BIT, 0, 1) + _insn(_RET, eperm)
    if sockets == "unix":
        # socket(AF_UNIX, ...) returns ALLOW, any other family EPERM: both branches return,
        # so loading the family (the low 32 bits of the first argument) into the
        # accumulator does not disturb the checks below, which only other calls reach.
        code += _insn(_JEQ, syscall_number("socket", arch), 0, 4)
        code += _insn(_LD_W_ABS, _ARG0) + _insn(_JEQ, AF_UNIX, 0, 1)
        code += _insn(_RET, RET_ALLOW) + _insn(_RET, eperm)
    names = ("socket", *DENIED) if sockets == "none" else DENIED
    for name in names:
        code += _deny(syscall_number(name, arch), eperm)
    code += _deny(syscall_number("clone3", arch), enosys)
    # Last, as it replaces the number in the accumulator: clone is allowed unless its flags
    # (the low 32 bits of the first argument) ask for a new namespace.
    code += _insn(_JEQ, syscall_number("clone", arch), 0, 3)
    code += _insn(_LD_W_ABS, _ARG0) + _insn(_JSET, CLONE_NEW_FLAGS, 0, 1) + _insn(_RET, eperm)
    return code + _insn(_RET, RET_ALLOW)


class Filter:
    """A filter built in the parent; ``install`` is what the forked child calls."""

    def __init__(self, sockets: str, mode: str = "landlock") -> None:
        code = program(require(mode), sockets)
        self.code = code
        self._buffer = ctypes.create_string_buffer(code, len(code))
        self._fprog = _SockFprog(len(code) // 8, ctypes.addressof(self._buffer))

    def install(self) -> None:
        """Filter the calling thread and everything it starts. Needs ``no_new_privs``."""
        args = (ctypes.c_ulong(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER))
        done = linux.libc().prctl(*args, ctypes.byref(self._fprog), ctypes.c_ulong(0), 0)
        linux.check(done, "seccomp filter")
