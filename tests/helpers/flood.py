"""A flood of connections from another user: a child forked from the calling process, dropped
to uid/gid 65534 (nobody) with os.setgid/os.setuid, that opens connections to an address and
holds them, each sending nothing or half a request, and says how many the server has closed.

The child is driven over two pipes, one command a line; it uses only what is imported here
(it is forked from a process with threads, so it takes no lock another thread may hold) and
leaves with os._exit. It leaves too when its parent goes (the command pipe ends).
"""

from __future__ import annotations

import os
import resource
import select
import socket
import time

NOBODY = 65534
# half a request: its line and part of its headers (whole headers without the key would be
# answered 401 at once, and the connection closed)
HALF = b"POST /e/x/v1/chat/completions HTTP/1.1\r\nHost: flood\r\nContent-Le"


class Flood:
    """``Flood(host, port)`` forks the child; ``open(n, "idle" | "half")`` opens n more
    connections and returns the uid they were opened as; ``closed()`` counts those the
    server has closed; ``wait_closed(n)`` waits (up to ``timeout`` seconds in all, polling)
    until at least n are; ``stop()`` ends the child."""

    def __init__(self, host: str, port: int):
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            code = 1
            try:
                os.close(cmd_w)
                os.close(out_r)
                _child(host, port, cmd_r, out_w)
                code = 0
            finally:
                os._exit(code)
        os.close(cmd_r)
        os.close(out_w)
        self.pid, self._cmd, self._out = pid, os.fdopen(cmd_w, "w"), os.fdopen(out_r, "r")

    def _ask(self, line: str, timeout: float = 120.0) -> str:
        self._cmd.write(line + "\n")
        self._cmd.flush()
        ready, _, _ = select.select([self._out], [], [], timeout)
        if not ready:
            raise TimeoutError(f"the flood child did not answer {line!r} in {timeout:g} s")
        answer = self._out.readline().strip()
        if not answer or answer.startswith("error"):
            raise RuntimeError(f"the flood child failed on {line!r}: {answer or 'it exited'}")
        return answer

    def open(self, n: int, kind: str) -> int:
        return int(self._ask(f"open {n} {kind}").split()[1])

    def closed(self) -> int:
        return int(self._ask("closed"))

    def wait_closed(self, n: int, timeout: float = 120.0) -> int:
        deadline = time.monotonic() + timeout
        seen = self.closed()
        while seen < n and time.monotonic() < deadline:
            time.sleep(0.05)
            seen = self.closed()
        return seen

    def stop(self) -> None:
        if self.pid:
            try:
                self._cmd.write("exit\n")
                self._cmd.flush()
            except OSError:
                pass
            self._cmd.close()
            self._out.close()
            os.waitpid(self.pid, 0)
            self.pid = 0


def _child(host: str, port: int, cmd_r: int, out_w: int) -> None:
    # hold none of the parent's descriptors (its servers' connections would not close)
    low = 3
    for fd in sorted((cmd_r, out_w)):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks: list[socket.socket] = []
    closed: set[int] = set()  # indices of the connections the server has closed
    pending = b""
    while True:
        chunk = os.read(cmd_r, 4096)
        if not chunk:
            return  # the parent has gone
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            words = line.decode().split()
            if words[0] == "exit":
                return
            try:
                if words[0] == "open":
                    for _ in range(int(words[1])):
                        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                        s.settimeout(30)
                        s.connect((host, port))
                        s.settimeout(None)  # blocking: MSG_DONTWAIT then answers at once
                        socks.append(s)
                        if words[2] == "half":
                            try:
                                s.sendall(HALF)
                            except OSError:  # already closed by the server
                                closed.add(len(socks) - 1)
                    answer = f"ok {os.getuid()}"
                else:  # closed
                    for i, s in enumerate(socks):
                        if i not in closed and _was_closed(s):
                            closed.add(i)
                    answer = str(len(closed))
            except Exception as err:  # said to the parent, which fails the test with it
                answer = f"error {type(err).__name__}: {err}"
            os.write(out_w, answer.encode() + b"\n")


def _was_closed(s: socket.socket) -> bool:
    try:
        while True:
            if not s.recv(65536, socket.MSG_DONTWAIT):
                return True  # the server's FIN
    except BlockingIOError:
        return False  # open, nothing (more) to read
    except OSError:
        return True  # reset (RST) by the server
