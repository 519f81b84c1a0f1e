"""What a sandboxed run may use (``Limits``) and what it did (``ExecResult``)."""

from __future__ import annotations

from dataclasses import dataclass, field

# In order of strength; "auto" picks the strongest that works, and never one of the weak
# modes, which leave writes or the network open (see teamrl.sandbox.modes).
ISOLATION_MODES = ("namespaces", "userns", "landlock", "setuid", "rlimits")
WEAK_MODES = ("setuid", "rlimits")
# Modes that run the program as a fresh uid leased for the run (they need root).
FRESH_UID_MODES = ("namespaces", "landlock", "setuid")
# Fresh-uid modes without a pid namespace: what the program leaves is killed by its uid.
UID_KILL_MODES = ("landlock", "setuid")
# Modes without a tmpfs of their own: a watcher keeps the disk bound (teamrl.sandbox.disk).
WATCHED_MODES = ("landlock", "setuid", "rlimits")


def _limit(default, help: str):  # noqa: A002
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed program."""

    cpu_seconds: int = _limit(
        5, "CPU seconds per process (RLIMIT_CPU: SIGXCPU, SIGKILL 1 s later)."
    )
    wall_seconds: float = _limit(10.0, "Wall-clock seconds from launch; then everything is killed.")
    memory_mb: int = _limit(512, "Address space per process in MiB (RLIMIT_AS).")
    file_size_mb: int = _limit(16, "Largest file the program may write, MiB (RLIMIT_FSIZE).")
    disk_mb: int = _limit(
        64,
        "MiB the program may keep in its working directory (also its HOME and TMPDIR), all "
        "files together: the size of its tmpfs with namespaces, else a watcher kills it past "
        "the bound (killed='disk_limit').",
    )
    disk_files: int = _limit(
        1024,
        "Files, folders and links the program may keep in its working directory (tmpfs "
        "nr_inodes with namespaces, else the watcher's count).",
    )
    max_processes: int = _limit(16, "Processes and threads the program may have (RLIMIT_NPROC).")
    output_bytes: int = _limit(
        65536, "Bytes kept per stream (stdout, stderr); more kills the program."
    )
    open_files: int = _limit(
        64,
        "Open file descriptors per process (RLIMIT_NOFILE). Each pipe or socket holds kernel "
        "buffers no RSS counts (a socket up to net.core.wmem_default), so this times "
        "max_processes bounds them.",
    )
    network: bool = _limit(
        False, "Allow network access (False: network namespace or socket guard)."
    )

    def __post_init__(self) -> None:
        positive = ("cpu_seconds", "memory_mb", "file_size_mb", "disk_mb", "disk_files")
        for name in (*positive, "max_processes", "open_files"):
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
    write failing with EFBIG: one file past ``file_size_mb``), ``"disk_limit"`` (its working
    directory passed ``disk_mb`` or ``disk_files``: it died of a write failing with ENOSPC,
    or the disk watcher killed it) or ``"signal N"`` (it died of signal N); ``timed_out``
    is true for the two time limits. ``stdout``/``stderr`` are decoded as UTF-8 (invalid
    bytes replaced), at most ``Limits.output_bytes`` bytes each; so is ``report``, the
    authenticated channel of ``run_python(..., report=True)`` (see ``teamrl.sandbox.channel``).
    """

    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    killed: str | None
    wall_seconds: float
    report: str = ""  # what the trusted harness wrote on the report channel

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.killed is None
