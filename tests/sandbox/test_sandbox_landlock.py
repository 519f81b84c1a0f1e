"""The "landlock" mode (root without namespaces): its seccomp filter, its Landlock ruleset,
each alone and together, and how ``auto`` comes to pick it (or refuses to run).

The hostile corpus in this mode, with a caller that really lacks CAP_SYS_ADMIN, is in
test_sandbox.py (``test_corpus_as_root_without_namespaces_gets_landlock_and_is_contained``).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile

import pytest

from teamrl.sandbox import (
    ISOLATION_ENV,
    ISOLATION_MODES,
    Limits,
    isolation_mode,
    landlock,
    linux,
    modes,
    run_python,
    seccomp,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOT = os.geteuid() == 0
ABI = landlock.abi()
HAS_LANDLOCK = ABI >= landlock.MIN_ABI and seccomp.machine() in seccomp.ARCHES
needs_landlock = pytest.mark.skipif(
    not (ROOT and HAS_LANDLOCK), reason=f"needs root and Landlock ABI >= 3 (here {ABI})"
)
EPERM, EACCES = errno.errorcode[errno.EPERM], errno.errorcode[errno.EACCES]


def reachable_python() -> str:
    """An interpreter whose installation other users can reach (the fresh uid execs it)."""
    for path in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if path and os.path.exists(path):
            exe, prefix = linux.interpreter(path)
            if linux.blocked_ancestor(prefix) is None:
                return exe
    raise AssertionError("no interpreter reachable by other users")


# --------------------------------------------------------------------------------------
# The seccomp filter, read instruction by instruction
# --------------------------------------------------------------------------------------


def run_filter(code: bytes, nr: int, arch: int, arg0: int = 0, *args: int) -> int:
    """What the kernel would do: a classic-BPF interpreter for the six opcodes the filter
    uses, on a ``struct seccomp_data`` (nr, arch, instruction pointer, six arguments)."""
    values = (arg0, *args, 0, 0, 0, 0, 0)[:6]
    data = struct.pack("=iIQ6Q", nr, arch, 0, *values)
    insns = [struct.unpack_from("=HBBI", code, i) for i in range(0, len(code), 8)]
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = insns[pc]
        if op == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc, pc = struct.unpack_from("=I", data, k)[0], pc + 1
        elif op == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            acc, pc = acc & k, pc + 1
        elif op == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[op]
            pc += 1 + (jt if taken else jf)


X86_64, AARCH64, I386 = 0xC000003E, 0xC00000B7, 0x40000003
ALLOW, KILL = 0x7FFF0000, 0x80000000
DENY, NOSYS = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
SIGCHLD, CLONE_NEWUSER, CLONE_NEWNET = 17, 0x10000000, 0x40000000
AF_UNIX, AF_INET, AF_NETLINK, AF_VSOCK = 1, 2, 16, 40


@pytest.mark.parametrize(
    "arch, sockets, nr, arg0, expected",
    [
        # x86_64: socket 41, socketpair 53, read 0, ptrace 101, clone 56, clone3 435
        ("x86_64", "none", 41, 0, DENY),
        ("x86_64", "all", 41, 0, ALLOW),
        ("x86_64", "none", 0, 0, ALLOW),
        ("x86_64", "all", 101, 0, DENY),
        ("x86_64", "none", 425, 0, DENY),  # io_uring_setup
        ("x86_64", "none", 29, 0, DENY),  # shmget
        ("x86_64", "none", 56, SIGCHLD, ALLOW),  # fork
        ("x86_64", "none", 56, SIGCHLD | CLONE_NEWUSER, DENY),
        ("x86_64", "none", 56, CLONE_NEWNET, DENY),
        ("x86_64", "none", 435, 0, NOSYS),
        ("x86_64", "none", 0x40000000 | 41, 0, DENY),  # x32 socket
        # "unix" (a network namespace fences them): AF_UNIX = 1 only, whatever the high bits
        ("x86_64", "unix", 41, AF_UNIX, ALLOW),
        ("x86_64", "unix", 41, (1 << 32) | AF_UNIX, ALLOW),
        ("x86_64", "unix", 41, AF_INET, DENY),
        ("x86_64", "unix", 41, AF_NETLINK, DENY),
        ("x86_64", "unix", 41, AF_VSOCK, DENY),
        ("x86_64", "unix", 53, AF_UNIX, ALLOW),  # socketpair
        ("x86_64", "unix", 250, 0, DENY),  # keyctl: the checks after the socket branch hold
        ("x86_64", "unix", 56, CLONE_NEWUSER, DENY),
        ("x86_64", "unix", 56, SIGCHLD, ALLOW),
        ("x86_64", "unix", 1, AF_INET, ALLOW),  # write(fd 2): the family test is socket's
        # aarch64: socket 198; 41 is pivot_root there, 56 openat
        ("aarch64", "none", 198, 0, DENY),
        ("aarch64", "none", 41, 0, DENY),
        ("aarch64", "none", 56, 0, ALLOW),
        ("aarch64", "none", 220, SIGCHLD, ALLOW),
        ("aarch64", "none", 220, CLONE_NEWNET, DENY),
        ("aarch64", "unix", 198, AF_UNIX, ALLOW),
        ("aarch64", "unix", 198, AF_INET, DENY),
        ("aarch64", "unix", 41, AF_UNIX, DENY),  # pivot_root, whatever its argument
    ],
)
def test_seccomp_filter_decisions(arch, sockets, nr, arg0, expected):
    audit_arch = {"x86_64": X86_64, "aarch64": AARCH64}[arch]
    assert run_filter(seccomp.program(arch, sockets), nr, audit_arch, arg0) == expected


SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET = 1, 2, 5
SOCK_NONBLOCK, SOCK_CLOEXEC = 0o4000, 0o2000000
AF_TIPC, SOL_SOCKET, SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE = 30, 1, 7, 8, 32
CLONE_THREAD, CLONE_FILES, CLONE_VM, CLONE_SIGHAND = 0x10000, 0x400, 0x100, 0x800
THREAD = CLONE_VM | CLONE_SIGHAND | CLONE_THREAD
EOPNOTSUPP = 0x00050000 | errno.EOPNOTSUPP


@pytest.mark.parametrize(
    "arch, sockets, watched, harness, call, args, expected",
    [
        # socketpair: unix only, in every policy; stream only in "landlock" ("none")
        ("x86_64", "all", False, False, "socketpair", (AF_TIPC, SOCK_SEQPACKET), DENY),
        ("x86_64", "unix", False, False, "socketpair", (AF_INET, SOCK_STREAM), DENY),
        ("x86_64", "unix", False, False, "socketpair", (AF_UNIX, SOCK_DGRAM), ALLOW),
        ("x86_64", "none", True, False, "socketpair", (AF_UNIX, SOCK_DGRAM), DENY),
        ("x86_64", "none", True, False, "socketpair", (AF_UNIX, SOCK_SEQPACKET), DENY),
        ("x86_64", "none", True, False, "socketpair", (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC), ALLOW),
        (
            "aarch64",
            "none",
            True,
            False,
            "socketpair",
            (AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK),
            ALLOW,
        ),
        ("aarch64", "none", True, False, "socketpair", (AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC), DENY),
        # socket buffers: not raised; other options (and other levels' option 7) pass
        ("x86_64", "unix", False, False, "setsockopt", (3, SOL_SOCKET, SO_SNDBUF), DENY),
        ("x86_64", "all", False, False, "setsockopt", (3, SOL_SOCKET, SO_RCVBUF), DENY),
        ("aarch64", "none", True, False, "setsockopt", (3, SOL_SOCKET, SO_SNDBUFFORCE), DENY),
        ("x86_64", "all", False, False, "setsockopt", (3, SOL_SOCKET, 2), ALLOW),  # REUSEADDR
        ("x86_64", "all", False, False, "setsockopt", (3, 6, SO_SNDBUF), ALLOW),  # TCP level
        # memory in no RSS, and IPC that outlives a run: refused everywhere
        ("x86_64", "all", False, False, "memfd_create", (), DENY),
        ("aarch64", "unix", False, False, "memfd_create", (), DENY),
        ("x86_64", "unix", False, False, "memfd_secret", (), DENY),
        ("x86_64", "unix", False, False, "mq_open", (), DENY),
        ("aarch64", "unix", False, False, "mq_timedsend", (), DENY),
        # what hides disk from the watcher: refused where it keeps the bound, only there
        ("x86_64", "unix", False, False, "fallocate", (), ALLOW),
        ("x86_64", "unix", True, False, "fallocate", (), EOPNOTSUPP),
        ("aarch64", "none", True, True, "fallocate", (), EOPNOTSUPP),
        ("x86_64", "unix", False, False, "sendmsg", (), ALLOW),
        ("x86_64", "unix", True, False, "sendmsg", (), DENY),
        ("aarch64", "none", True, False, "sendmmsg", (), DENY),
        ("x86_64", "unix", False, False, "prctl", (4, 0), ALLOW),  # PR_SET_DUMPABLE
        ("x86_64", "unix", True, False, "prctl", (4, 0), DENY),
        ("x86_64", "unix", True, True, "prctl", (4, 0), ALLOW),  # a judging harness
        ("aarch64", "none", True, False, "prctl", (4, 1), DENY),
        ("x86_64", "none", True, False, "prctl", (15, 0), ALLOW),  # PR_SET_NAME
        # a thread shares its process's descriptor table (the watcher reads that one)
        ("x86_64", "unix", False, False, "clone", (THREAD | CLONE_FILES,), ALLOW),
        ("x86_64", "none", True, False, "clone", (THREAD,), DENY),
        ("aarch64", "all", False, False, "clone", (THREAD,), DENY),
        ("x86_64", "none", True, False, "clone", (CLONE_VM | SIGCHLD,), ALLOW),  # vfork-like
    ],
)
def test_seccomp_filter_decisions_on_arguments(
    arch, sockets, watched, harness, call, args, expected
):
    audit_arch = {"x86_64": X86_64, "aarch64": AARCH64}[arch]
    code = seccomp.program(arch, sockets, watched, harness)
    nr = seccomp.syscall_number(call, arch)
    assert run_filter(code, nr, audit_arch, *args) == expected


def test_seccomp_filter_kills_another_abi():
    # int 0x80 from an x86_64 process: i386 numbers (102 is socketcall there)
    assert run_filter(seccomp.program("x86_64", "none"), 102, I386) == KILL
    assert run_filter(seccomp.program("x86_64", "unix"), 102, I386) == KILL
    assert run_filter(seccomp.program("aarch64", "all"), 198, X86_64) == KILL


def test_socket_policy_per_mode():
    assert seccomp.socket_policy("landlock", network=False) == "none"
    assert seccomp.socket_policy("namespaces", network=False) == "unix"
    assert seccomp.socket_policy("userns", network=False) == "unix"
    # the weak modes: the family their Python socket guard allows, now for every process
    assert seccomp.socket_policy("setuid", network=False) == "unix"
    assert seccomp.socket_policy("rlimits", network=False) == "unix"
    assert {seccomp.socket_policy(m, network=True) for m in ISOLATION_MODES} == {"all"}
    with pytest.raises(ValueError, match="sockets: expected one of"):
        seccomp.program("x86_64", "inet")


HEADERS = {
    "x86_64": ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"],
    "aarch64": ["/usr/include/asm-generic/unistd.h"],
}


@pytest.mark.parametrize("arch", list(seccomp.ARCHES))
def test_seccomp_numbers_match_the_kernel_headers(arch):
    path = next((p for p in HEADERS[arch] if os.path.exists(p)), None)
    if path is None:
        pytest.skip(f"no kernel headers for {arch}")
    with open(path) as f:
        found = dict(re.findall(r"#define __NR_(\w+)\s+(\d+)\b", f.read()))
    for name in (*seccomp._SYSCALLS, *seccomp._SHARED):
        assert int(found[name]) == seccomp.syscall_number(name, arch), name


# --------------------------------------------------------------------------------------
# Each layer alone, as root (no file permission gets in the way): what it refuses by itself
# --------------------------------------------------------------------------------------

# Both scripts below: "ok", or the name of the errno a call failed with.
ATTEMPT = """\
def attempt(what):
    try:
        what()
        return "ok"
    except OSError as exc:
        return errno.errorcode[exc.errno]
"""

LAYER_SCRIPT = """\
import ctypes, errno, json, os, socket, sys
sys.path.insert(0, sys.argv[1])
from teamrl.sandbox import landlock, linux, seccomp
layer, network, inside, outside, tcp_port, abstract = sys.argv[2:8]
network = network == "1"
libc = linux.libc()
libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
if layer == "landlock":
    landlock.restrict_self(landlock.ruleset(inside, network))
else:
    seccomp.Filter("all" if network else "none").install()
@ATTEMPT@def connect(family, address):
    with socket.socket(family) as s:
        s.connect(address)
def bind_tcp():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
def write(path):
    with open(path, "w") as f:
        f.write("x")
def unshare():
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), "unshare")
print(json.dumps({
    "tcp_connect": attempt(lambda: connect(socket.AF_INET, ("127.0.0.1", int(tcp_port)))),
    "tcp_bind": attempt(bind_tcp),
    "abstract_connect": attempt(lambda: connect(socket.AF_UNIX, "\\0" + abstract)),
    "signal_parent": attempt(lambda: os.kill(os.getppid(), 0)),
    "write_inside": attempt(lambda: write(os.path.join(inside, "f"))),
    "write_outside": attempt(lambda: write(os.path.join(outside, "f"))),
    "truncate_outside": attempt(lambda: os.truncate(os.path.join(outside, "keep"), 0)),
    "rename_out": attempt(lambda: os.rename(os.path.join(inside, "f"), os.path.join(outside, "g"))),
    "unshare": attempt(unshare),
}))
""".replace("@ATTEMPT@", ATTEMPT)


def confined_as_root(layer: str, network: bool) -> dict[str, str]:
    """Run LAYER_SCRIPT (as root) under one layer; {probe: "ok" or the errno's name}."""
    inside, outside = tempfile.mkdtemp(), tempfile.mkdtemp()
    tcp, abstract = socket.socket(), socket.socket(socket.AF_UNIX)
    name = f"teamrl-layer-{os.getpid()}-{layer}-{network}"
    try:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(4)
        abstract.bind("\0" + name)
        abstract.listen(4)
        with open(os.path.join(outside, "keep"), "w") as f:
            f.write("keep")
        port = str(tcp.getsockname()[1])
        argv = [sys.executable, "-I", "-c", LAYER_SCRIPT, REPO, layer, str(int(network))]
        argv += [inside, outside, port, name]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr[-2000:]
        with open(os.path.join(outside, "keep")) as f:
            assert (f.read() == "keep") == (layer == "landlock")
        return json.loads(done.stdout)
    finally:
        tcp.close()
        abstract.close()
        shutil.rmtree(inside)
        shutil.rmtree(outside)


@pytest.mark.skipif(not (ROOT and ABI >= 6), reason="needs root and Landlock ABI >= 6")
def test_landlock_alone_fences_writes_tcp_abstract_sockets_and_signals():
    assert confined_as_root("landlock", network=False) == {
        "tcp_connect": EACCES,
        "tcp_bind": EACCES,
        "abstract_connect": EPERM,
        "signal_parent": EPERM,
        "write_inside": "ok",
        "write_outside": EACCES,
        "truncate_outside": EACCES,
        "rename_out": EACCES,  # (no right to make a file there)
        "unshare": "ok",  # (seccomp's part)
    }
    opened = confined_as_root("landlock", network=True)
    assert (opened["tcp_connect"], opened["tcp_bind"], opened["abstract_connect"]) == (
        "ok",
        "ok",
        "ok",
    )
    assert (opened["signal_parent"], opened["write_outside"]) == (EPERM, EACCES)


@pytest.mark.skipif(
    not ROOT or seccomp.machine() not in seccomp.ARCHES, reason="needs root and a known arch"
)
def test_seccomp_alone_refuses_sockets_and_namespaces():
    assert confined_as_root("seccomp", network=False) == {
        "tcp_connect": EPERM,
        "tcp_bind": EPERM,
        "abstract_connect": EPERM,
        "signal_parent": "ok",  # (Landlock's part, and the fresh uid's)
        "write_inside": "ok",
        "write_outside": "ok",
        "truncate_outside": "ok",
        "rename_out": "ok",
        "unshare": EPERM,
    }
    opened = confined_as_root("seccomp", network=True)
    assert (opened["tcp_connect"], opened["abstract_connect"], opened["unshare"]) == (
        "ok",
        "ok",
        EPERM,
    )


# --------------------------------------------------------------------------------------
# The mode: a fresh uid under both layers; ordinary programs still work
# --------------------------------------------------------------------------------------

MODE_SCRIPT = """\
import ctypes, errno, json, os, socket, subprocess, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
outside = sys.argv[1]
def call(fn, *args):
    return "ok" if fn(*args) >= 0 else errno.errorcode[ctypes.get_errno()]
@ATTEMPT@def work():
    with open("a", "w") as f:
        f.write("x")
    os.mkdir("d")
    os.rename("a", "d/b")
    os.symlink("d/b", "s")
    os.link("d/b", "h")
    os.truncate("h", 0)
    with open(os.devnull, "w") as f:
        f.write("x")
def threads():
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
print(json.dumps({
    "work": attempt(work),
    "subprocess": subprocess.run(["true"]).returncode,
    "threads": attempt(threads),
    "socketpair": attempt(socket.socketpair),
    "inet": call(libc.socket, 2, 1, 0),
    "unix": call(libc.socket, 1, 1, 0),
    "io_uring": call(libc.syscall, 425, 8, ctypes.create_string_buffer(120)),
    "ptrace": call(libc.ptrace, 16, os.getppid(), None, None),
    "shmget": call(libc.shmget, 0, 4096, 0o1666),
    "write_outside": attempt(lambda: open(os.path.join(outside, "f"), "w")),
    "truncate_outside": attempt(lambda: os.truncate(os.path.join(outside, "keep"), 0)),
    "link_out": attempt(lambda: os.link("d/b", os.path.join(outside, "l"))),
    "mkfifo_outside": attempt(lambda: os.mkfifo(os.path.join(outside, "p"))),
}))
""".replace("@ATTEMPT@", ATTEMPT)


@needs_landlock
def test_landlock_mode_fences_and_ordinary_programs_work():
    outside = tempfile.mkdtemp(dir="/tmp")
    try:
        os.chmod(outside, 0o777)  # only the sandbox may stop a write here
        keep = os.path.join(outside, "keep")
        with open(keep, "w") as f:
            f.write("keep")
        os.chmod(keep, 0o666)
        r = run_python(
            MODE_SCRIPT,
            args=[outside],
            isolation="landlock",
            python=reachable_python(),
            limits=Limits(wall_seconds=20),
        )
        assert r.ok, r
        assert json.loads(r.stdout) == {
            "work": "ok",
            "subprocess": 0,
            "threads": "ok",
            "socketpair": "ok",
            "inet": EPERM,
            "unix": EPERM,
            "io_uring": EPERM,
            "ptrace": EPERM,
            "shmget": EPERM,
            "write_outside": EACCES,
            "truncate_outside": EACCES,
            "link_out": EACCES,
            "mkfifo_outside": EACCES,
        }
        assert sorted(os.listdir(outside)) == ["keep"]
        with open(keep) as f:
            assert f.read() == "keep"
    finally:
        shutil.rmtree(outside)


@needs_landlock
def test_landlock_mode_with_the_network_allowed():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 5).sendall(b'hi')"
        limits = Limits(network=True, wall_seconds=20)
        r = run_python(code, isolation="landlock", python=reachable_python(), limits=limits)
        assert r.ok, r
        conn, _ = listener.accept()
        with conn:
            assert conn.recv(2) == b"hi"


# --------------------------------------------------------------------------------------
# What auto picks as root without namespaces, and what it refuses
# --------------------------------------------------------------------------------------


@pytest.fixture
def fresh_modes(monkeypatch):
    """No cached choice, nothing logged yet, no mode forced; the namespace probe fails (as
    for root without CAP_SYS_ADMIN); every other probe really runs."""
    real_probe = modes._probe
    monkeypatch.setattr(modes, "_modes", {})
    monkeypatch.setattr(modes, "_logged", set())
    monkeypatch.delenv(ISOLATION_ENV, raising=False)

    def probe(mode: str, exe: str) -> str | None:
        if mode == "namespaces":
            return "unshare: Operation not permitted (simulated)"
        return real_probe(mode, exe)

    monkeypatch.setattr(modes, "_probe", probe)
    return monkeypatch


@needs_landlock
def test_auto_without_namespaces_picks_landlock(fresh_modes, caplog):
    with caplog.at_level("INFO", logger="teamrl.sandbox"):
        assert isolation_mode(reachable_python()) == "landlock"
    logged = [r for r in caplog.records if r.name == "teamrl.sandbox"]
    assert [r.levelname for r in logged] == ["INFO"]
    assert modes.RESIDUAL_RISKS["landlock"] in logged[0].getMessage()


@pytest.mark.skipif(not ROOT or not linux.in_initial_userns(), reason="needs real root")
@pytest.mark.parametrize("abi", [0, 2])
def test_auto_without_namespaces_or_landlock_refuses_in_one_line(fresh_modes, abi):
    fresh_modes.setattr(landlock, "abi", lambda: abi)
    with pytest.raises(RuntimeError) as info:
        isolation_mode(reachable_python())
    message = str(info.value)
    found = f"ABI {abi}" if abi else "no Landlock"
    assert "\n" not in message
    assert "namespaces: unshare: Operation not permitted (simulated)" in message
    assert "landlock: sandbox: isolation 'landlock' needs Landlock ABI >= 3" in message
    assert f"this kernel has {found}" in message and "CAP_SYS_ADMIN" in message
    assert message.endswith(f"or accept the weak mode with {ISOLATION_ENV}=setuid")


@pytest.mark.skipif(not ROOT, reason="needs root")
def test_landlock_by_name_without_support_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(landlock, "abi", lambda: 0)
    with pytest.raises(RuntimeError, match=r"^sandbox: isolation 'landlock' needs Landlock ABI"):
        run_python("pass", isolation="landlock", python=reachable_python())
    monkeypatch.setattr(seccomp, "machine", lambda: "riscv64")
    with pytest.raises(RuntimeError, match="no seccomp filter for machine 'riscv64'"):
        run_python("pass", isolation="landlock", python=reachable_python())


def test_the_weak_modes_need_the_seccomp_filter_too(monkeypatch):
    # Every mode installs the filter, so a machine without one refuses the weak mode this
    # process may use (as root "setuid", else "rlimits") in one line, before any program.
    mode = "setuid" if ROOT else "rlimits"
    monkeypatch.setattr(seccomp, "machine", lambda: "riscv64")
    why = f"isolation {mode!r} has no seccomp filter for machine 'riscv64' (known: x86_64, aarch64)"
    assert modes.mode_problem(mode) == why
    with pytest.raises(RuntimeError, match=f"^sandbox: {re.escape(why)}$"):
        run_python("pass", isolation=mode, python=reachable_python())


def test_landlock_needs_root(monkeypatch):
    # The fresh uid needs root (CAP_SETUID); another user gets "userns" instead.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ValueError, match="'landlock' needs root, running as uid 1000"):
        modes.check_mode("landlock")


@pytest.mark.skipif(not ROOT, reason="needs root")
def test_setuid_is_weak_and_warned_about(monkeypatch, caplog):
    monkeypatch.setattr(modes, "_logged", set())
    with caplog.at_level("INFO", logger="teamrl.sandbox"):
        r = run_python("print(1)", isolation="setuid", python=reachable_python())
    assert r.stdout == "1\n"
    logged = [r for r in caplog.records if r.name == "teamrl.sandbox"]
    assert [r.levelname for r in logged] == ["WARNING"]
    assert "'setuid'" in logged[0].getMessage() and "WEAK" in logged[0].getMessage()
