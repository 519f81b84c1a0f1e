"""An authenticated result channel: what a trusted harness reports cannot be forged.

Threat model. A harness that judges model-written code must not trust anything the code can
write: stdout, stderr, the exit status and files are all the program's (it can print a fake
"all tests passed" line, exit 0 after printing, or patch the harness's own functions when it
shares their interpreter). ``run_python(code, report=True)`` therefore opens one more pipe,
the report channel, and returns what was written on it as ``ExecResult.report``; nothing the
program prints can get there. Its write end is inherited by the sandboxed interpreter under
the number in ``$TEAMRL_REPORT_FD`` and must be closed before untrusted code runs.

``TRUSTED_PRELUDE`` (source to put first in ``code``) does that. It takes the channel and
drops the variable, makes its process non-dumpable (so a process of the same uid can neither
ptrace it nor open its ``/proc/<pid>/fd``, ``mem`` or ``environ``), and in every child it
forks with ``os.fork`` (where the untrusted code runs) first points the channel's number at
``/dev/null``, then makes the child dumpable again and installs a seccomp filter of its own
that refuses ``PR_SET_DUMPABLE``: where no tmpfs bounds the disk, the watcher reads the
descriptors of the run's processes, which it cannot do for a non-dumpable one
(``teamrl.sandbox.disk``), and a child may not hide from it. It defines

* ``_teamrl_report(line)``: write one line on the channel;
* ``_teamrl_untrusted(source, probe, limit)``: run ``source`` (untrusted) in a forked child
  that has closed the channel and standard input, then evaluate the expression ``probe``
  there; returns ``str(value)`` as the child sent it back through a pipe (at most ``limit``
  bytes; ``None`` if the child sent nothing: it crashed, exited early or timed out).

What the child sends is data from the attacker: the trusted parent compares it (by type and
value, after parsing) with expected values it reads only after the fork (e.g. from stdin,
which the child closed first), so they were never in the child's memory, and it decides
pass/fail and writes the verdict on the channel. Forging a pass then needs the expected
value itself. Only the boot processes and the trusted parent hold the write end, and the
boot processes close it before the program starts. The pipe belongs to the caller: under a
fresh uid ("namespaces", "landlock", "setuid") the program cannot reopen it through
``/proc``, and in "userns" it sees only its own pid namespace's ``/proc``. Not covered: the
weak "rlimits" mode (same uid, host ``/proc``: the program can reopen the caller's end of
the pipe), a harness that puts expected values in ``code`` (main.py is readable), or one
that evaluates the program in its own process.
"""

from __future__ import annotations

REPORT_FD_ENV = "TEAMRL_REPORT_FD"

TRUSTED_PRELUDE = """\
import ctypes as _ctypes, os as _os, struct as _struct, sys as _sys
_teamrl_channel = int(_os.environ.pop("TEAMRL_REPORT_FD"))
if _ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0
    raise SystemExit("trusted prelude: cannot make the harness non-dumpable")
def _teamrl_forked(parent=_os.getpid()):
    if _os.getppid() != parent:  # only the harness's own children
        return
    null = _os.open(_os.devnull, _os.O_WRONLY)  # the channel first: then the child is dumpable
    _os.dup2(null, _teamrl_channel)
    _os.close(null)
    # Classic BPF: prctl(PR_SET_DUMPABLE, ...) gets EPERM, every other call passes.
    prctl = {"x86_64": 157, "aarch64": 167}.get(_os.uname().machine, 0xFFFFFFFF)
    code = b"".join(_struct.pack("=HBBI", *i) for i in (
        (0x20, 0, 0, 0), (0x15, 0, 3, prctl), (0x20, 0, 0, 16), (0x15, 0, 1, 4),
        (0x06, 0, 0, 0x00050001), (0x06, 0, 0, 0x7FFF0000)))
    class Fprog(_ctypes.Structure):
        _fields_ = [("len", _ctypes.c_ushort), ("filter", _ctypes.c_char_p)]
    libc, ulong = _ctypes.CDLL(None), _ctypes.c_ulong
    program = Fprog(len(code) // 8, code)
    if libc.prctl(4, 1, 0, 0, 0) != 0 or libc.prctl(
        ulong(22), ulong(2), _ctypes.byref(program), ulong(0), ulong(0)
    ) != 0:
        _os.write(2, b"trusted prelude: cannot keep a forked child dumpable\\n")
        _os._exit(70)
_os.register_at_fork(after_in_child=_teamrl_forked)
def _teamrl_report(line):
    data = (str(line).replace("\\n", " ") + "\\n").encode()
    while data:
        data = data[_os.write(_teamrl_channel, data):]
def _teamrl_untrusted(source, probe, limit=65536):
    read_end, write_end = _os.pipe()
    pid = _os.fork()
    if pid == 0:
        try:
            _os.close(_teamrl_channel)
            _os.close(read_end)
            _null = _os.open(_os.devnull, _os.O_RDONLY)
            _os.dup2(_null, 0)
            _os.close(_null)
            namespace = {"__name__": "__main__", "__builtins__": __builtins__}
            exec(compile(source, "solution.py", "exec"), namespace)
            value = str(eval(probe, namespace)).encode()
            while value:
                value = value[_os.write(write_end, value):]
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            for stream in (_sys.stdout, _sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
            _os._exit(0)
    _os.close(write_end)
    chunks, size = [], 0
    while size <= limit and (chunk := _os.read(read_end, 65536)):
        chunks.append(chunk)
        size += len(chunk)
    _os.close(read_end)
    _os.waitpid(pid, 0)
    return b"".join(chunks)[:limit].decode(errors="replace") if chunks else None
"""
