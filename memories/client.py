"""The client side of the daemon socket: blocking, small, and fast to import (no trio, no numpy).

>>> from memories import protocol as p
>>> from memories.paths import Home
>>> client = Client(Home("/nonexistent/home", "/nonexistent/home/config.toml"))
>>> client.request(p.VaultList()).document()  # doctest: +ELLIPSIS
Traceback (most recent call last):
memories.errors.MemoriesError: daemon_not_running: no daemon is running for the home /nonexistent/home; ...

With a daemon running, the same call returns ``{'vaults': [...]}``.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable

import msgspec

from memories import protocol as p
from memories.errors import MemoriesError
from memories.framing import recv_frame, send_frame
from memories.paths import Home


class RequestFailed(MemoriesError):
    """The daemon answered with a failure; ``warnings`` are the daemon's notes sent along with it."""

    def __init__(self, failure: p.Failure) -> None:
        super().__init__(failure.code, failure.message, dict(failure.details))
        self.warnings = list(failure.warnings)


class Client:
    """Sends one request per connection to the daemon of ``home``."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(p.ClientFrame)

    def connect(self, timeout: float | None = p.SILENCE_SECONDS) -> socket.socket:
        """A connected socket whose operations time out after ``timeout`` seconds.

        Raises:
            MemoriesError: ``daemon_not_running`` naming the home when no daemon answers (no socket, or a socket
                left over from a daemon that died); ``daemon_unresponsive`` when the daemon's backlog stays full.
        """
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

    def request(
        self,
        request: p.Request,
        on_progress: Callable[[p.Progress], None] | None = None,
        timeout: float | None = p.SILENCE_SECONDS,
    ) -> p.ClientReply:
        """Send ``request``; call ``on_progress`` for each progress event; return the reply.

        A request may run for minutes (an index build), but while it runs the daemon sends a frame at least every
        :data:`~memories.protocol.HEARTBEAT_SECONDS`, so ``timeout`` seconds without any frame (default
        :data:`~memories.protocol.SILENCE_SECONDS`) mean a stopped or stuck daemon.

        Raises:
            RequestFailed: the daemon's failure (code, message, details, warnings).
            MemoriesError: ``daemon_not_running``, also when the daemon hangs up without an answer;
                ``daemon_unresponsive`` when ``timeout`` seconds pass without a frame.
        """
        envelope = p.Envelope(
            protocol=p.PROTOCOL_VERSION,
            home=self.home.root,
            config=self.home.config_path,
            request=request,
        )
        try:
            payload = self._encoder.encode(envelope)
        except UnicodeEncodeError:
            raise MemoriesError(
                "invalid_utf8",
                "an argument (a title, name, query, metadata value, path or passphrase) is not valid UTF-8",
            ) from None
        except OverflowError:
            raise MemoriesError("invalid_argument", "a number is too large") from None
        with self.connect(timeout) as sock:
            try:
                send_frame(sock, payload)
            except TimeoutError:
                raise unresponsive(self.home, timeout) from None
            except OSError:
                raise _gone(self.home) from None
            while True:
                try:
                    frame = recv_frame(sock)
                except TimeoutError:
                    raise unresponsive(self.home, timeout) from None
                except OSError:
                    raise _gone(self.home) from None
                if frame is None:
                    raise _gone(self.home)
                message = self._decoder.decode(frame)
                if isinstance(message, p.Heartbeat):
                    continue
                if isinstance(message, p.Progress):
                    if on_progress is not None:
                        on_progress(message)
                elif isinstance(message, p.Failure):
                    raise RequestFailed(message)
                else:
                    return message


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


def unresponsive(home: Home, timeout: float | None) -> MemoriesError:
    """``daemon_unresponsive``: the daemon of ``home`` sent no frame for ``timeout`` seconds."""
    return MemoriesError(
        "daemon_unresponsive",
        f"the daemon of {home.root} sent nothing for {timeout:g} s (it is stopped or stuck); "
        "`memories daemon stop` ends it",
    )
