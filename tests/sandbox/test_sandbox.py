"""Tests for teamrl.sandbox: normal programs, the hostile corpus, the pool."""

from __future__ import annotations

import ctypes
import errno
import http.server
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import pytest
from hostile_programs import CORPUS, HIDDEN_USE_CASES, SECCOMP_CASES, Hostile

from teamrl.sandbox import (
    ISOLATION_ENV,
    TRUSTED_PRELUDE,
    ExecResult,
    Limits,
    SandboxPool,
    isolation_mode,
    landlock,
    run_python,
)
from teamrl.sandbox.boot import USERNS_UID
from teamrl.sandbox.limits import (
    FRESH_UID_MODES,
    ISOLATION_MODES,
    UID_KILL_MODES,
    WATCHED_MODES,
)
from teamrl.tasks.coding.harness import build_test_program, unit_results
from teamrl.tasks.coding.stdio import stdio_pass_ratio

# Small limits keep the file fast; the corpus checks every run against them.
LIMITS = Limits(
    cpu_seconds=1,
    wall_seconds=2.0,
    memory_mb=256,
    file_size_mb=4,
    disk_mb=8,
    disk_files=64,
    max_processes=8,
    output_bytes=4096,
    open_files=64,
)
SLACK = 1.0  # seconds allowed past the wall limit: kill, reap, drain, a loaded machine
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Every corpus program first reports its uid and its path, and tags its environment (which
# exec'd children inherit), so the test can look for processes it left behind.
PRELUDE = (
    "import os as _o, sys as _s\nprint('UID', _o.getuid(), _s.argv[0], flush=True)\n"
    "_o.environ['TEAMRL_HOSTILE'] = '@CASE@'\ndel _o, _s\n"
)
# The mode the corpus runs in: the strongest this machine allows (namespaces as root with
# CAP_SYS_ADMIN, landlock as root without, userns otherwise). TEAMRL_TEST_ISOLATION forces a
# weaker one, e.g. "setuid" on a root machine, to check the fallback's expectations.
MODE = os.environ.get("TEAMRL_TEST_ISOLATION") or isolation_mode()


def live_processes(uid: int) -> list[int]:
    """Pids of processes owned by ``uid`` that are not zombies."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:  # the process ended while we looked
            continue
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            found.append(int(entry))
    return found


def current_env() -> dict[str, str]:
    """This process's environment, less the variable pytest itself rewrites per test."""
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def reported(result: ExecResult) -> tuple[int, str]:
    """(uid, program path) from the PRELUDE's first line."""
    first = result.stdout.splitlines()[0] if result.stdout else ""
    assert first.startswith("UID "), f"no uid line in {result.stdout[:200]!r}"
    _, uid, program = first.split(" ", 2)
    return int(uid), program


def reported_uid(result: ExecResult) -> int:
    return reported(result)[0]


def tagged_processes(uid: int, program: str, case: str) -> list[int]:
    """Live processes of ``uid`` (not this one) that run ``program`` or carry the PRELUDE's
    tag for ``case``: how leftovers are told apart when the program shares our uid."""
    found = []
    tag = f"TEAMRL_HOSTILE={case}".encode()
    for pid in live_processes(uid):
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if program.encode() in argv or tag in env:
            found.append(pid)
    return found


def leftovers(
    case: str, result: ExecResult, mode: str = MODE, caller_uid: int | None = None
) -> list[int]:
    """Processes the program left running. With a fresh uid per run, any process of that
    uid; running as its caller's uid outside ("rlimits", "userns") the ones tagged by the
    PRELUDE."""
    patience = 1.0
    uid, program = reported(result)
    if mode in ("rlimits", "userns"):
        uid = os.getuid() if caller_uid is None else caller_uid
    else:
        return no_leftovers(uid, patience)
    end = time.monotonic() + patience
    while (left := tagged_processes(uid, program, case)) and time.monotonic() < end:
        time.sleep(0.05)
    return left


def processes() -> list[tuple[int, int, list[str]]]:
    """(pid, uid, argv) of every process we can read."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        found.append((int(entry), uid, argv))
    return found


def no_leftovers(uid: int, patience: float = 1.0) -> list[int]:
    """Leftover processes of ``uid``, allowing a SIGKILLed process a moment to finish dying."""
    end = time.monotonic() + patience
    while (left := live_processes(uid)) and time.monotonic() < end:
        time.sleep(0.05)
    return left


def reachable_python() -> str:
    """An interpreter other users can run (needed by the "setuid" mode)."""
    candidates = [sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]
    for path in candidates:
        if not path or not os.path.exists(path):
            continue
        real = os.path.realpath(path)
        current, ok = "/", True
        for part in real.strip("/").split("/"):
            current = os.path.join(current, part)
            ok = ok and bool(os.stat(current).st_mode & stat.S_IXOTH)
        if ok:
            return real
    raise AssertionError(f"no interpreter reachable by other users among {candidates}")


def mode_python() -> str | None:
    """The interpreter for MODE: without namespaces the fresh uid must reach it."""
    return reachable_python() if MODE in ("landlock", "setuid") else None


# --------------------------------------------------------------------------------------
# Normal programs
# --------------------------------------------------------------------------------------


def test_hello_world():
    r = run_python("print('hello')")
    assert (r.stdout, r.stderr, r.returncode, r.killed, r.timed_out) == (
        "hello\n",
        "",
        0,
        None,
        False,
    )
    assert r.ok
    assert 0 < r.wall_seconds < 5


def test_stdin_is_read_and_large_input_does_not_deadlock():
    numbers = "\n".join(str(i) for i in range(1, 10001))  # ~49 KB
    r = run_python("import sys\nprint(sum(map(int, sys.stdin.read().split())))", stdin=numbers)
    assert r.ok, r.stderr
    assert r.stdout == "50005000\n"  # 10000 * 10001 / 2


def test_stdin_echo_and_args():
    code = "import sys\nfor line in sys.stdin:\n    print(line.strip()[::-1])\nprint(sys.argv[1:])"
    r = run_python(code, stdin="abc\nxyz\n", args=["a", "b c"])
    assert r.stdout == "cba\nzyx\n['a', 'b c']\n"


def test_no_stdin_reads_eof():
    r = run_python("import sys\nprint(repr(sys.stdin.read()))")
    assert r.stdout == "''\n"


def test_nonzero_exit():
    r = run_python("import sys\nprint('x')\nsys.exit(3)")
    assert (r.returncode, r.killed, r.timed_out, r.stdout) == (3, None, False, "x\n")
    assert not r.ok


def test_exception_traceback_reads_like_a_direct_run():
    r = run_python("x = 1\ny = x / 0\n")
    assert r.returncode == 1 and not r.ok and r.killed is None
    lines = r.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].endswith('main.py", line 2, in <module>')
    assert lines[-1] == "ZeroDivisionError: division by zero"
    assert "<string>" not in r.stderr  # the bootstrap's frame is hidden


def test_syntax_error():
    r = run_python("def f(:\n    pass\n")
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1].startswith("SyntaxError")
    assert "Traceback" not in r.stderr  # as with `python main.py`


def test_main_module_semantics():
    code = "import pickle, sys\nclass A:\n    pass\nprint(__name__, __file__ == sys.argv[0])\n"
    code += "print(type(pickle.loads(pickle.dumps(A()))).__name__)"
    r = run_python(code)
    assert r.stdout == "__main__ True\nA\n", r.stderr


def test_working_directory_is_private_writable_and_removed():
    code = (
        "import os\nopen('out.txt', 'w').write('data')\n"
        "print(os.getcwd())\nprint(open('out.txt').read())\nprint(sorted(os.environ))\n"
        "print(os.environ['HOME'] == os.getcwd() == os.environ['TMPDIR'])"
    )
    r = run_python(code)
    assert r.ok, r.stderr
    cwd, content, env_keys, same = r.stdout.splitlines()
    assert content == "data"
    assert env_keys == "['HOME', 'LANG', 'PATH', 'TMPDIR']"
    assert same == "True"
    assert not os.path.exists(cwd)
    assert not os.path.exists(os.path.dirname(cwd))


def test_output_cap_is_exact():
    limits = Limits(output_bytes=10, wall_seconds=5)
    at_cap = run_python("print('123456789')", limits=limits)  # 10 bytes with the newline
    assert at_cap.ok and at_cap.stdout == "123456789\n"
    over = run_python("print('1234567890')", limits=limits)  # 11 bytes
    assert over.killed == "output_limit" and not over.ok
    assert over.stdout == "1234567890"


def test_invalid_utf8_is_replaced():
    r = run_python("import sys\nsys.stdout.buffer.write(b'a\\xffb')")
    assert r.stdout == "a\ufffdb"


def test_output_before_a_timeout_is_kept():
    r = run_python("import time\nprint('before', flush=True)\ntime.sleep(100)", limits=LIMITS)
    assert r.killed == "wall_time" and r.timed_out and not r.ok
    assert r.stdout == "before\n"
    assert r.wall_seconds <= LIMITS.wall_seconds + SLACK


def test_memory_below_the_limit_is_fine():
    r = run_python("b = bytearray(50 << 20)\nprint(len(b))", limits=LIMITS)
    assert r.ok and r.stdout == f"{50 << 20}\n"


def test_exec_result_ok():
    def make(returncode, timed_out=False, killed=None):
        return ExecResult("", "", returncode, timed_out, killed, 0.1)

    assert make(0).ok
    assert not make(1).ok
    assert not make(None).ok
    assert not make(0, timed_out=True).ok
    assert not make(0, killed="output_limit").ok


@pytest.mark.parametrize(
    "kwargs, field_name",
    [
        ({"cpu_seconds": 0}, "cpu_seconds"),
        ({"memory_mb": 1.5}, "memory_mb"),
        ({"max_processes": True}, "max_processes"),
        ({"wall_seconds": 0}, "wall_seconds"),
        ({"output_bytes": -1}, "output_bytes"),
    ],
)
def test_limits_validation(kwargs, field_name):
    with pytest.raises(ValueError, match=f"Limits.{field_name}"):
        Limits(**kwargs)


def test_exit_builtins_and_unicode():
    assert run_python("exit(3)").returncode == 3
    assert run_python("quit()").returncode == 0
    r = run_python("print('h\u00e9llo \u2713', input())", stdin="\u00e4\n")
    assert r.stdout == "h\u00e9llo \u2713 \u00e4\n"


def test_cpu_limit_is_classified():
    # Alone (not among the corpus's many CPU burners) so each gets its CPU second quickly.
    spin = "while True:\n    pass\n"
    deaf = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\n" + spin
    limits = Limits(cpu_seconds=1, wall_seconds=8)
    with SandboxPool(max_workers=2) as pool:
        soft, hard = pool.map([spin, deaf], limits=limits)
    # SIGXCPU at the soft limit; the program that ignores it gets SIGKILL 1 s later.
    assert (soft.killed, soft.returncode, soft.timed_out) == ("cpu_time", -signal.SIGXCPU, True)
    assert (hard.killed, hard.returncode, hard.timed_out) == ("cpu_time", -signal.SIGKILL, True)
    assert soft.wall_seconds < hard.wall_seconds < limits.wall_seconds


def test_sandbox_dies_with_its_caller():
    token = secrets.token_hex(8)
    script = (
        "from teamrl.sandbox import Limits, run_python\n"
        f"run_python('import time\\ntime.sleep(1000)', args=['{token}'], "
        "limits=Limits(wall_seconds=60))\n"
    )
    caller = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)
    try:
        pid, uid, program = None, None, None
        end = time.monotonic() + 15
        while uid is None and time.monotonic() < end:
            time.sleep(0.1)
            for found, owner, argv in processes():
                # the sandboxed program (not its caller, whose -c script holds the token too)
                if token in argv and any(a.endswith("main.py") for a in argv):
                    pid, uid = found, owner
                    program = next(a for a in argv if a.endswith("main.py"))
        assert uid is not None, "the sandboxed program never showed up"
    finally:
        caller.kill()
        caller.wait()
    if MODE == "rlimits":  # it ran as our uid: watch that one process
        end = time.monotonic() + 3.0
        while pid in live_processes(uid) and time.monotonic() < end:
            time.sleep(0.05)
        assert pid not in live_processes(uid)
    else:
        assert uid != os.getuid() and no_leftovers(uid, patience=3.0) == []
    # A killed caller cannot clean up its temporary directory; do it here.
    shutil.rmtree(os.path.dirname(program))


RLIMITS_SCRIPT = """\
import json, os, sys
sys.path.insert(0, sys.argv[1])
from teamrl.sandbox import Limits, isolation_mode, run_python
limits = Limits(cpu_seconds=1, wall_seconds=2, max_processes=8, output_bytes=4096)
programs = {
    "hello": "print('hi')",
    "network": "import socket\\nsocket.create_connection(('127.0.0.1', 9), 1)",
    "forks": sys.argv[2],
    "loop": "while True:\\n    pass",
    "sleep": "import time\\ntime.sleep(100)",
    "child": "import subprocess\\nprint(subprocess.Popen(['sleep', '1000']).pid)",
    "output": "while True:\\n    print('x' * 1000)",
}
report = {"mode": isolation_mode(), "uid": os.getuid()}
for name, code in programs.items():
    r = run_python(code, limits=limits)
    report[name] = [r.returncode, r.killed, r.stdout, r.stderr, r.wall_seconds]
print(json.dumps(report))
"""


@pytest.fixture
def readable_package():
    """Where `nobody` can import teamrl from: as root, a world-readable copy of the package
    (the path of its parent folder); otherwise the checkout itself.

    The checkout may sit under a directory only its owner can enter (a clone into
    ``mktemp -d``, or pytest's own temp root, is mode 0700), so `nobody` could not import
    teamrl from there. /tmp itself is world-traversable.
    """
    if os.geteuid() != 0:  # the caller runs as ourselves and reads the checkout
        yield REPO
        return
    folder = tempfile.mkdtemp(
        prefix="teamrl-readable-", dir="/tmp" if os.path.isdir("/tmp") else None
    )
    shutil.copytree(os.path.join(REPO, "teamrl"), os.path.join(folder, "teamrl"))
    for root, _, files in os.walk(folder):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_rlimits_mode_for_an_unprivileged_caller(readable_package):
    # As root: a caller running as `nobody`, with an interpreter that user can reach. As
    # another user: a caller running as ourselves (then rlimits is what every test uses).
    root = os.geteuid() == 0
    python = reachable_python() if root else sys.executable
    argv = [python, "-I", "-c", RLIMITS_SCRIPT, readable_package, BOUNDED_FORKS]
    as_nobody = dict(user=65534, group=65534, extra_groups=[]) if root else {}
    env = {**os.environ, ISOLATION_ENV: "rlimits"}  # the weak mode only when asked for
    done = subprocess.run(argv, capture_output=True, text=True, cwd="/", env=env, **as_nobody)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    uid = 65534 if root else os.getuid()
    assert (report["mode"], report["uid"]) == ("rlimits", uid)
    assert report["hello"][:3] == [0, None, "hi\n"]
    assert "network access is disabled in the sandbox" in report["network"][3]
    # RLIMIT_NPROC counts every process of the uid: `nobody` runs little else, while our own
    # uid may already be at the limit (then the program cannot fork at all)
    forked = int(report["forks"][2].split()[1])
    assert (1 if root else 0) <= forked <= LIMITS.max_processes - 2
    assert report["loop"][1] in ("cpu_time", "wall_time")
    assert report["sleep"][1] == "wall_time"
    assert report["output"][1] == "output_limit" and len(report["output"][2]) == 4096
    if report["child"][0] == 0:  # (no child when the uid's process budget is spent)
        child = int(report["child"][2])
        assert child not in live_processes(uid)
    for name in ("loop", "sleep", "output"):
        assert report[name][4] <= 2.0 + SLACK


def test_isolation_argument_is_checked():
    with pytest.raises(ValueError, match="isolation"):
        run_python("pass", isolation="chroot")
    if os.geteuid() == 0:
        with pytest.raises(ValueError, match="refused as root"):
            run_python("pass", isolation="rlimits")
    else:
        with pytest.raises(ValueError, match="needs root"):
            run_python("pass", isolation="namespaces")
    with pytest.raises(TypeError, match="code"):
        run_python(b"print(1)")


def test_socket_guard_refuses_the_network_but_not_unix_sockets():
    # The guard of the modes without a network namespace ("setuid" as root, else "rlimits").
    root = os.geteuid() == 0
    code = (
        "import _socket, socket\na, b = socket.socketpair()\na.sendall(b'hi')\n"
        "print(b.recv(2).decode(), socket.socket(socket.AF_UNIX).family == socket.AF_UNIX)\n"
        "for make in (socket.socket, lambda: _socket.socket(socket.AF_INET6)):\n"
        "    try:\n        make()\n        print('ESCAPED')\n"
        "    except PermissionError as e:\n        print(e)\n"
    )
    r = run_python(
        code,
        limits=LIMITS,
        isolation="setuid" if root else "rlimits",
        python=reachable_python() if root else None,
    )
    refused = "[Errno 1] network access is disabled in the sandbox"
    assert r.ok and r.stdout.splitlines() == ["hi True", refused, refused], r


FILTER_SCRIPT = """\
import ctypes, errno, json, os, socket, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(fn, *args):
    return "ok" if fn(*args) >= 0 else errno.errorcode[ctypes.get_errno()]
def seccomp(status):  # the Seccomp: line of /proc/<pid>/status (2: a filter is installed)
    return next(line.split()[1] for line in status.splitlines() if line.startswith("Seccomp:"))
t = threading.Thread(target=lambda: None)
t.start()
t.join()
a, b = socket.socketpair()
a.sendall(b"x")
child = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True).stdout
arm = os.uname().machine == "aarch64"
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o600)
pair, size = (ctypes.c_int * 2)(), ctypes.c_int(1 << 20)
def send_fd():
    try:
        socket.send_fds(a, [b"y"], [fd])
        return "ok"
    except OSError as exc:
        return errno.errorcode[exc.errno]
def mq_open():  # (removed again if it was made)
    name = b"teamrl-filter-probe-%d" % os.getpid()
    made = call(libc.syscall, 180 if arm else 240, name, os.O_CREAT | os.O_RDWR, 0o600, None)
    libc.syscall(181 if arm else 241, name)
    return made
print(json.dumps({
    "seccomp": seccomp(open("/proc/self/status").read()),
    "exec'd child": seccomp(child),
    "pair": b.recv(1).decode(),
    "subprocess": subprocess.run(["true"]).returncode,
    "unix": call(libc.socket, 1, 1, 0),
    "inet": call(libc.socket, 2, 1, 0),
    "netlink": call(libc.socket, 16, 2, 0),
    "io_uring": call(libc.syscall, 425, 8, ctypes.create_string_buffer(120)),
    "unshare": call(libc.unshare, 0x10000000),
    "sysv_shm": call(libc.shmget, 0, 4096, 0o1600),  # IPC_PRIVATE, IPC_CREAT | 0600
    "socketpair_inet": call(libc.socketpair, 2, 1, 0, pair),
    "socketpair_dgram": call(libc.socketpair, 1, 2, 0, pair),
    "memfd": call(libc.syscall, 279 if arm else 319, b"m", 0),
    "mq_open": mq_open(),
    "sndbuf": call(libc.setsockopt, a.fileno(), 1, 7, ctypes.byref(size), 4),  # SO_SNDBUF
    "fallocate": call(libc.fallocate, fd, 0, 0, 4096),
    "sendmsg": send_fd(),
    "dumpable": call(libc.prctl, 4, 1, 0, 0, 0),  # PR_SET_DUMPABLE (to what it is)
}))
"""


# Runs one program (a JSON job on stdin) in the mode argv[2] as the caller it is started as.
FILTER_CALLER = """\
import json, sys
sys.path.insert(0, sys.argv[1])
from teamrl.sandbox import Limits, run_python
job = json.load(sys.stdin)
limits = Limits(**job.pop("limits"))
r = run_python(job.pop("code"), isolation=sys.argv[2], limits=limits, **job)
print(json.dumps(r.__dict__))
"""


def run_in_mode(
    mode: str,
    code: str,
    package: str,
    stdin: str = "",
    report: bool = False,
    limits: Limits | None = None,
) -> ExecResult:
    """``code`` run in ``mode`` by a caller that may use it: this process, or (as root, for
    the modes refused to root) a caller running as `nobody`; skips where none may.
    ``limits``: by default ``Limits(wall_seconds=20)``."""
    root = os.geteuid() == 0
    if not root and mode in FRESH_UID_MODES:
        pytest.skip(f"{mode}: needs root")
    if root and mode == "namespaces" and MODE != "namespaces":
        pytest.skip(f"namespaces: not here (the corpus runs in {MODE})")
    if root and mode == "landlock" and landlock.abi() < landlock.MIN_ABI:
        pytest.skip("landlock: no Landlock ABI >= 3 here")
    if not root and mode == "userns" and MODE != "userns":
        pytest.skip(f"userns: not here (the corpus runs in {MODE})")
    job = {"stdin": stdin, "report": report}
    limits = limits or Limits(wall_seconds=20)
    if not (root and mode in ("userns", "rlimits")):
        python = reachable_python() if mode in UID_KILL_MODES else None
        return run_python(code, isolation=mode, limits=limits, python=python, **job)
    argv = [reachable_python(), "-I", "-c", FILTER_CALLER, package, mode]
    done = subprocess.run(
        argv,
        input=json.dumps({"code": code, "limits": limits.__dict__, **job}),
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
        **AS_NOBODY,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return ExecResult(**json.loads(done.stdout))


NOT_SUPPORTED = errno.errorcode[errno.EOPNOTSUPP]  # (its name: ENOTSUP, the same number)


@pytest.mark.parametrize("mode", ISOLATION_MODES)
def test_every_mode_runs_under_the_seccomp_filter(mode, readable_package):
    # The filter is installed (Seccomp: 2) in the program and in what it execs; ordinary
    # programs still work (threads, a subprocess, a socket pair, unix sockets where the mode
    # allows them); the kernel surfaces are refused (the corpus has one program each).
    r = run_in_mode(mode, FILTER_SCRIPT, readable_package)
    assert r.ok, r
    assert json.loads(r.stdout) == {
        "seccomp": "2",
        "exec'd child": "2",
        "pair": "x",
        "subprocess": 0,
        "unix": "EPERM" if mode == "landlock" else "ok",
        "inet": "EPERM",
        "netlink": "EPERM",
        "io_uring": "EPERM",
        "unshare": "EPERM",
        "sysv_shm": "EPERM",
        # issue 53: pairs of unix sockets only, stream ones only where Landlock cannot fence
        # a datagram's address; no memfd, POSIX queue or raised socket buffer anywhere; and
        # where a watcher keeps the disk bound, nothing that hides disk from it
        "socketpair_inet": "EPERM",
        "socketpair_dgram": "EPERM" if mode == "landlock" else "ok",
        "memfd": "EPERM",
        "mq_open": "EPERM",
        "sndbuf": "EPERM",
        "fallocate": NOT_SUPPORTED if mode in WATCHED_MODES else "ok",
        "sendmsg": "EPERM" if mode in WATCHED_MODES else "ok",
        "dumpable": "EPERM" if mode in WATCHED_MODES else "ok",
    }


# A judging harness (report=True) may make itself non-dumpable; the children it forks are
# made dumpable again and cannot undo it, so the watcher reads what they hold. The first
# child reports what PR_SET_DUMPABLE 0 returned; the second hides 32 MiB of files.
HARNESS_CHILDREN = (
    TRUSTED_PRELUDE
    + """
PROBE = "import ctypes\\ndone = ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)"
HIDE = (
    "import os, time\\nheld = []\\nfor i in range(8):\\n"
    "    fd = os.open('h%d' % i, os.O_RDWR | os.O_CREAT, 0o600)\\n"
    "    for _ in range(4):\\n        os.write(fd, bytes(1 << 20))\\n"
    "    os.unlink('h%d' % i)\\n    held.append(fd)\\ntime.sleep(2)\\n"
)
_teamrl_report(_teamrl_untrusted(PROBE, "done"))
_teamrl_report(_teamrl_untrusted(HIDE, "len(held)"))
"""
)


@pytest.mark.parametrize("mode", ISOLATION_MODES)
def test_a_harness_child_cannot_hide_files_in_any_mode(mode, readable_package):
    limits = Limits(wall_seconds=20, disk_mb=8, file_size_mb=4)
    r = run_in_mode(mode, HARNESS_CHILDREN, readable_package, report=True, limits=limits)
    first, *rest = r.report.splitlines()
    assert first == "-1", r  # refused: the child stays dumpable
    if mode in WATCHED_MODES:  # the watcher saw the files and stopped the run
        assert r.killed == "disk_limit" and rest == [], r
    else:  # the tmpfs refused the third file: the child failed, the harness went on
        assert r.ok and rest == ["None"], r


@pytest.mark.parametrize("mode", ISOLATION_MODES)
def test_the_coding_harness_runs_under_the_filter_in_every_mode(mode, readable_package):
    # The function tasks' judge (a forked worker, pipes, SIGALRM, the report channel) is
    # what the filter must not break: one unit passes, one fails, on the report channel.
    test = (
        "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(1, 1) == 3\n"
    )
    program, stdin, sources = build_test_program(
        "def add(a, b):\n    return a + b\n", test, "add", per_test_timeout_s=2.0, max_timeouts=1
    )
    r = run_in_mode(mode, program, readable_package, stdin=stdin, report=True)
    units, error = unit_results(r, sources)
    assert error == "" and [u.passed for u in units] == [True, False], r


def test_isolation_mode_matches_privileges():
    # The corpus below runs in MODE; its weaker modes' residual risks are expected failures.
    if os.geteuid() == 0:  # never the weak "setuid": auto does not pick it
        assert isolation_mode() in ("namespaces", "landlock")
        assert MODE in ("namespaces", "landlock", "setuid")
    else:
        assert isolation_mode() in ("userns", "rlimits")


# --------------------------------------------------------------------------------------
# Hostile corpus
# --------------------------------------------------------------------------------------


@dataclass
class Arena:
    """The test's side of the fence: listeners, secrets, markers, and what must not change."""

    pid: int
    cwd: str
    env: dict
    marker: str
    marker_dir: str
    marker_dirs: list[str]
    tcp: socket.socket
    udp: socket.socket
    unix: socket.socket
    unix_path: str
    secret_name: str
    secret_value: str
    home_secret: str
    tmp_socket: socket.socket
    tmp_socket_path: str
    abstract: socket.socket
    abstract_name: str
    tmp_dgram: socket.socket  # datagram sockets: what a program sent stays queued here
    tmp_dgram_path: str
    abstract_dgram: socket.socket
    abstract_dgram_name: str
    http: http.server.HTTPServer  # records the path of every request in ``http.paths``
    received: list[bytes] = field(default_factory=list)  # datagrams, drained

    def case_marker(self, case: str) -> str:
        return f"{self.marker}-{case}"  # per case, so one escape cannot fail every case

    def marker_paths(self, case: str) -> list[str]:
        return [os.path.join(d, self.case_marker(case)) for d in self.marker_dirs]

    def http_hits(self, case: str) -> list[str]:
        return [p for p in self.http.paths if p == "/" + self.case_marker(case)]

    def datagram_hits(self, case: str) -> list[bytes]:
        """The datagrams ``case`` got to the arena's datagram sockets (its marker)."""
        for listener in (self.tmp_dgram, self.abstract_dgram):
            listener.setblocking(False)
            while True:
                try:
                    self.received.append(listener.recv(4096))
                except BlockingIOError:
                    break
        return [d for d in self.received if d == self.case_marker(case).encode()]

    def forget(self, case: str) -> None:
        """Remove what an expected escape of ``case`` left (its marker files, its requests,
        its datagrams), so that a run in the next mode is judged on its own."""
        for path in self.marker_paths(case):
            if os.path.lexists(path):
                os.remove(path)
        for hit in self.http_hits(case):
            self.http.paths.remove(hit)
        for hit in self.datagram_hits(case):
            self.received.remove(hit)
        # a POSIX message queue of that name, left where there is no IPC namespace
        mq_unlink = 181 if os.uname().machine == "aarch64" else 241
        ctypes.CDLL(None).syscall(mq_unlink, self.case_marker(case).encode())

    def drain_listeners(self) -> None:
        """Accept and close what an expected escape left waiting on the listeners."""
        for listener in (self.tcp, self.unix, self.tmp_socket, self.abstract):
            listener.setblocking(False)
            while True:
                try:
                    listener.accept()[0].close()
                except BlockingIOError:
                    break

    def fill(self, code: str, case: str) -> str:
        values = {
            "CASE": case,
            "TEST_PID": str(self.pid),
            "MARKER_DIR": self.marker_dir,
            "MARKER": self.case_marker(case),
            "TCP_PORT": str(self.tcp.getsockname()[1]),
            "UDP_PORT": str(self.udp.getsockname()[1]),
            "UNIX_SOCKET": self.unix_path,
            "SECRET_NAME": self.secret_name,
            "HOME_SECRET": self.home_secret,
            "HOME": os.path.expanduser("~"),
            "REPO": REPO,
            "TMP_SOCKET": self.tmp_socket_path,
            "ABSTRACT": self.abstract_name,
            "TMP_DGRAM": self.tmp_dgram_path,
            "ABSTRACT_DGRAM": self.abstract_dgram_name,
            "HTTP_PORT": str(self.http.server_address[1]),
        }
        for key, value in values.items():
            code = code.replace(f"@{key}@", value)
        assert "@" not in code.replace("@@", ""), f"unfilled placeholder in {code!r}"
        return code


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET with 200 and records its path: a program that reaches it escaped."""

    def do_GET(self) -> None:  # noqa: N802 (the name http.server looks up)
        self.server.paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


def http_recorder() -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.daemon_threads = True
    server.paths = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    marker = f"teamrl-sandbox-marker-{secrets.token_hex(4)}"
    # In /tmp, which every user can enter: a caller running as `nobody` could reach it too.
    marker_dir = tempfile.mkdtemp(prefix="teamrl-outside-", dir="/tmp")
    os.chmod(marker_dir, 0o777)  # writable by anyone: only the sandbox may stop the write
    home = os.path.expanduser("~")
    secret_name, secret_value = "TEAMRL_FAKE_API_KEY", f"s3cret-{secrets.token_hex(8)}"
    os.environ[secret_name] = secret_value
    home_secret = os.path.join(home, f".{marker}-secret")
    with open(home_secret, "w") as f:
        f.write(secret_value)
    os.chmod(home_secret, 0o644)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix_path = os.path.join(marker_dir, "listener.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)  # default mode (umask 022): others may not connect
    unix.listen(8)
    # A socket anyone may connect to, in the host's /tmp, and an abstract one (no file at all).
    tmp_socket_path = f"/tmp/{marker}.sock"
    tmp_socket = socket.socket(socket.AF_UNIX)
    tmp_socket.bind(tmp_socket_path)
    os.chmod(tmp_socket_path, 0o777)
    tmp_socket.listen(8)
    abstract_name = f"{marker}-abstract"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + abstract_name)
    abstract.listen(8)
    # Datagram sockets a program could reach by sendto (like the host's /dev/log).
    tmp_dgram_path = f"/tmp/{marker}.dgram"
    tmp_dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    tmp_dgram.bind(tmp_dgram_path)
    os.chmod(tmp_dgram_path, 0o777)
    abstract_dgram_name = f"{marker}-abstract-dgram"
    abstract_dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    abstract_dgram.bind("\0" + abstract_dgram_name)
    paths = ["/tmp", "/etc", REPO, home, "/dev/shm", marker_dir, "/var/tmp"]
    arena = Arena(
        pid=os.getpid(),
        cwd=os.getcwd(),
        env=current_env(),
        marker=marker,
        marker_dir=marker_dir,
        marker_dirs=paths,
        tcp=tcp,
        udp=udp,
        unix=unix,
        unix_path=unix_path,
        secret_name=secret_name,
        secret_value=secret_value,
        home_secret=home_secret,
        tmp_socket=tmp_socket,
        tmp_socket_path=tmp_socket_path,
        abstract=abstract,
        abstract_name=abstract_name,
        tmp_dgram=tmp_dgram,
        tmp_dgram_path=tmp_dgram_path,
        abstract_dgram=abstract_dgram,
        abstract_dgram_name=abstract_dgram_name,
        http=http_recorder(),
    )
    yield arena
    for case in CORPUS:  # what an expected (residual-risk) escape wrote
        arena.forget(case.name)
    arena.http.shutdown()
    arena.http.server_close()
    for s in (tcp, udp, unix, tmp_socket, abstract, tmp_dgram, abstract_dgram):
        s.close()
    os.remove(tmp_socket_path)
    os.remove(tmp_dgram_path)
    os.remove(home_secret)
    del os.environ[secret_name]
    shutil.rmtree(marker_dir, ignore_errors=True)


BOUNDED_FORKS = """\
import os, time
n = 0
for i in range(40):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    n += 1
print('forked', n)
"""


RUNNABLE = [case for case in CORPUS if MODE not in case.skip]


def corpus_params() -> list:
    """One param per case, skipped or expected to fail where MODE's residual risks say so."""
    params = []
    for case in CORPUS:
        marks = []
        if MODE in case.skip:
            marks.append(pytest.mark.skip(reason=f"{MODE} mode: {case.skip[MODE]}"))
        elif MODE in case.xfail:
            reason = f"{MODE} mode, documented residual risk: {case.xfail[MODE]}"
            marks.append(pytest.mark.xfail(reason=reason, strict=False))
        params.append(pytest.param(case.name, marks=marks))
    return params


@pytest.fixture(scope="module")
def corpus_results(arena):
    # Prove that RLIMIT_NPROC holds with a bounded program before any unbounded fork bomb.
    # The program may have max_processes processes including itself (in "rlimits" mode the
    # limit counts every process of our uid, so it may fork fewer).
    probe = run_python(BOUNDED_FORKS, limits=LIMITS, isolation=MODE, python=mode_python())
    forked = int(probe.stdout.split()[1])
    if MODE == "rlimits":
        assert 0 <= forked <= LIMITS.max_processes - 1, probe
    else:
        assert forked == LIMITS.max_processes - 1, probe
    codes, limits = [], []
    for case in RUNNABLE:
        codes.append(arena.fill(PRELUDE + case.code, case.name))
        limits.append(Limits(**{**LIMITS.__dict__, **case.limits}))
    start = time.monotonic()
    with SandboxPool(max_workers=8, isolation=MODE, python=mode_python()) as pool:
        results = pool.map(codes, limits=limits)
    elapsed = time.monotonic() - start
    out = {case.name: (case, lim, r) for case, lim, r in zip(RUNNABLE, limits, results)}
    try:
        # All in parallel: the slowest case bounds the total, not the sum.
        assert elapsed < 30, f"the corpus took {elapsed:.1f} s"
        yield out
    finally:
        if MODE == "rlimits":  # end what an expected escape left running (our uid, tagged)
            for case, _, r in out.values():
                if r.stdout.startswith("UID "):
                    for pid in tagged_processes(os.getuid(), reported(r)[1], case.name):
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass


def test_corpus_is_large_and_names_are_unique(arena):
    names = [case.name for case in CORPUS]
    assert len(names) >= 30
    assert len(set(names)) == len(names)
    assert SECCOMP_CASES | HIDDEN_USE_CASES <= set(names)
    for case in CORPUS:  # a syntax error would fail "safely", in every mode
        compile(arena.fill(PRELUDE + case.code, case.name), case.name, "exec")


def violations(
    case: Hostile,
    limits: Limits,
    r: ExecResult,
    arena: Arena,
    mode: str,
    caller_uid: int | None = None,
    fence_only: bool = False,
) -> list:
    """What went wrong with one corpus run (empty: contained), for a caller that is this
    process (or ``caller_uid``'s). ``fence_only`` leaves out how the limits classified the
    run (timing, kill reason), which only MODE's own corpus test checks: the runs in other
    modes compare their escapes, which a loaded machine must not change."""
    found = []

    def expect(ok: bool, what: str) -> None:
        if not ok:
            found.append(what)

    if not fence_only:
        # Ends within its limit.
        expect(r.wall_seconds <= limits.wall_seconds + SLACK, "over the wall clock")
        expect(case.killed is None or r.killed in case.killed, f"killed by {r.killed}")
        expect(r.timed_out == (r.killed in ("wall_time", "cpu_time")), "timed_out")
    # Fails, or (sneaky) did no harm; the allowed reasons are specific where they can be.
    expect(case.sneaky or not r.ok, "succeeded")
    expect("ESCAPED" not in r.stdout, "ESCAPED")
    expect(arena.secret_value not in r.stdout + r.stderr, "leaked the secret")
    for stream in (r.stdout, r.stderr):
        expect(len(stream.encode()) <= limits.output_bytes, "output over the cap")
    if r.killed == "output_limit":
        caps = (len(r.stdout.encode()), len(r.stderr.encode()))
        expect(limits.output_bytes in caps, "output cap")
    # Ran as an unprivileged uid (a fresh one, but in "rlimits" mode, which runs as ours),
    # and nothing of it is left running.
    for path in arena.marker_paths(case.name):
        expect(not os.path.lexists(path), f"wrote {path}")
    expect(not arena.http_hits(case.name), "reached the loopback HTTP server")
    expect(not arena.datagram_hits(case.name), "reached a datagram socket outside")
    if not r.stdout.startswith("UID "):  # (fence_only: stopped before it began, on a busy machine)
        return found if fence_only else [*found, "no uid line"]
    uid = reported_uid(r)
    expect(uid != 0, "ran as root")
    if mode == "userns":  # its own user namespace's uid, which is ours outside
        expect(uid == USERNS_UID, f"uid {uid}")
    else:
        caller = os.getuid() if caller_uid is None else caller_uid
        expect((uid == caller) == (mode == "rlimits"), f"uid {uid}")
    expect(leftovers(case.name, r, mode, caller_uid) == [], "left processes running")
    return found


@pytest.mark.parametrize("name", corpus_params())
def test_hostile_program(name, corpus_results, arena):
    case, limits, r = corpus_results[name]
    assert isinstance(case, Hostile)
    assert violations(case, limits, r, arena, MODE) == [], r
    # The test process is unchanged.
    assert os.getpid() == arena.pid
    assert os.getcwd() == arena.cwd
    assert current_env() == arena.env


def test_sneaky_successes_did_nothing(corpus_results, arena):
    # os._exit skips the flush: the buffered text is lost, and that is what the caller sees.
    r = corpus_results["exit0_mid_output"][2]
    assert r.returncode == 0 and "PARTIAL" not in r.stdout
    if MODE == "namespaces":
        # Killing init (our parent inside the namespace) is ignored; the program went on.
        r = corpus_results["kill_parent"][2]
        assert r.stdout.splitlines()[1:] == ["sent"]
    elif MODE in ("landlock", "setuid"):  # the parent is ours (root): not the program's to signal
        r = corpus_results["kill_parent"][2]
        assert "PermissionError" in r.stderr and os.getpid() == arena.pid
    # The environment holds no secret: the variable is simply missing.
    r = corpus_results["env_secret"][2]
    assert r.stdout.splitlines()[1] == "None"


# Which corpus cases aim at which of the arena's listeners.
LISTENER_CASES = {
    "tcp": ("tcp_connect", "create_connection"),
    "unix": ("unix_socket",),
    "udp": ("udp_send",),
}


def test_listeners_received_nothing(corpus_results, arena):
    # A listener whose attackers are expected to get through in MODE is not checked here
    # (their own corpus cases are the expected failures).
    def fenced(kind: str) -> bool:
        return not any(MODE in c.xfail for c in CORPUS if c.name in LISTENER_CASES[kind])

    for kind, listener in (("tcp", arena.tcp), ("unix", arena.unix)):
        if fenced(kind):
            listener.setblocking(False)
            with pytest.raises(BlockingIOError):
                listener.accept()
    if fenced("udp"):
        arena.udp.setblocking(False)
        with pytest.raises(BlockingIOError):
            arena.udp.recvfrom(100)


def test_network_can_be_allowed(corpus_results, arena):
    # After the corpus (whose listeners must stay silent), open the door on purpose once.
    code = arena.fill(
        "import socket\ns = socket.create_connection(('127.0.0.1', @TCP_PORT@), 2)\n"
        "s.sendall(b'hello')\nprint('connected')\n",
        "network_allowed",
    )
    arena.tcp.setblocking(True)
    arena.tcp.settimeout(5)
    r = run_python(code, limits=Limits(network=True, wall_seconds=5))
    assert r.ok and r.stdout == "connected\n", r
    conn, _ = arena.tcp.accept()
    with conn:
        assert conn.recv(5) == b"hello"


# --------------------------------------------------------------------------------------
# Fallback mode ("setuid": root without namespaces) and the pool
# --------------------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="the setuid mode needs root")
def test_setuid_mode_fences(arena):
    python = reachable_python()
    programs = {
        "network": "import socket\nsocket.create_connection(('127.0.0.1', @TCP_PORT@), 1)",
        "forks": BOUNDED_FORKS,
        "daemon": "import subprocess\nsubprocess.Popen(['sleep', '1000'], start_new_session=True)",
        "kill": "import os\nos.kill(@TEST_PID@, 9)",
        "etc": "open('/etc/@MARKER@', 'w')",
        "secret": "import os\nprint(os.environ.get('@SECRET_NAME@'))",
    }
    with SandboxPool(max_workers=6, isolation="setuid", python=python) as pool:
        codes = [arena.fill(PRELUDE + c, name) for name, c in programs.items()]
        results = dict(zip(programs, pool.map(codes, limits=LIMITS)))
    assert "PermissionError: [Errno 1] network access is disabled" in results["network"].stderr
    assert results["forks"].stdout.splitlines()[1] == f"forked {LIMITS.max_processes - 1}"
    assert results["daemon"].ok  # it exits at once; its child must not outlive the run
    assert "PermissionError" in results["kill"].stderr
    assert "PermissionError" in results["etc"].stderr
    assert results["secret"].stdout.splitlines()[1] == "None"
    for r in results.values():
        uid = reported_uid(r)
        assert uid != 0 and no_leftovers(uid) == []
        assert r.wall_seconds <= LIMITS.wall_seconds + SLACK
    assert os.getpid() == arena.pid
    assert not os.path.exists(f"/etc/{arena.case_marker('etc')}")


# Sum two integers read from stdin: what no hostile program does.
SUM_TESTS = [{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4\n", "output": "6\n"}]


def test_sneaky_programs_score_as_failures(arena):
    """The programs allowed to exit cleanly still earn nothing when judged: the stdin/stdout
    judge (AT-GRPO coding's reward) compares outputs, so exit status 0 is not a pass."""
    sneaky = [case for case in CORPUS if case.sneaky]
    assert len(sneaky) >= 9
    # stderr (which the judge ignores) names the program, to find what it leaves behind
    tag = (
        "import os as _o, sys as _s\nprint('UID', _o.getuid(), _s.argv[0], file=_s.stderr)\n"
        "_o.environ['TEAMRL_HOSTILE'] = '@CASE@'\ndel _o, _s\n"
    )
    clean_exits = 0
    with SandboxPool(max_workers=4, isolation=MODE, python=mode_python()) as pool:
        executed: list[ExecResult] = []

        def runner(codes, stdins, timeout_s):
            results = pool.map(list(codes), stdins=list(stdins), limits=LIMITS)
            executed.extend(results)
            return results

        for case in sneaky:
            if MODE in case.skip:
                continue
            executed.clear()
            code = arena.fill(tag + case.code, case.name)
            ratio, runs = stdio_pass_ratio(code, SUM_TESTS, timeout_s=2.0, runner=runner)
            assert ratio == 0.0, (case.name, runs)
            assert not any(run.matches(t["output"]) for run, t in zip(runs, SUM_TESTS))
            clean_exits += sum(run.ok for run in runs)
            assert arena.secret_value not in "".join(run.output for run in runs)
            for r in executed if MODE == "rlimits" else ():  # end expected escapes (our uid)
                if r.stderr.startswith("UID "):
                    program = r.stderr.splitlines()[0].split(" ", 2)[2]
                    for pid in tagged_processes(os.getuid(), program, case.name):
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
    assert clean_exits > 0  # some did exit 0, and still scored nothing


def test_pool_keeps_order_and_runs_in_parallel():
    codes = ["import sys, time\ntime.sleep(0.5)\nprint(sys.stdin.read() * 2)"] * 4
    stdins = ["a", "b", "c", "d"]
    start = time.monotonic()
    with SandboxPool(max_workers=4) as pool:
        results = pool.map(codes, stdins=stdins)
    elapsed = time.monotonic() - start
    assert [r.stdout for r in results] == ["aa\n", "bb\n", "cc\n", "dd\n"]
    assert elapsed < 1.6, elapsed  # serially it would take at least 2 s


def test_pool_limits_per_program_and_length_checks():
    with SandboxPool(max_workers=2) as pool:
        fast, slow = Limits(wall_seconds=5), Limits(wall_seconds=0.5)
        results = pool.map(["import time\ntime.sleep(1)\nprint(1)"] * 2, limits=[fast, slow])
        assert results[0].ok and results[0].stdout == "1\n"
        assert results[1].killed == "wall_time"
        with pytest.raises(ValueError, match="stdins: expected 2"):
            pool.map(["pass", "pass"], stdins=["x"])
        with pytest.raises(ValueError, match="limits: expected 1"):
            pool.map(["pass"], limits=[fast, slow])
    with SandboxPool() as pool:
        assert pool.max_workers == os.cpu_count()
    with pytest.raises(ValueError, match="max_workers"):
        SandboxPool(0)


# --------------------------------------------------------------------------------------
# The corpus run by another caller: `nobody` ("userns" by default, "rlimits" opted in), and
# root without CAP_SYS_ADMIN ("landlock")
# --------------------------------------------------------------------------------------

CORPUS_SCRIPT = """\
import json, os, sys
sys.path.insert(0, sys.argv[1])
from teamrl.sandbox import Limits, SandboxPool, isolation_mode
from teamrl.sandbox.modes import _candidates, _probe
jobs = json.load(sys.stdin)
codes = [j["code"].replace("__CALLER_PID__", str(os.getpid())) for j in jobs]
auto = sys.argv[2] == "auto"
probes = {c: _probe(c, sys.executable) for c in _candidates()} if auto else {}
mode = isolation_mode() if auto else sys.argv[2]
with SandboxPool(max_workers=8, isolation=mode) as pool:
    results = pool.map(codes, limits=[Limits(**j["limits"]) for j in jobs])
print(json.dumps({"mode": mode, "probes": probes, "results": [r.__dict__ for r in results]}))
"""

# What escapes the weak mode, as measured (a change here must be a decision, not a surprise).
# The kill and ptrace cases (``skip``) are not run there: they would end the caller.
WRITE_ESCAPES = {
    *("write_tmp", "write_dev_shm", "write_marker_dir", "symlink_escape", "userns_remount"),
    *("write_via_os", "write_via_subprocess", "write_via_executable", "write_via_cwd"),
}
RLIMITS_ESCAPES = {
    *WRITE_ESCAPES,
    *("write_parent_dir", "overwrite_program"),
    *("proc_parent_environ", "proc_parent_fds", "proc_parent_cwd", "proc_parent_mem"),
    *("unix_socket_in_tmp", "abstract_unix_socket"),
    *("unix_datagram_to_host", "unix_datagram_to_abstract"),
}
# Escapes that start another process: in "rlimits" mode RLIMIT_NPROC counts every process
# and thread of the caller's uid (its pool's threads and the other programs included), so
# one of these may find no process to spare and fail on its own.
SPAWNING_ESCAPES = {"write_via_subprocess", "write_via_executable"}
AS_NOBODY = dict(user=65534, group=65534, extra_groups=[])


def corpus_in_caller(
    arena: Arena, package: str, isolation: str, mode: str, **caller
) -> tuple[str, dict, dict]:
    """Run the corpus (less what ``mode`` skips) from another process, started with the
    subprocess arguments ``caller`` (e.g. as `nobody`): the trainer whose pid the programs
    attack is that caller. (mode it got, the probes of "auto", {name: (case, limits, result)})."""
    cases = [case for case in CORPUS if mode not in case.skip]
    jobs = []
    for case in cases:
        code = (PRELUDE + case.code).replace("@TEST_PID@", "__CALLER_PID__")
        jobs.append(
            {"code": arena.fill(code, case.name), "limits": {**LIMITS.__dict__, **case.limits}}
        )
    argv = [reachable_python(), "-I", "-c", CORPUS_SCRIPT, package, isolation]
    done = subprocess.run(
        argv, input=json.dumps(jobs), capture_output=True, text=True, cwd="/", timeout=60, **caller
    )
    assert done.returncode == 0, done.stderr[-2000:]  # the caller survived its programs
    report = json.loads(done.stdout)
    results = [ExecResult(**r) for r in report["results"]]
    runs = {c.name: (c, Limits(**j["limits"]), r) for c, j, r in zip(cases, jobs, results)}
    return report["mode"], report["probes"], runs


def caller_violations(arena: Arena, runs: dict, mode: str, caller_uid: int) -> dict[str, list]:
    found = {}
    try:
        for name, (case, limits, r) in runs.items():
            if problems := violations(case, limits, r, arena, mode, caller_uid, fence_only=True):
                found[name] = problems
    finally:
        for case, _, r in runs.values():  # end what an escape left running (caller's, tagged)
            arena.forget(case.name)
            if r.stdout.startswith("UID ") and caller_uid != 0:
                for pid in tagged_processes(caller_uid, reported(r)[1], case.name):
                    os.kill(pid, signal.SIGKILL)
    return found


def assert_listeners_silent(arena: Arena) -> None:
    for listener in (arena.tcp, arena.unix, arena.tmp_socket, arena.abstract):
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become `nobody`")
def test_corpus_as_nobody_gets_userns_and_is_contained(arena, readable_package):
    arena.drain_listeners()
    mode, probes, runs = corpus_in_caller(arena, readable_package, "auto", "userns", **AS_NOBODY)
    assert (mode, probes) == ("userns", {"userns": None})  # never "rlimits" without an opt-in
    assert caller_violations(arena, runs, mode, 65534) == {}
    assert len(runs) == len(CORPUS)  # nothing skipped
    assert os.getpid() == arena.pid and current_env() == arena.env
    assert_listeners_silent(arena)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become `nobody`")
def test_corpus_as_nobody_in_the_weak_mode_escapes_as_documented(arena, readable_package):
    _, _, runs = corpus_in_caller(arena, readable_package, "rlimits", "rlimits", **AS_NOBODY)
    escaped = caller_violations(arena, runs, "rlimits", 65534)
    assert RLIMITS_ESCAPES - SPAWNING_ESCAPES <= set(escaped) <= RLIMITS_ESCAPES, " ".join(
        sorted(escaped)
    )
    # The seccomp filter holds here too: ptrace of the caller, loopback past the socket
    # guard, io_uring, keyrings, new namespaces (no other fence of this mode stops them).
    assert SECCOMP_CASES <= set(runs) and not SECCOMP_CASES & set(escaped)
    # every escape is a documented residual risk of the mode
    assert all("rlimits" in next(c for c in CORPUS if c.name == n).xfail for n in escaped)


def like_a_default_container() -> dict:
    """Subprocess arguments that start a root caller without CAP_SYS_ADMIN and
    CAP_SYS_PTRACE, like root in a default container: the capabilities leave the bounding
    set before exec, so the root process exec'd gets every capability but those, unshare()
    fails for real, and the disk watcher may read the program's /proc entries only as the
    program's uid."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, only called in the child

    def drop() -> None:
        for name, cap in (("CAP_SYS_ADMIN", 21), ("CAP_SYS_PTRACE", 19)):
            if prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), f"PR_CAPBSET_DROP {name}")

    return {"preexec_fn": drop}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
@pytest.mark.skipif(
    landlock.abi() < landlock.MIN_ABI, reason="no Landlock here: auto refuses to run (tested)"
)
def test_corpus_as_root_without_namespaces_gets_landlock_and_is_contained(arena):
    arena.drain_listeners()
    mode, probes, runs = corpus_in_caller(
        arena, REPO, "auto", "landlock", **like_a_default_container()
    )
    # The namespace probe failed for real, and auto took the Landlock fallback, not "setuid".
    assert list(probes) == ["namespaces", "landlock"] and probes["landlock"] is None, probes
    assert "unshare: Operation not permitted" in probes["namespaces"]
    assert mode == "landlock"
    assert len(runs) == len(CORPUS)  # nothing skipped
    escaped = caller_violations(arena, runs, mode, 0)
    # Only a documented residual risk may get through: reading world-readable files (the
    # test's home secret, where the home is world-readable). Every write and network case
    # that "setuid" let out is contained.
    assert set(escaped) <= {c.name for c in CORPUS if "landlock" in c.xfail}, escaped
    assert not set(escaped) & SETUID_ESCAPES
    assert os.getpid() == arena.pid and current_env() == arena.env
    assert_listeners_silent(arena)


# What escapes the "setuid" mode (root without namespaces, only by name), as measured.
SETUID_ESCAPES = {
    *WRITE_ESCAPES,
    *("unix_socket_in_tmp", "abstract_unix_socket"),
    *("unix_datagram_to_host", "unix_datagram_to_abstract"),
}


@pytest.mark.skipif(os.geteuid() != 0 or MODE == "setuid", reason="root; MODE covers setuid")
def test_corpus_in_the_setuid_mode_escapes_as_documented(arena):
    codes, limits = [], []
    for case in CORPUS:
        codes.append(arena.fill(PRELUDE + case.code, case.name))
        limits.append(Limits(**{**LIMITS.__dict__, **case.limits}))
    with SandboxPool(max_workers=8, isolation="setuid", python=reachable_python()) as pool:
        results = pool.map(codes, limits=limits)
    escaped = set()
    try:
        for case, lim, r in zip(CORPUS, limits, results):
            if violations(case, lim, r, arena, "setuid", fence_only=True):
                escaped.add(case.name)
    finally:
        for case in CORPUS:
            arena.forget(case.name)
    assert escaped == SETUID_ESCAPES, " ".join(sorted(escaped))  # none of SECCOMP_CASES
    assert all("setuid" in next(c for c in CORPUS if c.name == n).xfail for n in escaped)
    assert os.getpid() == arena.pid and current_env() == arena.env


# --------------------------------------------------------------------------------------
# A caller that is PID 1 (a container without an init) reaps what killed runs leave
# --------------------------------------------------------------------------------------

PID1_SCRIPT = """\
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from teamrl.sandbox import Limits, run_python
assert os.getpid() == 1, os.getpid()
programs = [
    "import time\\ntime.sleep(100)",
    "import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n    time.sleep(100)\\ntime.sleep(100)",
    "import subprocess, time\\nsubprocess.Popen(['sleep', '100'])\\ntime.sleep(100)",
]
modes = []
for isolation in sys.argv[2:]:
    for code in programs * 2:
        r = run_python(code, limits=Limits(wall_seconds=0.3), isolation=isolation, python=sys.executable)
        assert r.killed == "wall_time", r
    for _ in range(3):  # killed while it boots, before it could name its init
        run_python(programs[0], limits=Limits(wall_seconds=0.01), isolation=isolation, python=sys.executable)
    modes.append(isolation)
time.sleep(0.2)
zombies = []
for pid in os.listdir("/proc"):
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                zombies.append(int(pid))
    except (OSError, IndexError):
        pass
print(json.dumps({"modes": modes, "zombies": zombies}))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root")
@pytest.mark.parametrize("as_nobody", [False, True], ids=["root", "nobody"])
def test_no_zombies_when_the_caller_is_pid_1(as_nobody, readable_package):
    python = reachable_python()
    if as_nobody:  # root of its own user namespace: the sandbox picks "userns"
        unshare = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
        modes, user = ["auto"], dict(user=65534, group=65534, extra_groups=[])
    else:
        unshare = ["unshare", "--pid", "--fork", "--mount-proc"]
        modes, user = ["namespaces", "landlock", "setuid"], {}
    argv = [*unshare, python, "-I", "-c", PID1_SCRIPT, readable_package, *modes]
    done = subprocess.run(argv, capture_output=True, text=True, cwd="/", timeout=60, **user)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report == {"modes": modes, "zombies": []}


# --------------------------------------------------------------------------------------
# The authenticated report channel
# --------------------------------------------------------------------------------------

# A harness: the candidate's add(2, 3) is computed in a child without the channel; the
# expected value arrives on stdin, read by the trusted parent only after the fork.
JUDGE = (
    TRUSTED_PRELUDE
    + """
import sys
got = _teamrl_untrusted(SOURCE, "add(2, 3)")
expected = sys.stdin.read().strip()
_teamrl_report("PASS" if got == expected else "FAIL")
"""
)

CANDIDATES = {
    "correct": ("def add(a, b):\n    return a + b\n", "PASS\n"),
    "wrong": ("def add(a, b):\n    return a - b\n", "FAIL\n"),
    "prints_pass": ("print('PASS')\ndef add(a, b):\n    return 0\n", "FAIL\n"),
    "always_equal": (
        "class E:\n    __eq__ = lambda self, other: True\n    __hash__ = lambda self: 0\n"
        "def add(a, b):\n    return E()\n",
        "FAIL\n",
    ),
    "writes_every_fd": (
        "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'PASS\\n')\n"
        "    except OSError:\n        pass\ndef add(a, b):\n    return 0\n",
        "FAIL\n",
    ),
    "opens_parent_fds": (
        "import os\nfd_dir = f'/proc/{os.getppid()}/fd'\ntry:\n    names = os.listdir(fd_dir)\n"
        "except OSError:\n    names = [str(n) for n in range(64)]\nfor n in names:\n    try:\n"
        "        with open(f'{fd_dir}/{n}', 'w') as f:\n            f.write('PASS\\n')\n"
        "    except OSError:\n        pass\ndef add(a, b):\n    return 0\n",
        "FAIL\n",
    ),
    # every pipe of every process it may open (in "namespaces" /proc is the host's)
    "opens_every_fd": (
        "import os\nfor pid in os.listdir('/proc'):\n    try:\n"
        "        names = os.listdir(f'/proc/{pid}/fd')\n    except OSError:\n        continue\n"
        "    for n in names:\n        try:\n            fd = os.open(f'/proc/{pid}/fd/{n}', os.O_WRONLY)\n"
        "        except OSError:\n            continue\n        try:\n"
        "            os.write(fd, b'PASS\\n')\n        except OSError:\n            pass\n"
        "def add(a, b):\n    return 0\n",
        "FAIL\n",
    ),
    "reads_expected": (
        "import os, sys\nleak = sys.stdin.read() or os.environ.get('TEAMRL_REPORT_FD', '')\n"
        "try:\n    leak += open(f'/proc/{os.getppid()}/fd/0').read()\nexcept OSError:\n    pass\n"
        "def add(a, b):\n    return leak.strip()\n",
        "FAIL\n",
    ),
    "exits_early": ("import os\nprint('PASS', flush=True)\nos._exit(0)\n", "FAIL\n"),
}


def test_report_channel_cannot_be_forged():
    codes = [JUDGE.replace("SOURCE", repr(source)) for source, _ in CANDIDATES.values()]
    with SandboxPool(max_workers=4) as pool:
        futures = [pool.submit(c, stdin="5\n", limits=LIMITS, report=True) for c in codes]
        results = dict(zip(CANDIDATES, (f.result() for f in futures)))
    for name, (_, expected) in CANDIDATES.items():
        assert results[name].report == expected, (name, results[name])
    assert "PASS" in results["prints_pass"].stdout  # what a stdout parser would have believed
    # Without report=True there is no channel, and the variable is not set.
    plain = run_python("import os\nprint(os.environ.get('TEAMRL_REPORT_FD'))")
    assert (plain.stdout, plain.report) == ("None\n", "")


def test_weak_mode_only_when_asked_for(monkeypatch, caplog):
    from teamrl.sandbox import modes

    # Nothing strong works here (simulated) and nothing was asked for: a one-line error.
    monkeypatch.setattr(modes, "_modes", {})
    monkeypatch.setattr(modes, "_candidates", lambda: ["userns"])
    monkeypatch.setattr(modes, "_probe", lambda mode, exe: "user namespaces are disabled")
    monkeypatch.delenv(ISOLATION_ENV, raising=False)
    with pytest.raises(RuntimeError) as info:
        isolation_mode()
    message = str(info.value)
    assert "\n" not in message and "userns: user namespaces are disabled" in message
    assert f"{ISOLATION_ENV}=rlimits" in message and "max_user_namespaces" in message
    monkeypatch.setenv(ISOLATION_ENV, "chroot")
    with pytest.raises(ValueError, match=f"{ISOLATION_ENV}=chroot"):
        isolation_mode()
    # Asked for by name: taken, and logged once with its residual risks.
    monkeypatch.setattr(modes, "check_mode", lambda isolation: isolation)
    monkeypatch.setattr(modes, "_logged", set())
    monkeypatch.setenv(ISOLATION_ENV, "rlimits")
    with caplog.at_level("INFO", logger="teamrl.sandbox"):
        assert isolation_mode() == isolation_mode() == "rlimits"
    logged = [r for r in caplog.records if r.name == "teamrl.sandbox"]
    assert len(logged) == 1 and logged[0].levelname == "WARNING"
    assert "'rlimits'" in logged[0].getMessage() and "trainer" in logged[0].getMessage()


def test_strong_mode_is_logged_once(monkeypatch, caplog):
    from teamrl.sandbox import modes

    monkeypatch.setattr(modes, "_logged", set())
    monkeypatch.delenv(ISOLATION_ENV, raising=False)
    with caplog.at_level("INFO", logger="teamrl.sandbox"):
        run_python("pass")
        run_python("pass")
    logged = [r.getMessage() for r in caplog.records if r.name == "teamrl.sandbox"]
    assert logged == [f"sandbox isolation {MODE!r}; residual risks: {modes.RESIDUAL_RISKS[MODE]}"]


HOME_SCRIPT = """\
import json, sys
sys.path.insert(0, sys.argv[1])
from teamrl.sandbox import run_python
code = "import sys\\nprint(open(sys.argv[1]).read())"
r = run_python(code, args=[sys.argv[2]])
print(json.dumps([r.returncode, r.stdout, r.stderr.splitlines()[-1:]]))
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.isdir("/home"), reason="needs root to become `nobody`"
)
def test_userns_hides_the_callers_home(readable_package):
    # The program shares the caller's uid outside: only hiding the home keeps its files out.
    # (Not under /tmp, which is hidden anyway.)
    home = tempfile.mkdtemp(prefix="teamrl-home-", dir="/home")
    secret = os.path.join(home, "token")
    try:
        with open(secret, "w") as f:
            f.write("hunter2")
        for path in (home, secret):
            os.chown(path, 65534, 65534)
        os.chmod(secret, 0o600)
        argv = [reachable_python(), "-I", "-c", HOME_SCRIPT, readable_package, secret]
        env = {"PATH": os.environ["PATH"], "HOME": home}
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            cwd="/",
            env=env,
            timeout=30,
            user=65534,
            group=65534,
            extra_groups=[],
        )
        assert done.returncode == 0, done.stderr[-2000:]
        returncode, stdout, last = json.loads(done.stdout)
        assert returncode == 1 and "hunter2" not in stdout
        assert last[0].startswith("FileNotFoundError"), last
    finally:
        shutil.rmtree(home)
