"""The disk bound where the sandbox cannot mount a tmpfs: a watcher on the working directory.

With namespaces ("namespaces", "userns") the working directory is a tmpfs mounted with
``size=`` and ``nr_inodes=`` (``teamrl.sandbox.launch``): the kernel refuses a write past the
bound with ``ENOSPC``, and counts a file there until its last descriptor or mapping is gone,
whether or not it still has a name. The other modes ("landlock", "setuid", "rlimits") cannot
mount, and Linux has no per-folder bound an unprivileged parent could set (quotas need a file
system mounted with them), so ``DiskWatch`` measures the folder while the program runs (every
``LOOK_EVERY`` seconds, and once more after it ended) and the run is killed and reported as
``killed="disk_limit"`` past the bound.

What counts: every file, folder, link and other entry below the folder (the folder itself
not), and for bytes each inode once, a regular file by the larger of its length and the space
it holds (a sparse file counts at its length). A folder the watcher cannot read, or one nested
more than ``MAX_DEPTH`` deep, counts as over the bound: what cannot be measured is not
allowed. And what the run hides (``RunProcesses``): a file removed from the folder (or made
there with ``O_TMPFILE``) keeps its blocks while a process holds it open or mapped, so the
watcher also reads the descriptors (``/proc/<pid>/fd``) and mappings (``/proc/<pid>/maps``)
of every process of the run, and counts each such file once: open, as above; mapped only, at
``file_size_mb`` (the most one file may hold: ``fallocate``, which could reserve past it, is
refused by the seccomp filter in these modes, see ``teamrl.sandbox.seccomp``). A process
whose mappings pass ``MAX_MAPS`` bytes of ``/proc/<pid>/maps`` counts as over the bound too.

What it leaves open: between two looks a program may write past the bound (at most what it
writes in ``LOOK_EVERY``, each file within ``file_size_mb``); one that renames folders while
the watcher walks them may hide them from that look; and a process the watcher cannot read
is not counted: a non-dumpable one (the seccomp filter refuses ``PR_SET_DUMPABLE`` in these
modes but to a judging harness, whose forked children ``TRUSTED_PRELUDE`` keeps dumpable;
an executable the program may run but not read still runs non-dumpable) and, in "rlimits",
one that left the run's session with ``setsid``.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from teamrl.sandbox import linux
from teamrl.sandbox.limits import Limits

LOOK_EVERY = 0.05  # seconds between two looks at a running program's folder
MAX_DEPTH = 64  # folders nested deeper count as over the bound (the walk holds one fd each)
# Bytes of one process's /proc/<pid>/maps read per look (some 5,000 mappings; an interpreter
# has a few hundred): a longer one counts as over the bound, so that a program cannot make
# each look cost the trainer more.
MAX_MAPS = 1 << 19
MIB = 1 << 20
DELETED = " (deleted)"  # how /proc names a file that no longer has this name


class _Over(Exception):
    """Raised inside a look once the bound is passed (or what is left cannot be measured):
    the rest need not be counted."""


def usage(folder: str, max_bytes: int, max_entries: int) -> tuple[int, int] | None:
    """(bytes, entries) below ``folder``, or None once either passes its maximum (the walk
    stops there, so a look costs at most ``max_entries`` stats)."""
    seen: set[int] = set()
    total = entries = 0

    def refuse(error: OSError) -> None:
        if error.errno not in (errno.ENOENT, errno.ENOTDIR):  # (removed during the walk)
            raise _Over from error

    if max_bytes < 0 or max_entries < 0:
        return None
    try:
        for path, dirs, files, dir_fd in os.fwalk(folder, onerror=refuse):
            depth = os.path.relpath(path, folder).count(os.sep) + (path != folder)
            if dirs and depth >= MAX_DEPTH:
                raise _Over
            for name in (*dirs, *files):
                try:
                    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                entries += 1
                if info.st_ino not in seen:
                    seen.add(info.st_ino)
                    total += _held(info)
                if entries > max_entries or total > max_bytes:
                    raise _Over
    except _Over:
        return None
    return total, entries


def _held(info: os.stat_result) -> int:
    held = info.st_blocks * 512
    return max(held, info.st_size) if stat.S_ISREG(info.st_mode) else held


@contextmanager
def _reading_as(uid: int | None) -> Iterator[None]:
    """Read ``/proc`` entries with ``uid`` (and the same gid) as this thread's file system
    ids, or unchanged for None. A root trainer without CAP_SYS_PTRACE (a default container)
    may not read another uid's ``/proc/<pid>/fd`` or ``maps``; the fresh uid may read its
    own processes'. ``setfsuid`` changes the calling thread only, and the ids are put back
    (the capabilities with them) before anything else runs on it."""
    if uid is None:
        yield
        return
    libc = linux.libc()
    old_gid = libc.setfsgid(uid)
    old_uid = libc.setfsuid(uid)
    try:
        if (libc.setfsuid(-1), libc.setfsgid(-1)) != (uid, uid):  # -1: read back
            raise RuntimeError(f"sandbox: the disk watcher could not read as uid {uid}")
        yield
    finally:
        libc.setfsuid(old_uid)
        libc.setfsgid(old_gid)
        if (libc.setfsuid(-1), libc.setfsgid(-1)) != (old_uid, old_gid):
            raise RuntimeError("sandbox: the disk watcher could not restore its file system ids")


class RunProcesses:
    """The processes of one run without a pid namespace, found in ``/proc``, and the files
    they hold that the folder no longer names.

    ``uid``: the run's fresh uid ("landlock", "setuid"), every process of which is the
    run's, or ("rlimits") the caller's own, shared with the trainer: then only those of
    ``session`` (the program starts its own). Only dumpable processes are listed: the
    ``/proc/<pid>`` of a non-dumpable one belongs to root (see the module docstring).
    """

    def __init__(self, uid: int, session: int | None = None) -> None:
        self.uid = uid
        self.session = session

    def pids(self) -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.stat(f"/proc/{entry}").st_uid != self.uid:
                    continue
                if self.session is not None and _session(entry) != self.session:
                    continue
            except (OSError, IndexError, ValueError):  # it ended while we looked
                continue
            found.append(int(entry))
        return found

    def hidden(self, folder: str, file_bound: int) -> tuple[int, int] | None:
        """(bytes, files) the run's processes hold of files removed from ``folder``; None
        when a process maps more than ``MAX_MAPS`` bytes' worth (not measured)."""
        prefix = folder.rstrip("/") + "/"
        held: dict[int, int] = {}  # inode -> bytes
        try:
            with _reading_as(None if self.session is not None else self.uid):
                for pid in self.pids():
                    _open_files(pid, prefix, held)
                    _mapped_files(pid, prefix, held, file_bound)
        except _Over:
            return None
        return sum(held.values()), len(held)


def _session(pid: str) -> int:
    with open(f"/proc/{pid}/stat") as f:  # "pid (comm) state ppid pgrp session ..."
        return int(f.read().rsplit(")", 1)[1].split()[3])


def _open_files(pid: int, prefix: str, held: dict[int, int]) -> None:
    """Files below ``prefix`` without a name that ``pid`` holds open, by inode."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # it ended (or is no longer readable)
        return
    for name in names:
        link = f"/proc/{pid}/fd/{name}"
        try:
            target = os.readlink(link)
            if not (target.startswith(prefix) and target.endswith(DELETED)):
                continue
            info = os.stat(link)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 0:
            held[info.st_ino] = _held(info)


def _mapped_files(pid: int, prefix: str, held: dict[int, int], file_bound: int) -> None:
    """Files below ``prefix`` without a name that ``pid`` maps, at ``file_bound`` unless a
    descriptor showed what they hold ("start-end perms offset dev inode path")."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            text = f.read(MAX_MAPS + 1)
    except OSError:
        return
    if len(text) > MAX_MAPS:
        raise _Over
    if DELETED not in text:
        return
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith(prefix) and fields[5].endswith(DELETED):
            held.setdefault(int(fields[4]), file_bound)


class DiskWatch:
    """The bound of ``limits`` (``disk_mb``, ``disk_files``) on ``folder``, counting what
    ``processes`` (the run's, when it has no pid namespace) hold there without a name."""

    def __init__(self, folder: str, limits: Limits, processes: RunProcesses | None = None) -> None:
        self.folder = folder
        self.max_bytes = limits.disk_mb * MIB
        self.max_entries = limits.disk_files
        self.file_bound = limits.file_size_mb * MIB
        self.processes = processes

    def over(self) -> bool:
        hidden = (0, 0)
        if self.processes is not None:
            hidden = self.processes.hidden(self.folder, self.file_bound)
            if hidden is None:
                return True
        left = (self.max_bytes - hidden[0], self.max_entries - hidden[1])
        return usage(self.folder, *left) is None
