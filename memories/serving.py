"""Serving HTTP on loopback, shared by ``memories mcp serve --http`` and ``memories web``: the listening socket
(bound by us, so a refused address or a busy port is one clear error and port 0 reports the port it picked), the
``Host`` header's name, uvicorn without its own signal handlers, a deadline for request headers, and a log filter
that says a repeated error once.

>>> host_name("[::1]:8765"), host_name("LOCALHOST:80"), host_name("127.0.0.1")
('::1', 'localhost', '127.0.0.1')
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Iterator

import anyio
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from memories.errors import MemoriesError


def host_name(host: str) -> str:
    """The name part of a ``Host`` header (``[::1]:8765`` -> ``::1``), lowercased."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def listen_socket(address: str, port: int, option: str) -> socket.socket:
    """A non-blocking TCP socket listening on ``address`` port ``port`` (0: a free one).

    Raises:
        MemoriesError: ``invalid_argument`` naming ``option`` (``--http``, ``--port``) when it cannot be bound.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise MemoriesError(
            "invalid_argument", f"{option}: cannot listen on {address} port {port}: {exc.strerror}"
        ) from None
    sock.setblocking(False)
    return sock


HEADER_SECONDS = 30.0
"""A connection must send a request's whole headers this long after it opens or after its previous response, else
it is closed (uvicorn has no such deadline: 1,100 half-sent requests stayed open; the daemon socket's own is
30 s)."""

MAX_HTTP_CONNECTIONS = 100
"""Connections and requests served at once (uvicorn's ``limit_concurrency``: 503 beyond), as the daemon socket's
``MAX_CONNECTIONS``."""


class HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol (``uvicorn.Config(http=HeaderDeadline)``) that closes a connection whose request
    headers are not all in :data:`HEADER_SECONDS` after it opened or after its last response."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def _arm(self) -> None:
        self.loop.call_later(HEADER_SECONDS, self._expire, self.cycle)

    def _expire(self, cycle: object) -> None:
        if self.cycle is cycle and not self.transport.is_closing():  # no request's headers since it was armed
            self.transport.close()


REPEAT_SECONDS = 60.0
"""A log record like one already written (same logger, message template and exception type) within this long is
counted, not written; the next one written after it says how many were left out."""


class Repeats(logging.Filter):
    """Writes a repeated record once per :data:`REPEAT_SECONDS` with the count of those left out: the accept loop
    of an exhausted server (``EMFILE``) wrote 121 MB to stderr in 15 s. Add it to the loggers ``asyncio`` and
    ``uvicorn.error`` (:func:`quiet_repeats`)."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[tuple[str, object, object], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.exc_info[0] if record.exc_info else None
        key = (record.name, record.msg, kind)
        now = time.monotonic()
        since, left_out = self._seen.get(key, (float("-inf"), 0))
        if now - since < REPEAT_SECONDS:
            self._seen[key] = (since, left_out + 1)
            return False
        self._seen[key] = (now, 0)
        if left_out:
            record.msg = f"{record.msg} (and {left_out} more like it in the last {now - since:.0f} s)"
        return True


def quiet_repeats() -> None:
    """Add one :class:`Repeats` to the loggers of asyncio's accept loop and uvicorn."""
    repeats = Repeats()
    for name in ("asyncio", "uvicorn.error"):
        logging.getLogger(name).addFilter(repeats)


class SignalFreeServer(uvicorn.Server):
    """uvicorn without its signal handlers, which re-raise SIGTERM after the shutdown (the process would die of
    it); :func:`stop_on_signal` ends the server instead, so SIGTERM exits with status 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def stop_on_signal(server: uvicorn.Server) -> None:
    """Ask ``server`` to shut down at the first SIGTERM or SIGINT (run it beside ``server.serve``)."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            server.should_exit = True
            return
