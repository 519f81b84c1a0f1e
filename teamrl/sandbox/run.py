"""Run untrusted, model-written Python programs under limits.

Every program runs in its own interpreter (``python -I -S``: standard library only, no
``PYTHON*`` variables, no user site), in a fresh temporary directory that is deleted
afterwards, with a scrubbed environment (``PATH``, ``LANG``, and ``HOME`` = ``TMPDIR`` = the
working directory), in a new session, under rlimits (CPU, address space, file size,
processes, open files, no core dumps) and a wall clock, with stdout and stderr read as they
come and capped (the program is killed past the cap). When the program ends or is stopped,
everything it started is SIGKILLed.

How strongly it is fenced off depends on what the machine allows; ``isolation_mode()`` says
which of these ``run_python`` gets by default:

``"namespaces"`` (the parent is root with CAP_SYS_ADMIN, our normal case)
    * Fresh network, IPC, mount and pid namespaces. No network: the namespace has only a
      downed loopback, so every connect fails. In the mount namespace every mount is
      remounted read-only and nosuid; the working directory is a private tmpfs of
      ``file_size_mb`` MiB, the only writable place, which vanishes with the namespace.
      The program runs under a tiny init (pid 1 of its namespace): when the program exits,
      init exits and the kernel kills and reaps every process left in the namespace, so
      double-forked daemons cannot survive and leave no zombies.
    * A fresh unprivileged uid/gid, unique among concurrent runs, with no supplementary
      groups and ``no_new_privs``: RLIMIT_NPROC is enforced (it is not for root), the program
      can signal only its own processes (not the caller, not other sandboxes) and cannot read
      the caller's ``/proc/<pid>/environ``.
    * When the interpreter lives under a directory other users cannot enter (``/root``), an
      empty tmpfs is mounted over that directory inside the namespace and the interpreter's
      prefix alone is bound back (read-only), which also hides the rest of that directory.

``"setuid"`` (root without namespaces, e.g. a container without CAP_SYS_ADMIN)
    Fresh uid/gid, rlimits and the socket guard below; after the run every process of the
    uid is killed. Residual risk: the program may write to world-writable places (``/tmp``,
    ``/dev/shm``; bounded per file by ``file_size_mb``), can get past the socket guard, and
    killed orphans are left for the system's init to reap. Its working directory is on the
    caller's disk, not a tmpfs: only each file is bounded, so it can write for as long as
    the wall clock allows (the directory is deleted afterwards). The interpreter must be
    reachable by other users (not under ``/root``).

``"rlimits"`` (the parent is not root)
    Rlimits, own session and the socket guard, as the caller's uid. Residual risk: the
    program can signal (or ptrace) the caller's processes (same uid), read and write
    wherever the caller can (its ``/proc/<pid>/environ`` and unix sockets included),
    escape the process-group kill with ``setsid``, and RLIMIT_NPROC counts every process of
    the uid. Its working directory is on disk, as in "setuid". Refused as root, where a
    fork bomb would be unbounded.

The socket guard (used without a network namespace, when ``network=False``) replaces
``socket.socket`` and ``_socket.socket`` before the program starts with a class that refuses
every family but AF_UNIX. It stops ordinary library calls, not a determined program:
``ctypes`` syscalls or a spawned ``curl`` get past it. Only the network namespace is a fence.

Common residual risks: memory is capped per process (RLIMIT_AS), so a program may hold up to
``max_processes * memory_mb`` MiB (plus its tmpfs); the CPU rlimit is per process too (the
wall clock bounds the sum); the program can read world-readable files and see host processes
in ``/proc``. If the calling process dies, a parent-death signal kills the program (with
namespaces, the whole namespace); its temporary directory is then left behind.
"""

from __future__ import annotations

import ctypes
import os
import resource
import secrets
import select
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

ISOLATION_MODES = ("namespaces", "setuid", "rlimits")


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed program."""

    cpu_seconds: int = field(
        default=5,
        metadata={"help": "CPU seconds per process (RLIMIT_CPU: SIGXCPU, SIGKILL 1 s later)."},
    )
    wall_seconds: float = field(
        default=10.0,
        metadata={"help": "Wall-clock seconds from launch; then everything is killed."},
    )
    memory_mb: int = field(
        default=512, metadata={"help": "Address space per process in MiB (RLIMIT_AS)."}
    )
    file_size_mb: int = field(
        default=16,
        metadata={
            "help": "Largest file the program may write, MiB (RLIMIT_FSIZE); with namespaces "
            "also the size of its private tmpfs working directory."
        },
    )
    max_processes: int = field(
        default=16,
        metadata={"help": "Processes and threads the program may have (RLIMIT_NPROC)."},
    )
    output_bytes: int = field(
        default=65536,
        metadata={"help": "Bytes kept per stream (stdout, stderr); more kills the program."},
    )
    open_files: int = field(
        default=256, metadata={"help": "Open file descriptors per process (RLIMIT_NOFILE)."}
    )
    network: bool = field(
        default=False,
        metadata={"help": "Allow network access (False: network namespace or socket guard)."},
    )

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "memory_mb", "file_size_mb", "max_processes", "open_files"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Limits.{name}: expected an integer >= 1, got {value!r}")
        if not isinstance(self.wall_seconds, int | float) or not self.wall_seconds > 0:
            raise ValueError(f"Limits.wall_seconds: expected > 0, got {self.wall_seconds!r}")
        if not isinstance(self.output_bytes, int) or self.output_bytes < 0:
            raise ValueError(
                f"Limits.output_bytes: expected an integer >= 0, got {self.output_bytes!r}"
            )


@dataclass
class ExecResult:
    """What a sandboxed program did.

    ``killed`` names the limit that stopped it: ``"wall_time"``, ``"cpu_time"``,
    ``"output_limit"``, ``"memory"`` (it died of MemoryError), ``"file_size"`` (it died of a
    write failing with EFBIG or ENOSPC) or ``"signal N"`` (it died of signal N); ``timed_out``
    is true for the two time limits. ``stdout``/``stderr`` are decoded as UTF-8 (invalid
    bytes replaced), at most ``Limits.output_bytes`` bytes each.
    """

    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    killed: str | None
    wall_seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.killed is None


# --------------------------------------------------------------------------------------
# Linux plumbing (ctypes handles resolved in the parent; the forked child only calls them)
# --------------------------------------------------------------------------------------

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x8000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
# The new mount API has the same syscall numbers on every architecture (>= 424 are shared).
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE, O_CLOEXEC, AT_RECURSIVE, AT_FDCWD = 0x1, 0o2000000, 0x8000, -100
MOVE_MOUNT_F_EMPTY_PATH, MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x4, 0x1, 0x2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38

# Fresh uids come from this range: above any real account, below 2**31.
UID_BASE, UID_SPAN = 1_800_000_000, 1 << 28


class _MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("attr_set", "attr_clr", "propagation", "userns")]


_libc_handle: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        _libc_handle = libc
    return _libc_handle


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _blocked_ancestor(path: str) -> str | None:
    """The topmost directory on ``path`` that other users may not enter (no o+x), if any."""
    current = "/"
    for part in path.strip("/").split("/"):
        current = os.path.join(current, part)
        if not os.stat(current).st_mode & stat.S_IXOTH:
            return current
    return None


def _interpreter(python: str | None) -> tuple[str, str]:
    """(real executable, its prefix): the prefix must be visible to the sandbox user."""
    exe = os.path.realpath(python or sys.executable)
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        raise ValueError(f"python: not an executable file: {python!r}")
    return exe, os.path.dirname(os.path.dirname(exe))


# --------------------------------------------------------------------------------------
# Fresh uids
# --------------------------------------------------------------------------------------

_uid_lock = threading.Lock()
_uids_in_use: set[int] = set()


def _lease_uid() -> int:
    # Random over 2**28 ids, so two processes running sandboxes at once collide with
    # negligible probability; within this process the set makes leases unique.
    with _uid_lock:
        while (uid := UID_BASE + secrets.randbelow(UID_SPAN)) in _uids_in_use:
            pass
        _uids_in_use.add(uid)
        return uid


def _release_uid(uid: int) -> None:
    with _uid_lock:
        _uids_in_use.discard(uid)


def _kill_uid(uid: int) -> None:
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
# What the sandboxed interpreter runs: python -I -S boot.py <status fd> main.py args...
# --------------------------------------------------------------------------------------

# Pid-namespace mode. We are the process the caller started, outside the new pid namespace;
# our first child is pid 1 of it (its init), and init forks the program. When the program
# ends, init reports its wait status on <status fd> and exits, and the kernel then kills and
# reaps everything left in the namespace. If we die (the caller died), init exits too.
_BOOT_PIDNS = """\
_status = int(sys.argv[1])
_me = os.pidfd_open(os.getpid())
if os.fork():
    os.close(_status)
    os.wait()
    os._exit(0)
_program = os.fork()
if _program:
    import select
    select.select([_me, os.pidfd_open(_program)], [], [])
    _pid, _st = os.waitpid(_program, os.WNOHANG)
    if _pid == _program:
        os.write(_status, b"%d" % _st)
    os._exit(0)
os.close(_status)
os.close(_me)
"""

# Without a network namespace: refuse every socket family but AF_UNIX. socket.socket's
# __init__ looks up `_socket.socket.__init__` when called, so guarding the C class guards
# both; the guard initialises through the captured original (calling socket.socket from
# here would come back to the guard forever).
_BOOT_GUARD = """\
import _socket, socket
_CSocket = _socket.socket
class _NoNetwork(_CSocket):
    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        if family != socket.AF_UNIX:
            raise PermissionError(1, "network access is disabled in the sandbox")
        _CSocket.__init__(self, family, type, proto, fileno)
_socket.socket = _socket.SocketType = _NoNetwork
"""

# Run main.py as __main__ in a fresh module, with tracebacks that read as if it had been
# run directly (the hook drops this bootstrap's own frame). -S skips `site`, which is what
# defines exit() and quit(); model-written code uses them, so they are put back.
_BOOT_RUN = """\
import builtins
builtins.exit = builtins.quit = sys.exit
sys.argv = sys.argv[2:]
def _hook(kind, value, tb, _default=sys.excepthook, _boot_file=__file__):
    if tb is not None and tb.tb_frame.f_code.co_filename == _boot_file:
        tb = tb.tb_next
    _default(kind, value.with_traceback(tb), tb)
sys.excepthook = _hook
_boot, _main = sys.modules["__main__"], type(sys)("__main__")
_main.__file__ = sys.argv[0]
sys.modules["__main__"] = _main
with open(sys.argv[0], "rb") as _f:
    _code = compile(_f.read(), sys.argv[0], "exec", dont_inherit=True)
exec(_code, _main.__dict__)
"""


def _boot_code(mode: str, network: bool) -> str:
    parts = ["import os, sys\n"]
    if mode == "namespaces":
        parts.append(_BOOT_PIDNS)
    elif not network:
        parts.append(_BOOT_GUARD)
    parts.append(_BOOT_RUN)
    return "".join(parts)


# --------------------------------------------------------------------------------------
# The child's setup (runs between fork and exec, as root until it drops privileges)
# --------------------------------------------------------------------------------------


@dataclass
class _Plan:
    mode: str
    prefix: str
    workdir: str
    uid: int | None
    limits: Limits
    error_fd: int


def _set_rlimits(limits: Limits, extra_processes: int) -> None:
    mib = 1 << 20
    cpu = limits.cpu_seconds
    rlimits = [
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_FSIZE, (limits.file_size_mb * mib,) * 2),
        (resource.RLIMIT_NOFILE, (limits.open_files,) * 2),
        (resource.RLIMIT_NPROC, (limits.max_processes + extra_processes,) * 2),
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        # Last: once the address space is capped, the forked copy of a big parent may not
        # allocate any more before it execs.
        (resource.RLIMIT_AS, (limits.memory_mb * mib,) * 2),
    ]
    for which, value in rlimits:
        resource.setrlimit(which, value)


def _make_preexec(plan: _Plan) -> Callable[[], None]:
    libc = _libc()
    blocked = _blocked_ancestor(plan.prefix) if plan.mode == "namespaces" else None
    prefix, work = plan.prefix.encode(), plan.workdir.encode()
    tmpfs_opts = f"size={plan.limits.file_size_mb}m,mode=0700,uid={plan.uid},gid={plan.uid}"
    net = 0 if plan.limits.network else CLONE_NEWNET
    ns_flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID | net
    ulong = ctypes.c_ulong

    def syscall(number: int, *args) -> int:
        return libc.syscall(ctypes.c_long(number), *args)

    def isolate() -> None:
        _check(libc.unshare(ctypes.c_int(ns_flags)), "unshare")
        _check(libc.mount(None, b"/", None, ulong(MS_REC | MS_PRIVATE), None), "make / private")
        if blocked is not None:  # clone the prefix, cover `blocked` with a tmpfs, put it back
            what = f"expose {plan.prefix} over a tmpfs on {blocked}"
            tree = syscall(
                SYS_OPEN_TREE,
                ctypes.c_int(AT_FDCWD),
                prefix,
                ctypes.c_uint(OPEN_TREE_CLONE | O_CLOEXEC | AT_RECURSIVE),
            )
            _check(tree, what)
            opts = b"mode=0755,size=1m"
            flags = ulong(MS_NOSUID | MS_NODEV)
            _check(libc.mount(b"tmpfs", blocked.encode(), b"tmpfs", flags, opts), what)
            os.makedirs(plan.prefix, exist_ok=True)
            moved = syscall(
                SYS_MOVE_MOUNT,
                ctypes.c_int(tree),
                b"",
                ctypes.c_int(AT_FDCWD),
                prefix,
                ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH),
            )
            _check(moved, what)
            os.close(tree)
        attr = _MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
        size = ctypes.c_size_t(ctypes.sizeof(attr))
        flags = ctypes.c_uint(AT_RECURSIVE)
        done = syscall(
            SYS_MOUNT_SETATTR, ctypes.c_int(AT_FDCWD), b"/", flags, ctypes.byref(attr), size
        )
        _check(done, "remount / read-only")
        flags = ulong(MS_NOSUID | MS_NODEV)
        _check(libc.mount(b"tmpfs", work, b"tmpfs", flags, tmpfs_opts.encode()), "tmpfs cwd")

    def preexec() -> None:
        step = "start"
        try:
            if plan.mode == "namespaces":
                step = "namespaces"
                isolate()
            step = "chdir"
            os.chdir(plan.workdir)  # after the mounts: the cwd must be the new tmpfs
            if plan.uid is not None:
                step = "drop privileges"
                os.setgroups([])
                os.setresgid(plan.uid, plan.uid, plan.uid)
                os.setresuid(plan.uid, plan.uid, plan.uid)
            step = "prctl"
            # After the uid change, which clears the parent-death signal.
            _check(
                libc.prctl(ulong(PR_SET_PDEATHSIG), ulong(signal.SIGKILL), *[ulong(0)] * 3), step
            )
            _check(libc.prctl(ulong(PR_SET_NO_NEW_PRIVS), ulong(1), *[ulong(0)] * 3), step)
            step = "setrlimit"
            _set_rlimits(plan.limits, extra_processes=2 if plan.mode == "namespaces" else 0)
        except BaseException as exc:
            os.write(plan.error_fd, f"{step}: {exc!r}".encode(errors="replace")[:4000])
            raise

    return preexec


# --------------------------------------------------------------------------------------
# Launch, pump, classify
# --------------------------------------------------------------------------------------


def _kill_tree(proc: subprocess.Popen, mode: str, uid: int | None) -> None:
    """SIGKILL the process group (with namespaces that includes init, which takes the whole
    pid namespace with it); in "setuid" mode also every process of the uid. Called before the
    leader is reaped, so its pid (= the group id) cannot have been reused."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if mode == "setuid":
        _kill_uid(uid)


def _pump(
    proc: subprocess.Popen, limits: Limits, deadline: float, kill: Callable[[], None]
) -> tuple[bytes, bytes, str | None, float]:
    """Read stdout/stderr until the program ends or hits a limit; kill and reap it.

    Returns (stdout, stderr, the limit we enforced or None, CPU seconds of the reaped tree).
    """
    cap = limits.output_bytes
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    sel = selectors.DefaultSelector()
    pidfd = os.pidfd_open(proc.pid)
    reason, killed = None, False
    try:
        for fd in (out_fd, err_fd, pidfd):
            sel.register(fd, selectors.EVENT_READ)
        # Until the leader has exited and both pipes are closed (the selector is empty then).
        while reason is None and sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                reason = "wall_time"
                break
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
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), reason, usage.ru_utime + usage.ru_stime


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


def _program_status(status_fd: int) -> int | None:
    """The program's wait status as init reported it (None if init was killed first)."""
    ready, _, _ = select.select([status_fd], [], [], 1.0)
    data = os.read(status_fd, 32) if ready else b""
    return int(data) if data else None


def _classify(
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
        if "[Errno 27] File too large" in last or "[Errno 28] No space left" in last:
            return "file_size"
    return None


def _stdin_fd(base: str, stdin: str) -> int:
    """A read-only, already unlinked file holding ``stdin`` (unlike a pipe, a file cannot
    deadlock a program that writes a lot before it reads)."""
    if not stdin:
        return subprocess.DEVNULL
    path = os.path.join(base, "stdin")
    with open(path, "w", encoding="utf-8") as f:
        f.write(stdin)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    os.unlink(path)
    return fd


def _remove_tree(path: str) -> None:
    try:
        shutil.rmtree(path)
    except PermissionError:  # "rlimits" mode: the program may have made its dirs read-only
        for root, dirs, _ in os.walk(path):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o700)
        shutil.rmtree(path)


def _check_reachable(mode: str, prefix: str) -> None:
    tmp_root = os.path.realpath(tempfile.gettempdir())
    if mode != "rlimits" and (blocked := _blocked_ancestor(tmp_root)):
        raise RuntimeError(
            f"sandbox: temp dir {tmp_root!r} is not reachable by other users ({blocked!r} "
            "lacks o+x); point TMPDIR at a world-traversable directory"
        )
    if mode == "setuid" and (blocked := _blocked_ancestor(prefix)):
        raise RuntimeError(
            f"sandbox: isolation 'setuid' needs an interpreter other users can reach, but "
            f"{prefix!r} lies under {blocked!r}"
        )


def _execute(
    code: str, stdin: str, limits: Limits, args: Sequence[str], mode: str, python: str | None
) -> ExecResult:
    exe, prefix = _interpreter(python)
    _check_reachable(mode, prefix)
    base = tempfile.mkdtemp(prefix="teamrl-sandbox-")
    uid = _lease_uid() if mode != "rlimits" else None
    err_r, err_w = os.pipe()  # the child's setup reports a failure here
    status_r, status_w = os.pipe() if mode == "namespaces" else (-1, -1)
    try:
        os.chmod(base, 0o755)  # the sandbox user must reach base/main.py and base/work
        program = os.path.join(base, "main.py")
        with open(program, "w", encoding="utf-8") as f:
            f.write(code)
        workdir = os.path.join(base, "work")
        os.mkdir(workdir, 0o700)
        if mode == "setuid":
            os.chown(workdir, uid, uid)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        env.update(HOME=workdir, TMPDIR=workdir)
        boot = os.path.join(base, "boot.py")
        with open(boot, "w", encoding="utf-8") as f:
            f.write(_boot_code(mode, limits.network))
        argv = [exe, "-I", "-S", boot, str(status_w), program, *map(str, args)]
        preexec = _make_preexec(_Plan(mode, prefix, workdir, uid, limits, err_w))
        stdin_fd = _stdin_fd(base, stdin)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=stdin_fd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
                pass_fds=(status_w,) if status_w >= 0 else (),
                preexec_fn=preexec,
            )
        except subprocess.SubprocessError as exc:
            detail = _read_error(err_r, err_w) or repr(exc)
            err_w = -1
            raise RuntimeError(f"sandbox: could not start the program ({mode}): {detail}") from exc
        finally:
            if stdin_fd != subprocess.DEVNULL:
                os.close(stdin_fd)
            if status_w >= 0:
                os.close(status_w)
                status_w = -1
        with proc:
            deadline = start + limits.wall_seconds
            out, err, reason, cpu = _pump(
                proc, limits, deadline, lambda: _kill_tree(proc, mode, uid)
            )
        wall = time.monotonic() - start
        returncode = proc.returncode
        if status_r >= 0 and (status := _program_status(status_r)) is not None:
            returncode = os.waitstatus_to_exitcode(status)
    finally:
        for fd in (err_r, err_w, status_r, status_w):
            if fd >= 0:
                os.close(fd)
        if uid is not None:
            _release_uid(uid)
        _remove_tree(base)
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    killed = _classify(reason, returncode, cpu, limits, stderr)
    return ExecResult(
        stdout=stdout,
        stderr=stderr,
        returncode=returncode,
        timed_out=killed in ("wall_time", "cpu_time"),
        killed=killed,
        wall_seconds=wall,
    )


def _read_error(err_r: int, err_w: int) -> str:
    os.close(err_w)
    return os.read(err_r, 4096).decode(errors="replace")


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------

_mode_lock = threading.Lock()
_modes: dict[str, str] = {}


def isolation_mode(python: str | None = None) -> str:
    """The strongest isolation that works here for ``python`` (probed once, then cached).

    As root: ``"namespaces"`` if a trivial program runs under it, else ``"setuid"`` if that
    works, else RuntimeError (with both causes: root without a uid change would leave fork
    bombs unbounded). As another user: ``"rlimits"``.
    """
    exe, _ = _interpreter(python)
    with _mode_lock:
        if exe in _modes:
            return _modes[exe]
        if os.geteuid() != 0:
            _modes[exe] = "rlimits"
            return "rlimits"
        failures = []
        for mode in ("namespaces", "setuid"):
            try:
                probe = _execute("print('ok')", "", Limits(wall_seconds=20), (), mode, exe)
            except (RuntimeError, OSError) as exc:
                failures.append(f"{mode}: {exc}")
                continue
            if probe.ok and probe.stdout == "ok\n":
                _modes[exe] = mode
                return mode
            failures.append(f"{mode}: the probe program gave {probe}")
        raise RuntimeError("sandbox: no isolation mode works as root; " + "; ".join(failures))


def _resolve_mode(isolation: str, python: str | None) -> str:
    if isolation == "auto":
        return isolation_mode(python)
    if isolation not in ISOLATION_MODES:
        raise ValueError(
            f"isolation: expected 'auto' or one of {ISOLATION_MODES}, got {isolation!r}"
        )
    root = os.geteuid() == 0
    if isolation == "rlimits" and root:
        raise ValueError(
            "isolation: 'rlimits' is refused as root (RLIMIT_NPROC is not enforced for root, "
            "so a fork bomb would be unbounded); use 'namespaces' or 'setuid'"
        )
    if isolation != "rlimits" and not root:
        raise ValueError(f"isolation: {isolation!r} needs root, running as uid {os.geteuid()}")
    return isolation


def run_python(
    code: str,
    *,
    stdin: str = "",
    limits: Limits | None = None,
    args: Sequence[str] = (),
    isolation: str = "auto",
    python: str | None = None,
) -> ExecResult:
    """Run ``code`` as ``main.py`` in a fresh sandbox (see the module docstring).

    ``stdin`` is the program's standard input and ``args`` its ``sys.argv[1:]``.
    ``isolation`` is ``"auto"`` (the strongest that works, see ``isolation_mode``) or a mode
    by name; ``python`` picks another interpreter (run with ``-I -S``: stdlib only).
    Anything the program does, crashing or hitting a limit included, is reported in the
    ExecResult; RuntimeError means the sandbox itself failed.
    """
    if not isinstance(code, str):
        raise TypeError(f"code: expected str, got {type(code).__name__}")
    mode = _resolve_mode(isolation, python)
    return _execute(code, stdin, limits or Limits(), args, mode, python)


class SandboxPool:
    """Runs many programs at once, each in its own sandbox.

    The threads only wait on subprocesses, so ``max_workers`` (default ``os.cpu_count()``)
    is how many programs run at the same time.
    """

    def __init__(
        self, max_workers: int | None = None, *, isolation: str = "auto", python: str | None = None
    ) -> None:
        if max_workers is not None and max_workers < 1:
            raise ValueError(f"max_workers: expected >= 1 or None, got {max_workers}")
        self.max_workers = max_workers or os.cpu_count() or 1
        self.isolation = isolation
        self.python = python
        self._executor = ThreadPoolExecutor(self.max_workers, thread_name_prefix="sandbox")

    def submit(
        self, code: str, *, stdin: str = "", limits: Limits | None = None, args: Sequence[str] = ()
    ) -> Future[ExecResult]:
        """Start one program; the future's result is its ExecResult."""
        kwargs = dict(stdin=stdin, limits=limits, args=args, python=self.python)
        return self._executor.submit(run_python, code, isolation=self.isolation, **kwargs)

    def map(
        self,
        codes: Sequence[str],
        stdins: Sequence[str] | None = None,
        limits: Limits | Sequence[Limits] | None = None,
    ) -> list[ExecResult]:
        """Run every program; results in input order. ``limits``: one for all, or one each."""
        n = len(codes)
        stdins = [""] * n if stdins is None else list(stdins)
        if len(stdins) != n:
            raise ValueError(f"stdins: expected {n} entries (one per code), got {len(stdins)}")
        if limits is None or isinstance(limits, Limits):
            per = [limits] * n
        else:
            per = list(limits)
            if len(per) != n:
                raise ValueError(f"limits: expected {n} entries (one per code), got {len(per)}")
        if n and self.isolation == "auto":
            isolation_mode(self.python)  # probe once here, not in every thread
        futures = [self.submit(c, stdin=s, limits=lim) for c, s, lim in zip(codes, stdins, per)]
        return [f.result() for f in futures]

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
