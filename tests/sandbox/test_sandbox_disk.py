"""The disk bound (issue 44, item 2) and the early refusal of a mode that cannot run here
(item 4): how the watcher counts, a disk filler in a pool and in a training run, and the
preflight's one line.

The hostile corpus (tests/hostile_programs.py: fill_the_disk, many_empty_files,
many_folders, big_file_past_the_disk_bound) runs in every mode ``auto`` can choose, in
test_sandbox.py.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from helpers.cli import one_line_error
from helpers.runs import tiny_overrides

from teamrl.config import ConfigError, load_config
from teamrl.sandbox import Limits, SandboxPool, disk, isolation_mode, linux, mode_problem
from teamrl.sandbox.disk import MAX_DEPTH, MIB, DiskWatch, RunProcesses, usage

ROOT = os.geteuid() == 0
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REAL_ROOT = ROOT and linux.in_initial_userns()

# Writes 1 MiB files until something stops it; then the good programs' job, with stdin.
FILLER = (
    "i = 0\nwhile True:\n    with open(f'f{i}', 'wb') as f:\n        f.write(b'0' * (1 << 20))\n"
    "    i += 1\n"
)
GOOD = (
    "import sys, tempfile\nwith tempfile.NamedTemporaryFile('w+') as f:\n"
    "    f.write(sys.stdin.read())\n    f.seek(0)\n    print(sum(map(int, f.read().split())))\n"
)
SMALL = Limits(wall_seconds=5.0, disk_mb=4, disk_files=32, file_size_mb=2)


def reachable_python() -> str:
    """An interpreter whose installation other users can reach (the fresh uid execs it)."""
    for path in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if path and os.path.exists(path):
            exe, prefix = linux.interpreter(path)
            if linux.blocked_ancestor(prefix) is None:
                return exe
    raise AssertionError("no interpreter reachable by other users")


# --------------------------------------------------------------------------------------
# What the watcher counts
# --------------------------------------------------------------------------------------


def test_usage_counts_entries_and_each_inode_once(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 10_000)
    os.link(tmp_path / "a", tmp_path / "hard")  # the same inode: its bytes once
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "empty").touch()
    os.symlink("a", tmp_path / "link")
    with open(tmp_path / "sparse", "wb") as f:  # 3 MiB long, no block held: counts 3 MiB
        f.truncate(3 * MIB)
    found = usage(str(tmp_path), 1 << 40, 1000)
    assert found is not None
    total, entries = found
    assert entries == 7  # a, hard, d, e, empty, link, sparse
    # a: 10 000 bytes (at least; rounded up to its blocks), sparse: its length; folders,
    # the link and the empty file hold at most a few blocks each
    assert 10_000 + 3 * MIB <= total <= 10_000 + 3 * MIB + 8 * 65536


def test_usage_stops_past_either_bound(tmp_path):
    for i in range(5):
        (tmp_path / f"f{i}").write_bytes(b"y" * 1000)
    assert usage(str(tmp_path), 1 << 30, 5) is not None
    assert usage(str(tmp_path), 1 << 30, 4) is None  # five entries, four allowed
    assert usage(str(tmp_path), 4999, 100) is None  # 5000 bytes at least
    assert not DiskWatch(str(tmp_path), Limits(disk_files=5)).over()
    assert DiskWatch(str(tmp_path), Limits(disk_files=4)).over()


def test_usage_counts_a_folder_it_cannot_measure_as_over(tmp_path):
    deep = tmp_path.joinpath(*["d"] * (MAX_DEPTH + 1))
    deep.mkdir(parents=True)
    assert usage(str(tmp_path), 1 << 30, 1000) is None
    shallow = tmp_path / "s"
    shallow.joinpath(*["d"] * (MAX_DEPTH - 1)).mkdir(parents=True)
    assert usage(str(shallow), 1 << 30, 1000) == (
        usage(str(shallow), 1 << 30, 1000)[0],
        MAX_DEPTH - 1,
    )


# Holds, in the folder argv[1]: a 3 MiB file removed while open, a 1 MiB file removed while
# mapped (its descriptor closed), a 1 MiB file removed and closed (freed), and a named one;
# then says so and waits to be killed.
HOLDER = """\
import ctypes, os, sys, time
os.chdir(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, *[ctypes.c_int] * 3, ctypes.c_long]
def made(name, mib):
    fd = os.open(name, os.O_RDWR | os.O_CREAT, 0o600)
    os.write(fd, bytes(mib << 20))
    return fd
kept = made("open", 3)
os.unlink("open")
fd = made("mapped", 1)
# (through libc: Python's mmap keeps a descriptor of its own)
assert libc.mmap(None, 1 << 20, 1, 1, fd, 0) not in (None, ctypes.c_void_p(-1).value)
os.close(fd)
os.unlink("mapped")
os.close(made("freed", 1))
os.unlink("freed")
made("named", 1)
print("ready", flush=True)
time.sleep(60)
"""


def holding(folder: str, **user) -> subprocess.Popen:
    """HOLDER running on ``folder`` in a session of its own, once it holds its files."""
    argv = [reachable_python(), "-I", "-c", HOLDER, folder]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True, **user)
    assert proc.stdout.readline() == b"ready\n"
    return proc


def test_the_watcher_counts_what_the_run_holds_without_a_name(tmp_path, monkeypatch):
    # Issue 53: files removed while open or mapped kept their blocks, unseen by the walk.
    folder = tmp_path / "work"
    folder.mkdir()
    proc = holding(str(folder))
    try:
        run = RunProcesses(os.getuid(), session=proc.pid)
        assert run.pids() == [proc.pid]
        # open: what it holds (3 MiB); mapped only: at file_size_mb, the most a file may hold
        assert run.hidden(str(folder), 5 * MIB) == (8 * MIB, 2)
        assert RunProcesses(os.getuid(), session=os.getsid(0)).hidden(str(folder), MIB) == (0, 0)
        assert run.hidden(str(tmp_path / "elsewhere"), MIB) == (0, 0)
        limits = Limits(disk_mb=9, file_size_mb=5)
        assert not DiskWatch(str(folder), limits).over()  # the walk sees the named 1 MiB
        assert not DiskWatch(str(folder), limits, run).over()  # 9 MiB: at the bound
        assert DiskWatch(str(folder), Limits(disk_mb=8, file_size_mb=5), run).over()
        assert DiskWatch(str(folder), Limits(disk_files=2, file_size_mb=5), run).over()
        # mappings past what one look reads count as over, like a folder it cannot measure
        monkeypatch.setattr(disk, "MAX_MAPS", 1000)
        assert run.hidden(str(folder), 5 * MIB) is None
        assert DiskWatch(str(folder), Limits(disk_mb=1000), run).over()
    finally:
        proc.kill()
        proc.wait()


# As root without CAP_SYS_PTRACE (a default container): RunProcesses(uid) on argv[2]'s
# folder, then this thread's file system ids and capabilities.
WATCH_AS_ROOT = """\
import json, sys
sys.path.insert(0, sys.argv[1])
from teamrl.sandbox import linux
from teamrl.sandbox.disk import RunProcesses
run = RunProcesses(int(sys.argv[3]))
found = {"pids": run.pids(), "hidden": run.hidden(sys.argv[2], 2 << 20)}
libc = linux.libc()
found["fs_ids"] = [libc.setfsuid(-1), libc.setfsgid(-1)]
with open("/proc/thread-self/status") as f:
    caps = dict(line.split(":\t", 1) for line in f if line.startswith("Cap"))
found["caps_back"] = caps["CapEff"] == caps["CapPrm"]
print(json.dumps(found))
"""


@pytest.mark.skipif(not ROOT, reason="needs root: a fresh uid's processes")
def test_the_watcher_reads_a_fresh_uids_processes_as_that_uid():
    # Root without CAP_SYS_PTRACE may not read another uid's /proc/<pid>/fd and maps: the
    # watcher reads them as the fresh uid (setfsuid, this thread only), then takes root back.
    uid = linux.lease_uid()
    base = tempfile.mkdtemp(prefix="teamrl-watch-", dir="/tmp")  # (others may enter /tmp)
    os.chmod(base, 0o755)
    folder = os.path.join(base, "work")
    os.mkdir(folder, 0o700)
    os.chown(folder, uid, uid)
    proc = holding(folder, user=uid, group=uid, extra_groups=[])
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def without_ptrace() -> None:
        if prctl(24, 19, 0, 0, 0) != 0:  # PR_CAPBSET_DROP, CAP_SYS_PTRACE
            raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP CAP_SYS_PTRACE")

    try:
        argv = [reachable_python(), "-I", "-c", WATCH_AS_ROOT, REPO, folder, str(uid)]
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, preexec_fn=without_ptrace
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout) == {
            "pids": [proc.pid],
            "hidden": [5 * MIB, 2],  # 3 MiB open, 1 MiB mapped at the 2 MiB bound
            "fs_ids": [0, 0],
            "caps_back": True,
        }
    finally:
        proc.kill()
        proc.wait()
        linux.release_uid(uid)
        shutil.rmtree(base)


def test_disk_limits_are_checked():
    for field in ("disk_mb", "disk_files"):
        with pytest.raises(ValueError, match=f"Limits.{field}: expected an integer >= 1"):
            Limits(**{field: 0})


# --------------------------------------------------------------------------------------
# A disk filler fails alone: in a pool beside good programs, in every mode run here
# --------------------------------------------------------------------------------------


def pool_modes() -> list:
    """The mode auto picks here, and as root the ones without a tmpfs (by name)."""
    modes = [pytest.param(isolation_mode(), None, id="auto")]
    if ROOT:
        python = reachable_python()
        modes.append(pytest.param("setuid", python, id="setuid"))
        from teamrl.sandbox import landlock

        if landlock.abi() >= landlock.MIN_ABI:
            modes.append(pytest.param("landlock", python, id="landlock"))
    return modes


@pytest.mark.parametrize("mode, python", pool_modes())
def test_a_disk_filler_fails_alone_in_a_pool(mode, python):
    big = (
        "with open('big', 'wb') as f:\n    for _ in range(8):\n        f.write(b'0' * (1 << 20))\n"
    )
    many = "i = 0\nwhile True:\n    open(f'e{i}', 'w').close()\n    i += 1\n"
    codes = [GOOD, FILLER, GOOD, many, GOOD, big]
    stdins = ["1 2 3", "", "4 5", "", "10 -4", ""]
    per = [SMALL, SMALL, SMALL, SMALL, SMALL, Limits(**{**SMALL.__dict__, "file_size_mb": 16})]
    with SandboxPool(max_workers=6, isolation=mode, python=python) as pool:
        results = pool.map(codes, stdins=stdins, limits=per)
    good = [results[i] for i in (0, 2, 4)]
    assert [(r.ok, r.stdout) for r in good] == [(True, "6\n"), (True, "9\n"), (True, "6\n")]
    for r in (results[1], results[3], results[5]):
        assert not r.ok and r.killed == "disk_limit", r
        assert r.wall_seconds < SMALL.wall_seconds  # stopped by the bound, not the clock


# --------------------------------------------------------------------------------------
# A training run whose reward runs a disk filler beside good programs completes
# --------------------------------------------------------------------------------------


def test_a_training_run_with_a_disk_filler_in_its_pool_completes(tmp_path):
    from teamrl.envs.base import Task
    from teamrl.envs.functional import FunctionEnv
    from teamrl.tasks import run_program
    from teamrl.trainer import Trainer

    seen = []

    def reward(completions, example):
        # Every joint action's programs: a disk filler beside two good ones, in the shared
        # pool, as a code reward runs them; the reward is the good ones' pass rate.
        results = run_program.run_programs([GOOD, FILLER, GOOD], ["1 2", "", "3 4"], 5.0)
        seen.append(results)
        return (results[0].stdout == "3\n") / 2 + (results[2].stdout == "7\n") / 2

    task = Task("disk", lambda: FunctionEnv(["alice", "bob"], reward), [{"prompt": "p"}] * 2)
    overrides = {"env.name": "disk", "env.sandbox_disk_mb": 4, "env.sandbox_disk_files": 16}
    cfg = load_config(None, tiny_overrides(steps=1, **overrides))
    try:
        trainer = Trainer(cfg, task=task, run_dir=tmp_path / "run")
        run_program.configure(cfg.env)  # the trainer's own call once it makes it (see report)
        history = trainer.train()
    finally:
        run_program.set_isolation("auto")
        run_program._disk.clear()
    assert len(history) == 1 and history[0]["reward/mean"] == 1.0
    assert seen and all(r[1].killed == "disk_limit" and not r[1].ok for r in seen)
    assert all(r[0].ok and r[2].ok for r in seen)
    assert (tmp_path / "run" / "metrics.jsonl").exists()


def test_configure_sets_the_disk_bound_of_later_programs(monkeypatch):
    from teamrl.config import EnvConfig
    from teamrl.tasks import run_program

    seen = {}
    monkeypatch.setattr("teamrl.sandbox.run_python", lambda code, **kw: seen.update(kw))
    try:
        run_program.configure(EnvConfig(sandbox_disk_mb=3, sandbox_disk_files=7))
        run_program.run_program("print(1)", {"wall_seconds": 2.0})
        assert (seen["limits"].disk_mb, seen["limits"].disk_files) == (3, 7)
        assert seen["limits"].wall_seconds == 2.0
        limits = run_program.batch_limits(4.0)
        assert (limits.disk_mb, limits.disk_files, limits.wall_seconds) == (3, 7, 4.0)
        with pytest.raises(ValueError, match="env.sandbox_disk_files: expected an integer >= 1"):
            run_program.configure(EnvConfig(sandbox_disk_files=0))
    finally:
        run_program._disk.clear()
        run_program.set_isolation("auto")
    assert run_program.batch_limits(4.0).disk_mb == Limits().disk_mb


# --------------------------------------------------------------------------------------
# A mode that cannot run here is refused before the model loads (item 4)
# --------------------------------------------------------------------------------------

# Refused here: as real root the weak same-uid modes, else the fresh-uid ones.
REFUSED = ("rlimits", "userns") if REAL_ROOT else ("namespaces", "landlock", "setuid")


@pytest.mark.parametrize("mode", REFUSED)
def test_mode_problem_names_what_is_refused(mode):
    problem = mode_problem(mode)
    assert problem is not None and "\n" not in problem
    assert problem.startswith(repr(mode))
    assert ("refused as root" in problem) == REAL_ROOT
    assert mode_problem("auto") is None


def test_a_mode_that_cannot_run_here_is_refused_by_the_preflight(tmp_path, capsys, monkeypatch):
    import teamrl.team.policies as team_module
    from teamrl.preflight import check_sandbox

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the error")

    monkeypatch.setattr(team_module, "load_model", refuse)
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("run_name: r\n")
    for mode in REFUSED:
        args = ["train", str(cfg_file), *tiny_overrides(), f"env.sandbox_isolation={mode}"]
        for extra in (["--dry-run"], [f"log.output_dir={tmp_path}"]):
            line = one_line_error(capsys, *args, *extra)
            assert line.startswith(f"teamrl: error: env.sandbox_isolation={mode}: '{mode}'")
    with pytest.raises(ConfigError, match="env.sandbox_disk_mb: expected an integer >= 1"):
        check_sandbox(load_config(None, tiny_overrides(**{"env.sandbox_disk_mb": 0})))
    check_sandbox(load_config(None, tiny_overrides()))  # auto: probed at the first program
