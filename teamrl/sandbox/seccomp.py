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
  sockets...) are kernel surface a program has no use for. io_uring, which could open and
  connect sockets past the filter, is refused outright.
* ``socketpair(2)`` but for ``AF_UNIX`` (TIPC can make pairs too), and in "landlock" but for
  ``SOCK_STREAM``: a connected stream pair reaches nothing outside (``sendto`` with an
  address is refused on it), while a datagram pair can ``sendto`` any socket file or
  abstract name, which "landlock" has no other rule against.
* memory no process's RSS counts: ``memfd_create`` and ``memfd_secret`` (a memfd is a file
  of the kernel's internal tmpfs, bounded only per file by ``file_size_mb``), and raising a
  socket's buffers (``setsockopt`` of ``SO_SNDBUF``, ``SO_RCVBUF`` and their ``FORCE``
  forms): at the system default (``net.core.wmem_default``) each socket holds a few hundred
  KiB, raised one holds up to ``2 * net.core.wmem_max``.
* reaching into other processes: ``ptrace``, ``process_vm_readv``/``writev``,
  ``pidfd_getfd``;
* new namespaces and mounts: ``unshare``, ``setns``, ``clone`` with a ``CLONE_NEW*`` flag,
  the mount calls (Landlock forbids them too); and a thread with a descriptor table of its
  own (``clone`` with ``CLONE_THREAD`` but not ``CLONE_FILES``), which ``/proc/<pid>/fd``
  would not show;
* kernel surfaces a program has no use for: ``bpf``, ``perf_event_open``, ``userfaultfd``,
  the keyrings, System V IPC and POSIX message queues (their objects would outlive the run
  where there is no IPC namespace, and hold memory outside it).

Where no tmpfs bounds the working directory ("landlock", "setuid", "rlimits"), the disk
watcher (``teamrl.sandbox.disk``) measures it, and the filter refuses what would hide disk
from it or outrun it: ``fallocate`` (``EOPNOTSUPP``, on which ``posix_fallocate`` writes
instead: with ``FALLOC_FL_KEEP_SIZE`` it reserved space past ``file_size_mb``, and any mode
reserves gigabytes between two looks), ``sendmsg``/``sendmmsg`` (a descriptor in flight in
a unix socket, ``SCM_RIGHTS``, is in no process's ``/proc/<pid>/fd``; ``send`` and ``sendto``
stay, but multiprocessing's "forkserver", which passes descriptors so, cannot start), and
``prctl(PR_SET_DUMPABLE)`` (the watcher cannot read a non-dumpable process's descriptors).
A judging harness (``harness=True``: ``run_python(..., report=True)``) may make itself
non-dumpable; ``TRUSTED_PRELUDE`` makes each child it forks dumpable and locks it so
(``teamrl.sandbox.channel``).

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
_LD_W_ABS, _AND_K, _JEQ, _JGE, _JSET, _RET = 0x20, 0x54, 0x15, 0x35, 0x45, 0x06
RET_KILL_PROCESS, RET_ALLOW, RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_GET_SECCOMP = 22, 2, 21
X32_SYSCALL_BIT = 0x40000000
AF_UNIX, SOCK_STREAM, SOCK_TYPE_MASK = 1, 1, 0xF
# setsockopt(SOL_SOCKET, ...) of the buffer sizes: SO_SNDBUF, SO_RCVBUF and their FORCE forms.
SOL_SOCKET, BUFFER_OPTIONS = 1, (7, 8, 32, 33)
PR_SET_DUMPABLE = 4
# Which sockets a program may open: none, unix ones only, or any (the run allows the network).
SOCKET_POLICIES = ("none", "unix", "all")
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET.
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x70000000
CLONE_THREAD, CLONE_FILES = 0x00010000, 0x00000400

# machine -> (AUDIT_ARCH_*, whether it has an x32 ABI to refuse).
ARCHES = {"x86_64": (0xC000003E, True), "aarch64": (0xC00000B7, False)}
# name -> (x86_64 number, aarch64 number); then the calls numbered alike everywhere (>= 424).
_SYSCALLS = {
    "socket": (41, 198),
    "socketpair": (53, 199),
    "setsockopt": (54, 208),
    "sendmsg": (46, 211),
    "sendmmsg": (307, 269),
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
    "mq_open": (240, 180),
    "mq_unlink": (241, 181),
    "mq_timedsend": (242, 182),
    "mq_timedreceive": (243, 183),
    "mq_notify": (244, 184),
    "mq_getsetattr": (245, 185),
    "memfd_create": (319, 279),
    "fallocate": (285, 47),
    "prctl": (157, 167),
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
    "memfd_secret": 447,
}
# Decided by their arguments or by the mode, below; every other call in the tables is refused.
_DECIDED = ("socket", "socketpair", "setsockopt", "sendmsg", "sendmmsg", "fallocate", "prctl")
DENIED = tuple(n for n in (*_SYSCALLS, *_SHARED) if n not in (*_DECIDED, "clone", "clone3"))
# Refused where the disk watcher keeps the bound (see the module docstring).
WATCHED_DENIED = ("sendmsg", "sendmmsg")


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


def _arg(index: int) -> int:
    """Where the low 32 bits of argument ``index`` are (both architectures: little-endian)."""
    return _ARG0 + 8 * index


class _Code:
    """Instructions whose jumps may name one of the returns that end the program.

    Every jump of classic BPF goes forward, by at most 255 instructions, so the filter is
    laid out as: the architecture check, one block per call decided by its arguments
    (entered when the number matches, each ending in a return, since it replaces the number
    in the accumulator), the calls refused outright, then the returns.
    """

    RETURNS = {
        "allow": RET_ALLOW,
        "eperm": RET_ERRNO | errno.EPERM,
        "enosys": RET_ERRNO | errno.ENOSYS,
        "eopnotsupp": RET_ERRNO | errno.EOPNOTSUPP,
        "kill": RET_KILL_PROCESS,
    }

    def __init__(self) -> None:
        self.insns: list[tuple[int, int, int | str, int | str]] = []

    def add(self, code: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self.insns.append((code, k, jt, jf))

    def when_call(self, number: int, block: list[tuple]) -> None:
        """Run ``block`` (which must end in a return) for call ``number``; skip it otherwise."""
        self.add(_JEQ, number, 0, len(block))
        for insn in block:
            self.add(*insn)

    def assemble(self) -> bytes:
        at = {name: len(self.insns) + i for i, name in enumerate(self.RETURNS)}
        out = b""
        for i, (code, k, *jumps) in enumerate(self.insns):
            jt, jf = (at[j] - i - 1 if isinstance(j, str) else j for j in jumps)
            if not (0 <= jt <= 255 and 0 <= jf <= 255):
                raise AssertionError(f"seccomp: jump out of range at instruction {i}")
            out += _insn(code, k, jt, jf)
        return out + b"".join(_insn(_RET, action) for action in self.RETURNS.values())


@lru_cache(maxsize=16)
def program(arch: str, sockets: str, watched: bool = False, harness: bool = False) -> bytes:
    """The filter's instructions (``struct sock_filter[]``) for ``arch``; ``sockets``: which
    ``socket(2)`` calls pass (one of ``SOCKET_POLICIES``, see ``socket_policy``);
    ``watched``: the run's disk is kept by the watcher, so fallocate, sendmsg, sendmmsg and
    (unless ``harness``: a judging harness may make itself non-dumpable) PR_SET_DUMPABLE are
    refused too."""
    if sockets not in SOCKET_POLICIES:
        raise ValueError(f"sockets: expected one of {SOCKET_POLICIES}, got {sockets!r}")
    audit_arch, has_x32 = ARCHES[arch]

    def number(name: str) -> int:
        return syscall_number(name, arch)

    code = _Code()
    code.add(_LD_W_ABS, _ARCH)
    code.add(_JEQ, audit_arch, 0, "kill")
    code.add(_LD_W_ABS, _NR)
    if has_x32:
        code.add(_JGE, X32_SYSCALL_BIT, "eperm", 0)
    if sockets == "unix":  # socket(AF_UNIX, ...) only (the family: the first argument)
        code.when_call(number("socket"), [(_LD_W_ABS, _arg(0)), (_JEQ, AF_UNIX, "allow", "eperm")])
    pair = [(_LD_W_ABS, _arg(0)), (_JEQ, AF_UNIX, 0, "eperm")]
    if sockets == "none":  # a connected stream pair only (its type less SOCK_NONBLOCK etc.)
        pair += [(_LD_W_ABS, _arg(1)), (_AND_K, SOCK_TYPE_MASK)]
        pair += [(_JEQ, SOCK_STREAM, "allow", "eperm")]
    else:
        pair += [(_RET, RET_ALLOW)]
    code.when_call(number("socketpair"), pair)
    buffers = [(_LD_W_ABS, _arg(1)), (_JEQ, SOL_SOCKET, 0, "allow"), (_LD_W_ABS, _arg(2))]
    buffers += [(_JEQ, option, "eperm", 0) for option in BUFFER_OPTIONS]
    code.when_call(number("setsockopt"), [*buffers, (_RET, RET_ALLOW)])
    if watched and not harness:
        dumpable = [(_LD_W_ABS, _arg(0)), (_JEQ, PR_SET_DUMPABLE, "eperm", "allow")]
        code.when_call(number("prctl"), dumpable)
    # clone: no new namespace, and a thread shares its process's descriptor table.
    threads = [(_LD_W_ABS, _arg(0)), (_JSET, CLONE_NEW_FLAGS, "eperm", 0)]
    threads += [(_JSET, CLONE_THREAD, 0, "allow"), (_JSET, CLONE_FILES, "allow", "eperm")]
    code.when_call(number("clone"), threads)
    refused = ["socket"] if sockets == "none" else []
    refused += [*DENIED, *(WATCHED_DENIED if watched else ())]
    for name in refused:
        code.add(_JEQ, number(name), "eperm", 0)
    if watched:
        code.add(_JEQ, number("fallocate"), "eopnotsupp", 0)
    code.add(_JEQ, number("clone3"), "enosys", 0)
    return code.assemble()  # anything else falls through to the first return: allow


class Filter:
    """A filter built in the parent; ``install`` is what the forked child calls."""

    def __init__(
        self, sockets: str, mode: str = "landlock", watched: bool = False, harness: bool = False
    ) -> None:
        code = program(require(mode), sockets, watched, harness)
        self.code = code
        self._buffer = ctypes.create_string_buffer(code, len(code))
        self._fprog = _SockFprog(len(code) // 8, ctypes.addressof(self._buffer))

    def install(self) -> None:
        """Filter the calling thread and everything it starts. Needs ``no_new_privs``."""
        args = (ctypes.c_ulong(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER))
        done = linux.libc().prctl(*args, ctypes.byref(self._fprog), ctypes.c_ulong(0), 0)
        linux.check(done, "seccomp filter")
