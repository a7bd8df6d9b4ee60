"""The client side of the daemon socket: blocking, small, and fast to import (no trio, no numpy).

>>> from memories import protocol as p
>>> from memories.paths import Home
>>> client = Client(Home("/nonexistent/home", "/nonexistent/home/config.toml"))
>>> client.request(p.VaultList())  # doctest: +ELLIPSIS
Traceback (most recent call last):
memories.errors.MemoriesError: daemon_not_running: no daemon is running for the home /nonexistent/home; ...

With a daemon running, the same call returns ``Answer(result=VaultListing(vaults=[...]), warnings=[])``: each
request declares its result's type (:class:`memories.protocol.ClientRequest`), and the reply is decoded into it.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar, cast

import msgspec

from memories import protocol as p
from memories.errors import MemoriesError
from memories.framing import recv_frame, send_frame
from memories.paths import Home

R = TypeVar("R")


class Answer(NamedTuple, Generic[R]):
    """A request's result, of the type the request declares, and the daemon's warnings sent along with it."""

    result: R
    warnings: list[str]


class RequestFailed(MemoriesError):
    """The daemon answered with a failure; ``warnings`` are the daemon's notes sent along with it."""

    def __init__(self, failure: p.Failure) -> None:
        super().__init__(failure.code, failure.message, dict(failure.details))
        self.warnings = list(failure.warnings)


class Client:
    """Sends one request per connection to the daemon of ``home``."""

    def __init__(self, home: Home) -> None:
        self.home = home

    def connect(self, timeout: float | None = p.SILENCE_SECONDS) -> socket.socket:
        """A connected socket whose operations time out after ``timeout`` seconds. A full listen backlog (the connect
        fails with ``EAGAIN``: the daemon runs but has not accepted the connections before this one yet) is tried
        again after each pause of :data:`BUSY_PAUSES`.

        Raises:
            MemoriesError: ``daemon_not_running`` naming the home when no daemon answers (no socket, or a socket
                left over from a daemon that died); ``daemon_busy`` when the backlog stays full through the
                retries; ``daemon_unresponsive`` when the connect times out.
        """
        for pause in (*BUSY_PAUSES, None):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(self.home.socket_path)
            except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
                sock.close()
                raise MemoriesError(
                    "daemon_not_running",
                    f"no daemon is running for the home {self.home.root}; start it with `memories daemon start`",
                    {"home": self.home.root},
                ) from None
            except BlockingIOError:
                sock.close()
                if pause is None:
                    raise busy(self.home) from None
                time.sleep(pause)
                continue
            except TimeoutError:
                sock.close()
                raise unresponsive(self.home, timeout) from None
            except OSError as exc:
                sock.close()
                raise MemoriesError(
                    "daemon_not_running", f"cannot reach the daemon of {self.home.root}: {exc.strerror}"
                ) from None
            check_peer(sock, self.home)
            return sock
        raise AssertionError("unreachable: the last pause is None")

    def request(
        self,
        request: p.ClientRequest[R],
        on_progress: Callable[[p.Progress], None] | None = None,
        timeout: float | None = p.SILENCE_SECONDS,
    ) -> Answer[R]:
        """Send ``request``; call ``on_progress`` for each progress event; return its result and the warnings.

        A request may run for minutes (an index build), but while it runs the daemon sends a frame at least every
        :data:`~memories.protocol.HEARTBEAT_SECONDS`, so ``timeout`` seconds without any frame (default
        :data:`~memories.protocol.SILENCE_SECONDS`) mean a stopped or stuck daemon.

        Raises:
            RequestFailed: the daemon's failure (code, message, details, warnings).
            MemoriesError: ``invalid_utf8`` and ``invalid_argument`` from :func:`encode_request`;
                ``daemon_not_running``, also when the daemon hangs up without an answer; ``daemon_busy`` from
                :meth:`connect`, or when the daemon still answers ``daemon_busy`` after the pauses of
                :data:`BUSY_PAUSES`; ``daemon_unresponsive`` when ``timeout`` seconds pass without a frame;
                ``protocol_mismatch`` from :func:`read_reply`.
        """
        payload = encode_request(self.home, request)
        for pause in BUSY_PAUSES:
            try:
                return self._exchange(payload, request, on_progress, timeout)
            except RequestFailed as exc:
                if exc.code != "daemon_busy":
                    raise
            time.sleep(pause)  # the daemon refused before reading the request: sending it again is safe
        return self._exchange(payload, request, on_progress, timeout)

    def _exchange(
        self,
        payload: bytes,
        request: p.ClientRequest[R],
        on_progress: Callable[[p.Progress], None] | None,
        timeout: float | None,
    ) -> Answer[R]:
        with self.connect(timeout) as sock:
            try:
                send_frame(sock, payload)
            except TimeoutError:
                raise unresponsive(self.home, timeout) from None
            except OSError:
                # a busy daemon answers and closes without reading: its refusal may wait in our buffer
                sent = False
            else:
                sent = True
            while True:
                try:
                    frame = recv_frame(sock)
                except TimeoutError:
                    raise unresponsive(self.home, timeout) from None
                except OSError:
                    raise _gone(self.home) from None
                if frame is None:
                    raise _gone(self.home)
                message = _FRAMES.decode(frame)
                if isinstance(message, p.Heartbeat):
                    continue
                if isinstance(message, p.Progress):
                    if on_progress is not None:
                        on_progress(message)
                elif isinstance(message, p.Failure):
                    raise RequestFailed(message)
                elif not sent:
                    raise _gone(self.home)
                else:
                    return read_reply(message, request)


BUSY_PAUSES = (0.05, 0.1, 0.2, 0.4, 0.8)
"""Seconds a client waits before trying again when the daemon is busy (its listen backlog full, or its
``daemon_busy`` answer beyond :data:`memories.daemon.server.MAX_CONNECTIONS` connections): 1.55 s in all, a
bound chosen so that a burst of parallel MCP calls is absorbed and a person is not kept waiting."""


_FRAMES = msgspec.msgpack.Decoder(p.ClientFrame)
_ENCODER = msgspec.msgpack.Encoder()


def encode_request(home: Home, request: p.ClientRequest[Any]) -> bytes:
    """The frame payload of ``request`` for the daemon of ``home``: one :class:`~memories.protocol.Envelope`. Both
    daemon clients, the CLI and the MCP server, send their requests through here, so the same bad argument gets
    the same error code from either.

    Raises:
        MemoriesError: ``invalid_utf8`` when a string holds a lone surrogate (a byte of the command line that is not
            UTF-8, an escape in an MCP argument); ``invalid_argument`` for an integer beyond 64 bits.
    """
    body = cast(p.Request, request)  # every ClientRequest is one of the Request union
    envelope = p.Envelope(protocol=p.PROTOCOL_VERSION, home=home.root, config=home.config_path, request=body)
    try:
        return _ENCODER.encode(envelope)
    except UnicodeEncodeError:
        raise MemoriesError(
            "invalid_utf8",
            "an argument (a title, name, query, metadata value, path or passphrase) is not valid UTF-8",
        ) from None
    except OverflowError:
        raise MemoriesError("invalid_argument", "a number is too large") from None


def read_reply(reply: p.ClientReply, request: p.ClientRequest[R]) -> Answer[R]:
    """``reply``'s result decoded into the type ``request`` declares, with its warnings. A daemon of an older or a
    newer release that speaks the same protocol adds or lacks only optional fields (docs/architecture.md, "Client
    protocol compatibility"), which decoding fills in or ignores.

    Raises:
        MemoriesError: ``protocol_mismatch`` when the result is not of that type (the daemon runs another release
            whose reply this client cannot read: restart it).
    """
    try:
        result: R = msgspec.msgpack.decode(reply.result, type=request.reply_type())
    except msgspec.ValidationError as exc:
        raise MemoriesError(
            "protocol_mismatch",
            f"the daemon's reply does not match this client ({exc}); restart the daemon "
            "(`memories daemon stop`, then `memories daemon start`)",
        ) from None
    return Answer(result, reply.warnings)


def _gone(home: Home) -> MemoriesError:
    return MemoriesError(
        "daemon_not_running",
        f"the daemon of {home.root} closed the connection without an answer (it stopped or crashed; see its log)",
        {"home": home.root},
    )


_PEER_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid (Linux)


def check_peer(sock: socket.socket, home: Home) -> None:
    """Refuse a socket whose listener runs as another user: a passphrase or a query must only ever reach our own
    daemon, even if someone planted a socket where ours would be (``SO_PEERCRED``, Linux)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return
    _, uid, _ = _PEER_CREDENTIALS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER_CREDENTIALS.size))
    if uid != os.getuid():
        sock.close()
        raise MemoriesError(
            "daemon_not_running",
            f"the socket {home.socket_path} belongs to another user (uid {uid}); refusing to talk to it",
        )


def busy(home: Home) -> MemoriesError:
    """``daemon_busy``: the daemon of ``home`` runs, but its queue of new connections stayed full through the
    retries of :data:`BUSY_PAUSES`. Retryable: the same request may be sent again."""
    return MemoriesError(
        "daemon_busy",
        f"the daemon of {home.root} is running but busy (its queue of new connections is full); "
        "this is temporary: try again in a moment",
        {"home": home.root, "retryable": True},
    )


def unresponsive(home: Home, timeout: float | None) -> MemoriesError:
    """``daemon_unresponsive``: the daemon of ``home`` sent no frame for ``timeout`` seconds."""
    return MemoriesError(
        "daemon_unresponsive",
        f"the daemon of {home.root} sent nothing for {timeout:g} s (it is stopped or stuck); "
        "`memories daemon stop` ends it",
    )
