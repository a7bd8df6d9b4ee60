"""The client socket in-process: while a request runs the daemon sends a heartbeat at least every
``HEARTBEAT_SECONDS``, so a client can wait for a long job and still notice a stopped daemon."""

from __future__ import annotations

import itertools
import logging
import socket
from pathlib import Path

import msgspec
import pytest
import trio

from memories import protocol as p
from memories.daemon.server import Connection, serve_socket
from memories.framing import MAX_CLIENT_FRAME, FrameStream


async def test_a_long_request_sends_heartbeats_then_its_reply(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    async def slow(envelope: p.Envelope, conn: Connection) -> p.Result:
        await trio.sleep(10 * p.HEARTBEAT_SECONDS)
        return p.Done(ok=True)

    path = tmp_path / "daemon.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_socket, path, slow, list)
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await sock.connect(str(path))
        stream = trio.SocketStream(sock)
        frames = FrameStream(stream, stream, MAX_CLIENT_FRAME)
        envelope = p.Envelope(protocol=p.PROTOCOL_VERSION, home="/h", config="/h/c", request=p.VaultList())
        await frames.send(msgspec.msgpack.encode(envelope))
        sent = trio.current_time()
        decoder = msgspec.msgpack.Decoder(p.ClientFrame)
        received: list[tuple[float, object]] = []
        while True:
            raw = await frames.receive()
            assert raw is not None
            message = decoder.decode(raw)
            received.append((trio.current_time(), message))
            if not isinstance(message, p.Heartbeat):
                break
        await stream.aclose()
        nursery.cancel_scope.cancel()

    assert isinstance(received[-1][1], p.ClientReply)
    assert sum(isinstance(message, p.Heartbeat) for _, message in received) >= 9
    times = [sent, *(at for at, _ in received)]
    # The rule a client relies on, on trio's virtual clock (no wall time): a frame at least every 2 s.
    assert max(later - earlier for earlier, later in itertools.pairwise(times)) <= 2


async def test_a_client_hanging_up_mid_request_is_no_error_in_the_log(
    tmp_path: Path, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    finished = trio.Event()

    async def slow(envelope: p.Envelope, conn: Connection) -> p.Result:
        try:
            await trio.sleep(10 * p.HEARTBEAT_SECONDS)  # heartbeats go out meanwhile, to a closed socket
        finally:
            finished.set()
        return p.Done(ok=True)

    path = tmp_path / "daemon.sock"
    with caplog.at_level(logging.DEBUG, logger="memories"):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_socket, path, slow, list)
            sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            await sock.connect(str(path))
            stream = trio.SocketStream(sock)
            envelope = p.Envelope(protocol=p.PROTOCOL_VERSION, home="/h", config="/h/c", request=p.VaultList())
            await FrameStream(stream, stream, MAX_CLIENT_FRAME).send(msgspec.msgpack.encode(envelope))
            await stream.aclose()
            await finished.wait()
            await trio.sleep(1)
            nursery.cancel_scope.cancel()
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == []
    assert any("hung up" in record.getMessage() for record in caplog.records)
