"""The MCP server's connection to the daemon: one async socket per tool call (anyio, like the SDK).

The request goes out as one :class:`~memories.protocol.Envelope`; progress frames go to the caller's callback (the
server forwards them to the client), heartbeats are skipped, and the reply or failure comes back, or
``daemon_unresponsive`` after 10 s without any frame. When the call is
cancelled (the client's cancel notification, or the end of stdin shutting the server down) the socket closes with
it, and the daemon, seeing the hang-up, cancels the job (R-44): nothing keeps running for a client that is gone.
The server never starts a daemon: one started from an AI client would be locked and would inherit the client's
environment.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import msgspec
from anyio.abc import SocketAttribute, UNIXSocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from memories import protocol as p
from memories.client import (
    BUSY_PAUSES,
    Answer,
    RequestFailed,
    busy,
    check_peer,
    encode_request,
    read_reply,
    unresponsive,
)
from memories.errors import MemoriesError
from memories.framing import HEADER_BYTES, pack, payload_size
from memories.paths import Home

R = TypeVar("R")
_DECODER = msgspec.msgpack.Decoder(p.ClientFrame)


def _not_running(home: Home) -> MemoriesError:
    return MemoriesError(
        "daemon_not_running",
        f"no daemon is running for the home {home.root}; run `memories daemon start` and `memories unlock`",
        {"home": home.root},
    )


async def request(
    home: Home, body: p.ClientRequest[R], on_progress: Callable[[p.Progress], Awaitable[None]] | None = None
) -> Answer[R]:
    """Send ``body`` to the daemon of ``home``; its result (of the type ``body`` declares) and warnings. Each
    progress frame before it is passed to ``on_progress`` and awaited.

    Raises:
        RequestFailed: the daemon's failure.
        MemoriesError: as the CLI's client (:func:`~memories.client.encode_request`,
            :func:`~memories.client.read_reply`); ``daemon_not_running`` when no daemon answers or it hangs up
            without an answer; ``daemon_busy`` when the daemon's backlog stays full or it still answers
            ``daemon_busy`` after the pauses of :data:`~memories.client.BUSY_PAUSES`; ``daemon_unresponsive``
            after :data:`~memories.protocol.SILENCE_SECONDS` without
            a frame (a live daemon sends a heartbeat every second while it works, so only a stopped or stuck one is
            silent).
    """
    payload = encode_request(home, body)
    for pause in BUSY_PAUSES:
        try:
            return await _exchange(home, payload, body, on_progress)
        except RequestFailed as exc:
            if exc.code != "daemon_busy":
                raise
        await anyio.sleep(pause)  # the daemon refused before reading the request: sending it again is safe
    return await _exchange(home, payload, body, on_progress)


async def _connect(home: Home) -> UNIXSocketStream:
    """A stream to the daemon of ``home``. The connect is non-blocking (a Unix socket's connect completes at once or
    fails), as anyio's would wait for room in a full listen backlog until the silence timeout: a full backlog
    (``EAGAIN``) is tried again after each pause of :data:`~memories.client.BUSY_PAUSES`, then is ``daemon_busy``."""
    for pause in (*BUSY_PAUSES, None):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(home.socket_path)
        except BlockingIOError:
            sock.close()
            if pause is None:
                raise busy(home) from None
            await anyio.sleep(pause)
            continue
        except OSError:
            sock.close()
            raise _not_running(home) from None
        return await UNIXSocketStream.from_socket(sock)
    raise AssertionError("unreachable: the last pause is None")


async def _exchange(
    home: Home,
    payload: bytes,
    body: p.ClientRequest[R],
    on_progress: Callable[[p.Progress], Awaitable[None]] | None,
) -> Answer[R]:
    stream = await _connect(home)
    async with stream:
        check_peer(stream.extra(SocketAttribute.raw_socket), home)
        reader = BufferedByteReceiveStream(stream)
        try:
            try:
                await stream.send(pack(payload))
            except (anyio.BrokenResourceError, OSError):
                sent = False  # a busy daemon answers and closes without reading: its refusal may wait in our buffer
            else:
                sent = True
            while True:
                with anyio.fail_after(p.SILENCE_SECONDS):
                    size = payload_size(await reader.receive_exactly(HEADER_BYTES))
                    frame = _DECODER.decode(await reader.receive_exactly(size))
                if isinstance(frame, p.Failure):
                    raise RequestFailed(frame)
                if not sent:
                    raise _not_running(home)
                if isinstance(frame, p.ClientReply):
                    return read_reply(frame, body)
                if isinstance(frame, p.Progress) and on_progress is not None:
                    await on_progress(frame)
        except TimeoutError:
            raise unresponsive(home, p.SILENCE_SECONDS) from None
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError):
            raise _not_running(home) from None
