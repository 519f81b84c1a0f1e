"""The disk bound where the sandbox cannot mount a tmpfs: a watcher on the working directory.

With namespaces ("namespaces", "userns") the working directory is a tmpfs mounted with
``size=`` and ``nr_inodes=`` (``teamrl.sandbox.launch``): the kernel refuses a write past the
bound with ``ENOSPC``. The other modes ("landlock", "setuid", "rlimits") cannot mount, and
Linux has no per-folder bound an unprivileged parent could set (quotas need a file system
mounted with them), so ``DiskWatch`` measures the folder while the program runs (every
``LOOK_EVERY`` seconds, and once more after it ended) and the run is killed and reported as
``killed="disk_limit"`` past the bound. What it leaves open: between two looks a program may
write past the bound (at most what it writes in ``LOOK_EVERY``, each file within
``file_size_mb``), and one that renames folders while the watcher walks them may hide them
from that look.

What counts: every file, folder, link and other entry below the folder (the folder itself
not), and for bytes each inode once, a regular file by the larger of its length and the space
it holds (a sparse file counts at its length). A folder the watcher cannot read, or one nested
more than ``MAX_DEPTH`` deep, counts as over the bound: what cannot be measured is not
allowed.
"""

from __future__ import annotations

import errno
import os
import stat

from teamrl.sandbox.limits import Limits

LOOK_EVERY = 0.05  # seconds between two looks at a running program's folder
MAX_DEPTH = 64  # folders nested deeper count as over the bound (the walk holds one fd each)
MIB = 1 << 20


class _Over(Exception):
    """Raised inside the walk once the bound is passed: the rest need not be counted."""


def usage(folder: str, max_bytes: int, max_entries: int) -> tuple[int, int] | None:
    """(bytes, entries) below ``folder``, or None once either passes its maximum (the walk
    stops there, so a look costs at most ``max_entries`` stats)."""
    seen: set[int] = set()
    total = entries = 0

    def refuse(error: OSError) -> None:
        if error.errno not in (errno.ENOENT, errno.ENOTDIR):  # (removed during the walk)
            raise _Over from error

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
                    held = info.st_blocks * 512
                    total += max(held, info.st_size) if stat.S_ISREG(info.st_mode) else held
                if entries > max_entries or total > max_bytes:
                    raise _Over
    except _Over:
        return None
    return total, entries


class DiskWatch:
    """The bound of ``limits`` (``disk_mb``, ``disk_files``) on ``folder``."""

    def __init__(self, folder: str, limits: Limits) -> None:
        self.folder = folder
        self.max_bytes = limits.disk_mb * MIB
        self.max_entries = limits.disk_files

    def over(self) -> bool:
        return usage(self.folder, self.max_bytes, self.max_entries) is None
