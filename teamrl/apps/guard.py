"""The endpoint under load: what keeps a flood of local connections from taking the training
process's descriptors.

Any local user can open connections to the endpoint's port, with a key or without one. Each
connection holds a file descriptor of the training process; unbounded, a thousand idle ones
exhaust the common soft limit of 1,024, and the trainer can no longer open a checkpoint file
or a pipe. Three bounds, kept on the server's event loop (one thread, so no lock):

- a cap on open connections (``endpoint.max_connections``, never more than half the
  open-file limit). A connection past the cap closes one at once: the oldest connection that
  holds no whole request (idle, half-sent, or kept alive between calls) makes way for it;
  when every connection holds a request, the new one is closed. A call sends its whole
  request as soon as it connects and then holds it, so it is never the one to make way; a
  flood only displaces its own oldest connections and cannot lock the episodes out.
- a deadline for a whole request (``endpoint.request_timeout``): a connection that has not
  sent its request line, headers and body within it, counted from its opening or from its
  previous reply, is closed. A request that is whole waits for its batch without a deadline.
- the soft open-file limit (RLIMIT_NOFILE) raised to the hard one while an endpoint serves,
  and put back when the last one stops, so that the cap leaves the trainer the other half.

Whether a connection holds a whole request is read from its HTTP parser (``h11``'s state of
the client's side), in uvicorn's h11 protocol, which this module extends by three hooks:
a connection made, lost, and a reply sent (a new request cycle). Accept errors (EMFILE and its
kin, which asyncio reports again at every retry) and the cap's refusals are logged once.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import threading
from collections.abc import Callable
from typing import Any

from teamrl.config.endpoint import EndpointConfig

log = logging.getLogger("teamrl.apps.endpoint")

BACKLOG = 128  # the listen queue, and so the most connections asyncio accepts in one go


# --- the open-file limit -------------------------------------------------------------------------

_files_lock = threading.Lock()
_files_users = 0  # endpoints serving now
_files_saved: int | None = None  # the soft limit before the first of them started


def raise_open_files() -> int:
    """Raise the soft open-file limit to the hard one for an endpoint that starts serving;
    returns the soft limit now. The first endpoint remembers the limit it found, which
    ``restore_open_files`` puts back when the last one stops."""
    global _files_users, _files_saved
    with _files_lock:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if _files_users == 0:
            _files_saved = soft
        _files_users += 1
        if soft != hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            except (ValueError, OSError):  # an unlimited hard limit the kernel caps lower
                pass
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def restore_open_files() -> None:
    """One endpoint has stopped; the last one puts the soft limit back."""
    global _files_users, _files_saved
    with _files_lock:
        _files_users = max(0, _files_users - 1)
        if _files_users or _files_saved is None:
            return
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(_files_saved, hard), hard))
        except (ValueError, OSError):
            pass
        _files_saved = None


def connection_cap(limits: EndpointConfig, open_files: int) -> int:
    """``endpoint.max_connections``, and at most half the open-file limit ``open_files``."""
    if open_files == resource.RLIM_INFINITY or open_files <= 0:
        return limits.max_connections
    return max(1, min(limits.max_connections, open_files // 2))


# --- the connections -----------------------------------------------------------------------------


class ConnectionGuard:
    """The open connections of one endpoint, their cap and their deadlines. ``limits`` is read
    at each use, so new limits take effect on the next connection or request cycle."""

    def __init__(self, limits: Callable[[], EndpointConfig], open_files: int):
        self.limits, self.open_files = limits, open_files
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, once it serves
        self.accept_errors = 0  # accept() failures (out of descriptors or memory)
        self.refused = 0  # new connections closed at the cap, every connection holding a request
        self.evicted = 0  # connections without a whole request closed to make way
        self.expired = 0  # connections closed at their deadline
        self._open: dict[Any, asyncio.TimerHandle | None] = {}  # oldest cycle first
        self._served: set[Any] = set()  # admitted and not yet lost
        self._said: set[str] = set()

    @property
    def cap(self) -> int:
        return connection_cap(self.limits(), self.open_files)

    def admit(self, conn: Any) -> bool:
        """Whether a new connection is served: under the cap it is; at the cap the oldest one
        without a whole request is closed for it, or, when there is none, it is refused."""
        while len(self._open) >= self.cap:
            victim = next((c for c in self._open if not holds_request(c)), None)
            if victim is None:
                self.refused += 1
                self._once(
                    "cap",
                    f"the app endpoint closed a new connection: {len(self._open)} connections "
                    f"are open, each holding a request (endpoint.max_connections, at most half "
                    f"the open-file limit: {self.cap}); raise endpoint.max_connections if the "
                    "app's episodes open more at once",
                )
                return False
            self.evicted += 1
            self._drop(victim)
            victim.transport.abort()
        self._open[conn] = None
        self._served.add(conn)
        self.arm(conn)
        return True

    def arm(self, conn: Any) -> None:
        """A new request cycle of ``conn`` (its opening, or a reply sent): it has
        ``request_timeout`` seconds to send a whole request, and is the newest to make way."""
        if conn not in self._open:
            return
        timer = self._open.pop(conn)
        if timer is not None:
            timer.cancel()
        loop = self.loop or asyncio.get_running_loop()
        self._open[conn] = loop.call_later(self.limits().request_timeout, self._expire, conn)

    def forget(self, conn: Any) -> bool:
        """``conn`` is lost; returns whether it was served (admitted)."""
        served = conn in self._served
        self._served.discard(conn)
        self._drop(conn)
        return served

    def _drop(self, conn: Any) -> None:
        timer = self._open.pop(conn, None)
        if timer is not None:
            timer.cancel()

    def _expire(self, conn: Any) -> None:
        if conn in self._open and not holds_request(conn) and not conn.transport.is_closing():
            self.expired += 1
            self._drop(conn)
            conn.transport.close()
        elif conn in self._open:
            self._open[conn] = None  # whole: the reply, once sent, arms the next deadline

    # --- the event loop's errors ---------------------------------------------------------------

    def loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The server loop's exception handler: accept errors are counted and said once,
        anything else goes to asyncio's default handler."""
        if _is_accept_error(context):
            self.accept_errors += 1
            why = context.get("exception") or context.get("message")
            self._once(
                "accept",
                f"the app endpoint cannot accept connections: {why} (said once, not at each "
                "of asyncio's retries: the process is out of descriptors or memory)",
            )
            return
        loop.default_exception_handler(context)

    def _once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning(message)

    # --- uvicorn --------------------------------------------------------------------------------

    def protocol(self) -> type:
        """uvicorn's h11 protocol class, with the guard's three hooks."""
        from uvicorn.protocols.http.h11_impl import H11Protocol

        guard = self

        class GuardedH11Protocol(H11Protocol):
            def connection_made(self, transport: Any) -> None:
                if not guard.admit(self):
                    transport.abort()
                    return
                super().connection_made(transport)

            def connection_lost(self, exc: Exception | None) -> None:
                if guard.forget(self):
                    super().connection_lost(exc)

            def on_response_complete(self) -> None:
                super().on_response_complete()
                guard.arm(self)

        return GuardedH11Protocol

    def server(self, config: Any) -> Any:
        """A uvicorn server whose loop reports to the guard (its exception handler)."""
        import uvicorn

        guard = self

        class GuardedServer(uvicorn.Server):
            async def serve(self, sockets: Any = None) -> None:
                guard.loop = asyncio.get_running_loop()
                guard.loop.set_exception_handler(guard.loop_error)
                await super().serve(sockets=sockets)

        return GuardedServer(config)


def holds_request(conn: Any) -> bool:
    """Whether the client of ``conn`` has sent a whole request of this cycle (it waits for
    the reply, or the reply is being written)."""
    import h11

    return conn.conn.their_state in (h11.DONE, h11.MUST_CLOSE)


def _is_accept_error(context: dict[str, Any]) -> bool:
    message = str(context.get("message", ""))
    return "accept" in message or "_accept_connection" in repr(context.get("handle", ""))
