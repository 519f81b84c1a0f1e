"""Files of a run folder that must survive a kill at any instant, a full disk and a second writer.

- ``append_line``: one ``os.write`` of a whole line (``O_APPEND``), so a reader sees whole lines
  or, after a crash mid-write, one torn last line; ``read_jsonl`` drops a torn line with a
  warning naming the file and line. A write that fails (a full disk) cuts its part line off
  again, so a retry appends to whole lines.
- ``atomic_write_text``: write a temp file beside the target, fsync, ``os.replace``: a kill
  leaves either the old file or the new one, never a mix.
- ``RunLock``: ``fcntl.flock`` on ``RUN_DIR/.lock`` (holding pid, host and start time). The kernel
  drops the lock when its process dies, so a stale lock from a crashed run is simply taken over.
- ``disk_full``: whether an error means "no space left", including torch's
  ``RuntimeError: [enforce fail at inline_container.cc...]`` whose cause is ENOSPC.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import sys
import time
import warnings
from pathlib import Path

from teamrl.errors import ConfigError


class RunError(ConfigError):
    """A run folder cannot be used as asked (locked, disk full, no intact checkpoint)."""


def log_line(message: str) -> None:
    """One line on stderr for events a user should see (a repair, a removed temp folder)."""
    print(f"teamrl: {message}", file=sys.stderr, flush=True)


# --- lines and whole files --------------------------------------------------------------------


def append_line(path: Path, line: str) -> None:
    """Append ``line`` + newline with one write call. A short write is continued (only a full
    disk makes one); a write that fails truncates the file back to where the line began, so
    the file ends in whole lines and a retry of the line does not glue it to a torn part (a
    kill mid-write still leaves one, repaired on resume)."""
    data = (line.rstrip("\n") + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.fstat(fd).st_size  # one writer (the run lock): the end stays here
        try:
            while data:
                data = data[os.write(fd, data) :]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    if path.exists():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_all(f, text: str) -> None:
    """The single place a rewrite's bytes go to disk (tests make it fail half-way)."""
    f.write(text)


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w") as f:
            write_all(f, text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_jsonl(path: Path) -> list[dict]:
    """The JSON rows of ``path``. A line that does not parse (a write torn by a crash or a full
    disk) is dropped with a warning naming the file and the line number."""
    rows = []
    for i, ln in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not ln.strip():
            continue
        try:
            rows.append(json.loads(ln))
        except json.JSONDecodeError:
            warnings.warn(
                f"{path} line {i} is incomplete or not JSON (a write torn by a crash or a full "
                f"disk); dropped it: {ln[:60]!r}",
                stacklevel=2,
            )
    return rows


# --- the run folder lock ----------------------------------------------------------------------


class RunLock:
    """An exclusive lock on a run folder for the life of a trainer."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / ".lock"
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunError(f"{self.path.parent} is in use by {self.holder()}") from None
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": _now()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode() + b"\n", 0)
        self._fd = fd
        return self

    def holder(self) -> str:
        try:
            h = json.loads(self.path.read_text())
            return (
                f"another trainer (pid {h['pid']} on host {h['host']}, since {h['since']}); "
                "stop it or use another run_name"
            )
        except (OSError, ValueError, KeyError, TypeError):
            return "another trainer; stop it or use another run_name"

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())


def check_unlocked(run_dir: Path) -> None:
    """Before a model loads: a one-line error if another trainer holds ``run_dir``."""
    if Path(run_dir).is_dir():
        RunLock(run_dir).acquire().release()


def remove_orphans(root: Path) -> None:
    """Remove ``.step-*`` temp folders a crashed writer left (call with the run lock held)."""
    for tmp in sorted(Path(root).glob(".step-*")):
        shutil.rmtree(tmp, ignore_errors=True)
        log_line(f"removed {tmp}, a checkpoint left half-written by an earlier crash")


# --- a full disk ------------------------------------------------------------------------------


def disk_full(err: BaseException) -> bool:
    """Whether ``err`` (or an error it was raised from) says the disk is full."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(err)
        if "No space left on device" in text or "Disk quota exceeded" in text:
            return True
        if "inline_container" in text and ("file write failed" in text or "errno 28" in text):
            return True
        err = err.__cause__ or err.__context__
    return False


def free_space(folder: Path) -> str:
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if free < 1024 or unit == "TiB":
            return f"{free:.0f} {unit}" if unit == "B" else f"{free:.1f} {unit}"
        free /= 1024
    return "unknown"
