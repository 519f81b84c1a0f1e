"""Run untrusted, model-written Python programs under limits.

Every program runs in its own interpreter (``python -I -S``: standard library only, no
``PYTHON*`` variables, no user site), in a fresh temporary directory that is deleted
afterwards, with a scrubbed environment (``PATH``, ``LANG``, and ``HOME`` = ``TMPDIR`` = the
working directory), in a new session, under rlimits (CPU, address space, file size,
processes, open files, no core dumps) and a wall clock, with stdout and stderr read as they
come and capped (the program is killed past the cap). When the program ends or is stopped,
everything it started is SIGKILLed, and when the caller is PID 1 (a container without an
init) or a subreaper, what the kill orphaned is reaped.

How strongly it is fenced off depends on what the machine allows; ``isolation_mode()`` says
which mode ``run_python`` gets by default, and logs it with its residual risks once:

``"namespaces"`` (the parent is root with CAP_SYS_ADMIN)
    * Fresh network, IPC, mount and pid namespaces. No network: the namespace has only a
      downed loopback, so every connect fails, abstract unix sockets included (they belong
      to a network namespace). In the mount namespace every mount is remounted read-only
      and nosuid; ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``/run`` are empty private
      tmpfs, so host unix sockets, shared memory and temp files there are out of reach; the
      working directory is a private tmpfs of ``disk_mb`` MiB and ``disk_files`` inodes, the
      only writable place, which vanishes with the namespace. The program runs under a tiny init (pid 1 of its
      namespace): when the program exits, init exits and the kernel kills and reaps every
      process left in the namespace, so double-forked daemons cannot survive.
    * A fresh unprivileged uid/gid, unique among concurrent runs, with no supplementary
      groups and ``no_new_privs``: RLIMIT_NPROC is enforced (it is not for root), the program
      can signal only its own processes (not the caller, not other sandboxes) and cannot read
      the caller's ``/proc/<pid>/environ``.
    * When the interpreter lives under a directory other users cannot enter (``/root``), an
      empty tmpfs covers that directory and the interpreter's prefix alone is bound back.
    * The seccomp filter (``teamrl.sandbox.seccomp``), installed in the child before it execs:
      no io_uring, ptrace or reading other processes' memory, new namespaces or mounts, bpf,
      perf events, keyrings, System V IPC or POSIX message queues, no memfd and no raised
      socket buffer (memory no RSS counts), and no socket or socket pair but ``AF_UNIX``
      (none needed: the network namespace is empty) unless the run allows the network.
      Unix sockets still reach a socket file outside the private folders that the fresh
      uid may write.

``"userns"`` (any other user, where unprivileged user namespaces are allowed)
    A user namespace maps uid 0 to the caller; in it the same network, IPC, mount (with the
    same private tmpfs dirs, and the caller's home hidden too) and pid namespaces as above,
    plus a fresh ``/proc`` of the new pid namespace, so the program sees and can signal
    only its own processes. The program itself runs in a nested user namespace as uid 1000
    without any capability, under the same seccomp filter (installed by the boot script once
    that namespace is made); the boot processes that hold capabilities are non-dumpable, so
    the program cannot ptrace them. RLIMIT_NPROC counts per user namespace, so it bounds the
    program's processes. Residual risk: outside its namespaces the program is the caller's
    uid, so it can read (not write: everything is read-only) any file the caller can read
    outside the hidden folders, and connect to the caller's unix sockets elsewhere.

``"landlock"`` (root without namespaces, e.g. a default container without CAP_SYS_ADMIN)
    Fresh uid/gid, ``no_new_privs`` and rlimits as above, and two fences the kernel keeps
    across ``exec`` for every process the program starts (a shell, ``curl``, a child
    interpreter), both installed in the child before it execs the interpreter:
    a Landlock ruleset (``teamrl.sandbox.landlock``) under which the only places it may
    write, create, remove, rename into, link into or truncate are its working directory
    (also its ``HOME`` and ``TMPDIR``) and ``/dev/null``-like devices; TCP bind and connect
    refused (ABI >= 4); no connecting to abstract unix sockets made outside, no signal to a
    process outside (ABI >= 6). And a seccomp filter (``teamrl.sandbox.seccomp``) that
    refuses ``socket(2)`` for every family and ``socketpair(2)`` but for a unix stream pair
    (so no network and no host unix socket, whatever the path: a datagram pair could send
    to any socket file), io_uring, ptrace and reading other processes' memory, new
    namespaces and mounts, bpf, perf events, keyrings, System V IPC, POSIX message queues,
    memfds and raised socket buffers, and what would hide disk from the watcher below
    (``fallocate``, ``sendmsg``, ``PR_SET_DUMPABLE``). After the run every process of the
    uid is killed. Residual risk: it reads world-readable files and sees host processes in
    ``/proc`` (not their environment); its working directory is on the caller's disk, not
    a tmpfs, so ``disk_mb`` and ``disk_files`` are kept by a watcher that looks every 50 ms,
    counts also the files the run's processes hold there without a name, and kills the run
    past them (``teamrl.sandbox.disk``), not by the kernel. Needs Landlock ABI >= 3
    (Linux 6.2), seccomp, and an interpreter other users can reach (not under ``/root``);
    without them the mode fails with one line, and ``auto`` never falls back to a weak mode.

``"setuid"`` (weak; only when asked for by name, as root)
    Fresh uid/gid, ``no_new_privs``, rlimits, the socket guard below and the seccomp filter
    (``socket(2)`` for ``AF_UNIX`` only, as in "namespaces"), installed in the child after
    the drop to the fresh uid, before it execs; after the run every process of the uid is
    killed. Residual risk: the program may write to world-writable places (``/tmp``,
    ``/dev/shm``, any 0777 folder; bounded per file by ``file_size_mb``), directly or
    through any program it runs, and connect or send datagrams to unix sockets in ``/tmp``
    and abstract ones (the filter cannot see a socket's address). Its working directory is
    on the caller's disk, bounded by the watcher as in "landlock" (with the same refusals).
    The interpreter must be reachable by other users (not under ``/root``).

``"rlimits"`` (weak; only when asked for: ``isolation="rlimits"`` or
``TEAMRL_SANDBOX_ISOLATION=rlimits``, and refused as root)
    Rlimits, own session, ``no_new_privs``, the socket guard and the seccomp filter (as in
    "setuid"), as the caller's uid. The filter refuses ptrace, so the program cannot trace
    the caller, but the kernel's file checks for the same uid still let it read the
    caller's ``/proc/<pid>/environ`` and memory (``/proc/<pid>/mem``). Residual risk: the
    program can signal the caller's processes (same uid), read and write wherever the
    caller can (those ``/proc`` files and its unix sockets included), escape the
    process-group kill with ``setsid``, and RLIMIT_NPROC counts every process of the uid;
    its working directory is bounded by the watcher, which finds the run's processes by
    their session (so not one that left it with ``setsid``). docs/sandbox.md lists what the
    hostile corpus measured.

When no strong mode works and no weak one was asked for, ``isolation_mode`` raises a
one-line RuntimeError saying what to enable or set.

The socket guard (used without a network namespace, when ``network=False``) replaces
``socket.socket`` and ``_socket.socket`` before the program starts with a class that refuses
every family but AF_UNIX. It stops ordinary library calls (and words the refusal), not a
determined program: ``ctypes`` syscalls or a spawned ``curl`` get past it. The fences are
the network namespace and the seccomp filter, which every mode installs: it refuses the
same families to every process of the program (every family in "landlock").

Common residual risks: memory is capped per process (RLIMIT_AS), so a program may hold up to
``max_processes * memory_mb`` MiB (plus its tmpfs), and beside it the kernel buffers of its
pipes and sockets, which no RSS counts: at most ``open_files`` descriptors per process, a
socket's buffer at the system default (raising it is refused), a pipe's at 64 KiB unless
enlarged while the uid's pipes hold less than ``fs.pipe-user-pages-soft``. Memory that would not be bounded so (memfds, System V shared
memory, POSIX message queues) is refused in every mode; no cgroup is made. The CPU rlimit
is per process too (the wall clock bounds the sum). If the calling process dies, a parent-death signal kills the
program (with namespaces, the whole namespace); its temporary directory is then left behind.

Judging programs: ``run_python(..., report=True)`` and ``teamrl.sandbox.channel`` give a
harness a result channel the judged program cannot write to.
"""

from teamrl.sandbox.channel import REPORT_FD_ENV, TRUSTED_PRELUDE
from teamrl.sandbox.limits import ISOLATION_MODES, ExecResult, Limits
from teamrl.sandbox.modes import ISOLATION_ENV, RESIDUAL_RISKS, isolation_mode, mode_problem
from teamrl.sandbox.pool import SandboxPool
from teamrl.sandbox.run import run_python

__all__ = [
    "ISOLATION_ENV",
    "ISOLATION_MODES",
    "REPORT_FD_ENV",
    "RESIDUAL_RISKS",
    "TRUSTED_PRELUDE",
    "ExecResult",
    "Limits",
    "SandboxPool",
    "isolation_mode",
    "mode_problem",
    "run_python",
]
