"""What the sandboxed interpreter runs: ``python -I -S boot.py <status fd> main.py args...``.

The pieces are source text, joined by ``boot_code`` for the isolation mode. They run inside
the sandbox, standard library only.
"""

from __future__ import annotations

# The uid (and gid) a program sees in the "userns" mode: its own user namespace maps it to
# the caller's uid, which it shares with the trainer outside (see teamrl.sandbox.launch).
USERNS_UID = 1000

# "userns" mode, first: we are root of a user namespace that maps uid 0 to the caller. Not
# dumpable, so the program (same uid outside) can neither ptrace us nor open our /proc
# entries to borrow our capabilities.
_BOOT_USERNS_PRIVATE = """\
import ctypes
_libc = ctypes.CDLL(None, use_errno=True)
if _libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0
    raise OSError(ctypes.get_errno(), "sandbox boot: PR_SET_DUMPABLE")
"""

# Pid-namespace modes. We are the process the caller started, outside the new pid namespace;
# our first child is pid 1 of it (its init), and init forks the program. We report init's pid
# ("I<pid>") on <status fd>, so a caller that is PID 1 can reap init once both are killed.
# When the program ends, init reports its wait status ("S<status>") and exits, and the kernel
# then kills and reaps everything left in the namespace. If we die (the caller died), init
# exits too. Neither keeps the report channel (only the program's trusted harness may).
_BOOT_PIDNS = """\
_status = int(sys.argv[1])
_report = int(os.environ.get("TEAMRL_REPORT_FD", "-1"))
_me = os.pidfd_open(os.getpid())
_init = os.fork()
if _init:
    os.write(_status, b"I%d\\n" % _init)
    os.close(_status)
    if _report >= 0:
        os.close(_report)
    os.wait()
    os._exit(0)
@INIT@_program = os.fork()
if _program:
    if _report >= 0:
        os.close(_report)
    import select
    select.select([_me, os.pidfd_open(_program)], [], [])
    _pid, _st = os.waitpid(_program, os.WNOHANG)
    if _pid == _program:
        os.write(_status, b"S%d\\n" % _st)
    os._exit(0)
os.close(_status)
os.close(_me)
@PROGRAM@"""

# "userns" init: a /proc of the new pid namespace over the host's, so that the program sees
# only its own processes (the host's would be readable: same uid outside).
_USERNS_INIT = """\
if _libc.mount(b"proc", b"/proc", b"proc", 0x2 | 0x4 | 0x8, None) != 0:  # nosuid,nodev,noexec
    os.write(2, b"sandbox boot: cannot mount /proc: %d\\n" % ctypes.get_errno())
    os._exit(125)
"""

# "userns" program: a nested user namespace mapping @UID@ to our uid 0, every capability
# dropped, dumpable again (its own /proc/self). It has no capability over anything the outer
# namespace owns: its mounts (read-only), network, pid namespace.
_USERNS_PROGRAM = """\
if _libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
    raise OSError(ctypes.get_errno(), "sandbox boot: unshare(CLONE_NEWUSER)")
for _name, _text in (("setgroups", "deny"), ("uid_map", "@UID@ 0 1"), ("gid_map", "@UID@ 0 1")):
    with open("/proc/self/" + _name, "w") as _f:
        _f.write(_text)
class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
if _libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), (ctypes.c_uint32 * 6)()) != 0:
    raise OSError(ctypes.get_errno(), "sandbox boot: capset")
_libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE 1
del _CapHeader, _name, _text, _f
"""

# "userns" program, last: the seccomp filter (teamrl.sandbox.seccomp, its instructions as
# hex), now that the boot needs no more namespaces or mounts. no_new_privs, which it needs,
# was set before exec and is inherited.
_SECCOMP = """\
class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
_code = bytes.fromhex("@FILTER@")
_fprog = _Fprog(len(_code) // 8, _code)
_ulong = ctypes.c_ulong
if _libc.prctl(_ulong(22), _ulong(2), ctypes.byref(_fprog), _ulong(0), _ulong(0)) != 0:
    raise OSError(ctypes.get_errno(), "sandbox boot: seccomp filter")
del _Fprog, _code, _fprog, _ulong
"""

# Without a network namespace: refuse every socket family but AF_UNIX. socket.socket's
# __init__ looks up `_socket.socket.__init__` when called, so guarding the C class guards
# both; the guard initialises through the captured original (calling socket.socket from
# here would come back to the guard forever).
_BOOT_GUARD = """\
import _socket, socket
_CSocket = _socket.socket
class _NoNetwork(_CSocket):
    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        if family != socket.AF_UNIX:
            raise PermissionError(1, "network access is disabled in the sandbox")
        _CSocket.__init__(self, family, type, proto, fileno)
_socket.socket = _socket.SocketType = _NoNetwork
"""

# Run main.py as __main__ in a fresh module, with tracebacks that read as if it had been
# run directly (the hook drops this bootstrap's own frame). -S skips `site`, which is what
# defines exit() and quit(); model-written code uses them, so they are put back.
_BOOT_RUN = """\
import builtins
builtins.exit = builtins.quit = sys.exit
sys.argv = sys.argv[2:]
def _hook(kind, value, tb, _default=sys.excepthook, _boot_file=__file__):
    if tb is not None and tb.tb_frame.f_code.co_filename == _boot_file:
        tb = tb.tb_next
    _default(kind, value.with_traceback(tb), tb)
sys.excepthook = _hook
_boot, _main = sys.modules["__main__"], type(sys)("__main__")
_main.__file__ = sys.argv[0]
sys.modules["__main__"] = _main
with open(sys.argv[0], "rb") as _f:
    _code = compile(_f.read(), sys.argv[0], "exec", dont_inherit=True)
exec(_code, _main.__dict__)
"""


def boot_code(mode: str, network: bool, syscalls: bytes | None = None) -> str:
    """The boot script for ``mode``; ``syscalls``: ("userns") the seccomp filter's
    instructions, installed in the program's process just before it runs."""
    parts = ["import os, sys\n"]
    if mode == "userns":
        parts.append(_BOOT_USERNS_PRIVATE)
    if mode in ("namespaces", "userns"):
        userns = mode == "userns"
        program = _USERNS_PROGRAM.replace("@UID@", str(USERNS_UID)) if userns else ""
        if userns and syscalls is not None:
            program += _SECCOMP.replace("@FILTER@", syscalls.hex())
        if userns:
            program += "del _libc\n"
        pidns = _BOOT_PIDNS.replace("@INIT@", _USERNS_INIT if userns else "")
        parts.append(pidns.replace("@PROGRAM@", program))
    elif not network:
        parts.append(_BOOT_GUARD)
    parts.append(_BOOT_RUN)
    return "".join(parts)
