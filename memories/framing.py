"""Length-prefixed frames: a 4-byte big-endian payload length, then that many bytes of MessagePack.

Used on the client socket (blocking, :func:`send_frame` / :func:`recv_frame`), on worker pipes from the worker
side (blocking file descriptors, :func:`write_frame_fd` / :func:`read_frame_fd`) and from the daemon side
(:class:`FrameStream`, trio). This module imports neither trio nor anything heavy at import time, so the CLI can
use it.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from memories.errors import MemoriesError

if TYPE_CHECKING:
    import trio

_HEADER = struct.Struct(">I")

MAX_CLIENT_FRAME = 8 * 1024 * 1024
"""Largest client frame in bytes: a 2 MiB body plus paths and overhead fit with room to spare."""

MAX_WORKER_FRAME = 1024 * 1024 * 1024
"""Largest worker frame in bytes (1 GiB): an index sync batch or a vector batch stays far below it; an index snapshot
of a 100,000-chunk vault (about 400 MiB, :data:`memories.worker_protocol.SNAPSHOT_MAX_BYTES`) is the largest frame.
A frame's buffer is allocated at its announced size, from our own worker processes only."""


HEADER_BYTES = _HEADER.size


def pack(payload: bytes) -> bytes:
    """Prefix ``payload`` with its length."""
    return _HEADER.pack(len(payload)) + payload


def payload_size(header: bytes, limit: int = MAX_CLIENT_FRAME) -> int:
    """The payload length a :data:`HEADER_BYTES`-byte header announces (for readers of other stream types).

    Raises:
        MemoriesError: ``protocol_error`` for a frame over ``limit`` bytes.
    """
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise _too_large(size, limit)
    return size


def _too_large(size: int, limit: int) -> MemoriesError:
    return MemoriesError("protocol_error", f"frame of {size} bytes exceeds the {limit}-byte limit")


def send_frame(sock: socket.socket, payload: bytes) -> None:
    """Write one frame to a blocking socket."""
    sock.sendall(pack(payload))


def recv_frame(sock: socket.socket, limit: int = MAX_CLIENT_FRAME) -> bytes | None:
    """Read one frame from a blocking socket; ``None`` at a clean end of stream.

    Raises:
        MemoriesError: ``protocol_error`` for a frame over ``limit`` bytes or a stream cut inside a frame.
    """
    header = _recv_exact(sock.recv, _HEADER.size, allow_eof=True)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise _too_large(size, limit)
    return _recv_exact(sock.recv, size, allow_eof=False)


def write_frame_fd(fd: int, payload: bytes) -> None:
    """Write one frame to a blocking file descriptor (a worker's reply pipe)."""
    view = memoryview(pack(payload))
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_frame_fd(fd: int, limit: int = MAX_WORKER_FRAME) -> bytes | None:
    """Read one frame from a blocking file descriptor; ``None`` at end of stream (the writer is gone)."""

    def read(n: int) -> bytes:
        return os.read(fd, n)

    header = _recv_exact(read, _HEADER.size, allow_eof=True)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise _too_large(size, limit)
    return _recv_exact(read, size, allow_eof=False)


def _recv_exact(read: Callable[[int], bytes], size: int, *, allow_eof: bool) -> bytes | None:
    parts = []
    remaining = size
    while remaining:
        chunk = read(min(remaining, 1 << 20))
        if not chunk:
            if allow_eof and remaining == size:
                return None
            raise MemoriesError("protocol_error", "the connection closed inside a frame")
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


class FrameStream:
    """Frames over a trio stream (daemon side of the client socket and of worker pipes)."""

    def __init__(
        self,
        receive: trio.abc.ReceiveStream | None,
        send: trio.abc.SendStream | None,
        limit: int,
    ) -> None:
        self._receive = receive
        self._send = send
        self._limit = limit
        self._buffer = bytearray()

    async def receive(self) -> bytes | None:
        """The next frame, or ``None`` at a clean end of stream.

        Raises:
            MemoriesError: ``protocol_error`` for an oversized frame or a stream cut inside a frame.
        """
        assert self._receive is not None
        while True:
            if len(self._buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(self._buffer)
                if size > self._limit:
                    raise _too_large(size, self._limit)
                end = _HEADER.size + size
                if len(self._buffer) >= end:
                    payload = bytes(self._buffer[_HEADER.size : end])
                    del self._buffer[:end]
                    return payload
            chunk = await self._receive.receive_some(1 << 20)
            if not chunk:
                if self._buffer:
                    raise MemoriesError("protocol_error", "the stream closed inside a frame")
                return None
            self._buffer += chunk

    async def send(self, payload: bytes) -> None:
        """Write one frame."""
        assert self._send is not None
        await self._send.send_all(pack(payload))

    async def aclose(self) -> None:
        """Close the underlying streams."""
        for stream in (self._receive, self._send):
            if stream is not None:
                await stream.aclose()
