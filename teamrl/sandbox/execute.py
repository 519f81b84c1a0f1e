"""``execute``: one program in a fresh sandbox under a given isolation mode (what
``run_python`` runs once the mode is chosen, and what the mode probe runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence

from teamrl.sandbox import linux
from teamrl.sandbox.boot import boot_code
from teamrl.sandbox.channel import REPORT_FD_ENV
from teamrl.sandbox.disk import DiskWatch, RunProcesses
from teamrl.sandbox.launch import Plan, confinement, make_preexec
from teamrl.sandbox.limits import FRESH_UID_MODES, UID_KILL_MODES, ExecResult, Limits
from teamrl.sandbox.pump import classify, kill_tree, namespace_status, pump


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
    if mode in FRESH_UID_MODES and (blocked := linux.blocked_ancestor(tmp_root)):
        raise RuntimeError(
            f"sandbox: temp dir {tmp_root!r} is not reachable by other users ({blocked!r} "
            "lacks o+x); point TMPDIR at a world-traversable directory"
        )
    if mode in UID_KILL_MODES and (blocked := linux.blocked_ancestor(prefix)):
        raise RuntimeError(
            f"sandbox: isolation {mode!r} needs an interpreter other users can reach, but "
            f"{prefix!r} lies under {blocked!r}"
        )


def execute(
    code: str,
    stdin: str,
    limits: Limits,
    args: Sequence[str],
    mode: str,
    python: str | None,
    report: bool = False,
) -> ExecResult:
    """Run ``code`` in ``mode`` (already resolved): the body of ``run_python``."""
    exe, prefix = linux.interpreter(python)
    _check_reachable(mode, prefix)
    base = tempfile.mkdtemp(prefix="teamrl-sandbox-")
    uid = linux.lease_uid() if mode in FRESH_UID_MODES else None
    pidns = mode in ("namespaces", "userns")
    err_r, err_w = os.pipe()  # the child's setup reports a failure here
    status_r, status_w = os.pipe() if pidns else (-1, -1)
    report_r, report_w = os.pipe() if report else (-1, -1)
    init_pid, ruleset_fd = None, -1
    try:
        os.chmod(base, 0o755)  # the sandbox user must reach base/main.py and base/work
        program = os.path.join(base, "main.py")
        with open(program, "w", encoding="utf-8") as f:
            f.write(code)
        workdir = os.path.join(base, "work")
        os.mkdir(workdir, 0o700)
        if mode in UID_KILL_MODES:  # no tmpfs of its own: the folder itself is the uid's
            os.chown(workdir, uid, uid)
        ruleset_fd, syscalls = confinement(mode, workdir, limits.network, report)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        env.update(HOME=workdir, TMPDIR=workdir)
        if report:
            env[REPORT_FD_ENV] = str(report_w)
        boot = os.path.join(base, "boot.py")
        in_boot = syscalls if mode == "userns" else None  # see teamrl.sandbox.launch
        with open(boot, "w", encoding="utf-8") as f:
            f.write(boot_code(mode, limits.network, in_boot.code if in_boot else None))
        argv = [exe, "-I", "-S", boot, str(status_w), program, *map(str, args)]
        in_child = None if in_boot else syscalls
        plan = Plan(mode, prefix, base, workdir, uid, limits, err_w, ruleset_fd, in_child)
        preexec = make_preexec(plan)
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
                pass_fds=tuple(fd for fd in (status_w, report_w) if fd >= 0),
                preexec_fn=preexec,
            )
        except subprocess.SubprocessError as exc:
            detail = _read_error(err_r, err_w) or repr(exc)
            err_w = -1
            raise RuntimeError(f"sandbox: could not start the program ({mode}): {detail}") from exc
        finally:
            if stdin_fd != subprocess.DEVNULL:
                os.close(stdin_fd)
            for fd in (status_w, report_w):  # the child's ends: only the child holds them now
                if fd >= 0:
                    os.close(fd)
            status_w = report_w = -1
        # Without a tmpfs of its own, a watcher bounds the folder and what the run's
        # processes hold there without a name (teamrl.sandbox.disk).
        watch = None if pidns else DiskWatch(workdir, limits, _run_processes(mode, uid, proc))
        with proc:
            deadline = start + limits.wall_seconds
            out, err, channel, reason, cpu = pump(
                proc,
                limits,
                deadline,
                lambda: kill_tree(proc, mode, uid),
                report_r,
                watch.over if watch else None,
            )
        wall = time.monotonic() - start
        if reason is None and watch is not None and watch.over():  # what it left behind
            reason = "disk_limit"
        returncode = proc.returncode
        if pidns:
            init_pid, status = namespace_status(status_r)
            if status is not None:
                returncode = os.waitstatus_to_exitcode(status)
    finally:
        for fd in (err_r, err_w, status_r, status_w, report_r, report_w, ruleset_fd):
            if fd >= 0:
                os.close(fd)
        _reap(mode, uid, init_pid)
        if uid is not None:
            linux.release_uid(uid)
        _remove_tree(base)
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    killed = classify(reason, returncode, cpu, limits, stderr)
    return ExecResult(
        stdout=stdout,
        stderr=stderr,
        returncode=returncode,
        timed_out=killed in ("wall_time", "cpu_time"),
        killed=killed,
        wall_seconds=wall,
        report=channel.decode(errors="replace"),
    )


def _run_processes(mode: str, uid: int | None, proc: subprocess.Popen) -> RunProcesses:
    """Where the watcher finds the run's processes: every process of its fresh uid, or
    ("rlimits", the caller's uid) of the session the program started."""
    if mode in UID_KILL_MODES and uid is not None:
        return RunProcesses(uid)
    return RunProcesses(os.getuid(), session=proc.pid)


def _reap(mode: str, uid: int | None, init_pid: int | None) -> None:
    """When orphans come to us (we are PID 1 or a subreaper), reap what the run left: its
    pid namespace's init, or ("landlock", "setuid") the killed processes of its uid."""
    if not linux.reaps_orphans():
        return
    if init_pid is not None:
        linux.reap_namespace_init(init_pid)
    elif mode in ("namespaces", "userns"):
        linux.reap_dead_inits()
    if mode in UID_KILL_MODES and uid is not None:
        linux.reap_orphans_of(uid)


def _read_error(err_r: int, err_w: int) -> str:
    os.close(err_w)
    return os.read(err_r, 4096).decode(errors="replace")
