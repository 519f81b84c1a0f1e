"""The child's setup between fork and exec: namespaces, mounts, uid, Landlock, seccomp, rlimits.

As root ("namespaces") the child unshares its namespaces directly and drops to a fresh uid;
as anyone else ("userns") it first makes a user namespace mapping uid 0 to the caller, which
gives it the capabilities to build the same namespaces and mounts (the boot script then puts
the program in a nested user namespace without capabilities, see teamrl.sandbox.boot). As
root without namespaces ("landlock") it drops to a fresh uid and restricts itself with a
Landlock ruleset. Every mode's seccomp filter, built in the parent, is the child's last
step before exec ("namespaces", "landlock", and the weak "setuid", after the drop to the fresh
uid, and "rlimits") or the boot script's before the program runs ("userns", whose boot still
makes a user namespace and mounts /proc); it is inherited across exec and fork.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from collections.abc import Callable
from dataclasses import dataclass

from teamrl.sandbox import landlock, linux, seccomp
from teamrl.sandbox.limits import WATCHED_MODES, Limits

# Host directories the sandbox gets as empty private tmpfs instead (read-only, like
# everything else): their unix sockets, shared memory and temp files are out of reach.
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")


@dataclass
class Plan:
    mode: str
    prefix: str  # the interpreter's installation: stays visible
    base: str  # the run's folder (main.py, boot.py, work/): stays visible
    workdir: str
    uid: int | None  # the fresh uid ("namespaces", "setuid"), else None
    limits: Limits
    error_fd: int
    ruleset_fd: int = -1  # "landlock": the Landlock ruleset to restrict the child with
    # The seccomp filter the child installs before exec (every mode but "userns", which
    # installs it in the boot script, after the program's own user namespace is made).
    syscalls: seccomp.Filter | None = None


def confinement(
    mode: str, workdir: str, network: bool, report: bool = False
) -> tuple[int, seccomp.Filter]:
    """The Landlock ruleset fd ("landlock" mode, else -1; the caller closes it) and the seccomp
    filter (every mode) for one run, built here in the parent so that a kernel without them
    is a one-line RuntimeError before any fork. ``report``: the run is a judging harness,
    which may make itself non-dumpable (see ``teamrl.sandbox.seccomp``)."""
    sockets = seccomp.socket_policy(mode, network)
    watched = mode in WATCHED_MODES
    syscalls = seccomp.Filter(sockets, mode, watched, report)  # raises before any fd
    if mode != "landlock":
        return -1, syscalls
    return landlock.ruleset(workdir, network), syscalls


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def hidden_dirs(plan: Plan) -> list[str]:
    """The folders covered by an empty tmpfs in the sandbox's mount namespace: the private
    dirs, the caller's home ("userns": the program shares the caller's uid, so everything
    there would be readable), and ("namespaces") a folder on the interpreter's path that
    the fresh uid could not enter, which hides the rest of it too."""
    found = [os.path.realpath(d) for d in PRIVATE_DIRS if os.path.isdir(d)]
    if plan.mode == "userns":
        home = os.path.realpath(os.path.expanduser("~"))
        if home != "/" and os.path.isdir(home):
            found.append(home)
    elif (blocked := linux.blocked_ancestor(plan.prefix)) is not None:
        found.append(blocked)
    outer: list[str] = []
    for folder in sorted(set(found), key=len):  # a folder inside another is covered with it
        if folder != "/" and not any(_under(folder, o) for o in outer):
            outer.append(folder)
    return outer


def set_rlimits(limits: Limits, extra_processes: int) -> None:
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


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def make_preexec(plan: Plan) -> Callable[[], None]:
    libc = linux.libc()
    userns = plan.mode == "userns"
    namespaced = plan.mode in ("namespaces", "userns")
    hidden = hidden_dirs(plan) if namespaced else []
    keep = [p for p in (plan.prefix, plan.base) if any(_under(p, h) for h in hidden)]
    work = plan.workdir.encode()
    owner = 0 if userns else plan.uid  # "userns": uid 0 of the new namespace is the caller
    # The disk bound (teamrl.sandbox.disk): the root folder is one of the tmpfs's inodes.
    size, inodes = plan.limits.disk_mb, plan.limits.disk_files + 1
    tmpfs_opts = f"size={size}m,nr_inodes={inodes},mode=0700,uid={owner},gid={owner}"
    net = 0 if plan.limits.network else linux.CLONE_NEWNET
    ns_flags = linux.CLONE_NEWNS | linux.CLONE_NEWIPC | linux.CLONE_NEWPID | net
    if userns:
        ns_flags |= linux.CLONE_NEWUSER
        maps = (("setgroups", "deny"), ("uid_map", f"0 {os.getuid()} 1"))
        maps += (("gid_map", f"0 {os.getgid()} 1"),)
    ulong, check = ctypes.c_ulong, linux.check

    def syscall(number: int, *args) -> int:
        return libc.syscall(ctypes.c_long(number), *args)

    def isolate() -> None:
        check(libc.unshare(ctypes.c_int(ns_flags)), "unshare")
        if userns:
            for name, text in maps:
                _write(f"/proc/self/{name}", text)
        check(libc.mount(None, b"/", None, ulong(linux.MS_REC | linux.MS_PRIVATE), None), "/")
        # Clone what must stay visible, cover the hidden folders, put the clones back.
        trees = []
        for path in keep:
            flags = ctypes.c_uint(linux.OPEN_TREE_CLONE | linux.O_CLOEXEC | linux.AT_RECURSIVE)
            tree = syscall(linux.SYS_OPEN_TREE, ctypes.c_int(linux.AT_FDCWD), path.encode(), flags)
            trees.append((path, check(tree, f"clone {path}")))
        nosuid_nodev = ulong(linux.MS_NOSUID | linux.MS_NODEV)
        for folder in hidden:
            done = libc.mount(
                b"tmpfs", folder.encode(), b"tmpfs", nosuid_nodev, b"mode=0755,size=1m"
            )
            check(done, f"tmpfs over {folder}")
        for path, tree in trees:
            os.makedirs(path, exist_ok=True)
            moved = syscall(
                linux.SYS_MOVE_MOUNT,
                ctypes.c_int(tree),
                b"",
                ctypes.c_int(linux.AT_FDCWD),
                path.encode(),
                ctypes.c_uint(linux.MOVE_MOUNT_F_EMPTY_PATH),
            )
            check(moved, f"expose {path}")
            os.close(tree)
        attr = linux._MountAttr(linux.MOUNT_ATTR_RDONLY | linux.MOUNT_ATTR_NOSUID, 0, 0, 0)
        size = ctypes.c_size_t(ctypes.sizeof(attr))
        flags = ctypes.c_uint(linux.AT_RECURSIVE)
        at = ctypes.c_int(linux.AT_FDCWD)
        done = syscall(linux.SYS_MOUNT_SETATTR, at, b"/", flags, ctypes.byref(attr), size)
        check(done, "remount / read-only")
        check(libc.mount(b"tmpfs", work, b"tmpfs", nosuid_nodev, tmpfs_opts.encode()), "tmpfs cwd")

    def preexec() -> None:
        step = "start"
        try:
            if namespaced:
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
            pdeath = (ulong(linux.PR_SET_PDEATHSIG), ulong(signal.SIGKILL), *[ulong(0)] * 3)
            check(libc.prctl(*pdeath), step)
            check(libc.prctl(ulong(linux.PR_SET_NO_NEW_PRIVS), ulong(1), *[ulong(0)] * 3), step)
            # Both need no_new_privs (we hold no capability any more) and are kept across
            # exec; both before the address-space limit, which may stop ctypes allocating.
            if plan.ruleset_fd >= 0:
                step = "landlock"
                landlock.restrict_self(plan.ruleset_fd)
            if plan.syscalls is not None:
                step = "seccomp"
                plan.syscalls.install()
            step = "setrlimit"
            set_rlimits(plan.limits, extra_processes=2 if namespaced else 0)
        except BaseException as exc:
            os.write(plan.error_fd, f"{step}: {exc!r}".encode(errors="replace")[:4000])
            raise

    return preexec
