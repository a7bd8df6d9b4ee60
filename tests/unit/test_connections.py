"""Issue 21, item 7: the client socket serves only its own user, gives a connection 30 s to send its request, and
answers ``daemon_busy`` beyond 100 connections at once; none of it cuts a request in progress. In-process, on
trio's virtual clock where time matters (no wall time)."""

from __future__ import annotations

import logging
import os
import socket
import struct
from pathlib import Path

import msgspec
import pytest
import trio

from memories import protocol as p
from memories.daemon.server import FIRST_REQUEST_SECONDS, MAX_CONNECTIONS, Connection, serve_socket
from memories.framing import MAX_CLIENT_FRAME, FrameStream

ENVELOPE = msgspec.msgpack.encode(
    p.Envelope(protocol=p.PROTOCOL_VERSION, home="/h", config="/h/c", request=p.VaultList())
)


async def _connect(path: Path) -> FrameStream:
    return FrameStream(*[await _open(path)] * 2, MAX_CLIENT_FRAME)


async def _open(path: Path) -> trio.SocketStream:
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.connect(str(path))
    return trio.SocketStream(sock)


async def _answer(frames: FrameStream) -> object:
    """The first frame that is not a heartbeat, decoded (``None``: the daemon closed the connection, which a peer
    whose request it did not read sees as a reset)."""
    decoder = msgspec.msgpack.Decoder(p.ClientFrame)
    while True:
        try:
            raw = await frames.receive()
        except trio.BrokenResourceError:
            return None
        if raw is None:
            return None
        message = decoder.decode(raw)
        if not isinstance(message, p.Heartbeat):
            return message


async def test_a_connection_without_a_whole_request_is_closed_after_30_s(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    handled: list[p.Envelope] = []

    async def handle(envelope: p.Envelope, conn: Connection) -> p.Result:
        handled.append(envelope)
        return p.Done(ok=True)

    path = tmp_path / "daemon.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_socket, path, handle, list)
        start = trio.current_time()
        silent = await _connect(path)
        stream = await _open(path)
        await stream.send_all(struct.pack(">I", len(ENVELOPE)) + ENVELOPE[:-1])  # all but the request's last byte
        assert await _answer(silent) is None
        assert await stream.receive_some(1) == b""
        closed_after = trio.current_time() - start
        nursery.cancel_scope.cancel()
    assert closed_after >= FIRST_REQUEST_SECONDS and handled == []


async def test_a_request_in_progress_is_never_cut_by_the_first_request_deadline(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    async def slow(envelope: p.Envelope, conn: Connection) -> p.Result:
        await trio.sleep(3 * FIRST_REQUEST_SECONDS)
        return p.Done(ok=True)

    path = tmp_path / "daemon.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_socket, path, slow, list)
        frames = await _connect(path)
        await frames.send(ENVELOPE)
        answer = await _answer(frames)
        nursery.cancel_scope.cancel()
    assert isinstance(answer, p.ClientReply)


async def test_beyond_100_connections_a_new_one_is_answered_daemon_busy(tmp_path: Path) -> None:
    entered = 0
    all_in = trio.Event()
    release = trio.Event()

    async def held(envelope: p.Envelope, conn: Connection) -> p.Result:
        nonlocal entered
        entered += 1
        if entered == MAX_CONNECTIONS:
            all_in.set()
        await release.wait()
        return p.Done(ok=True)

    path = tmp_path / "daemon.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_socket, path, held, list)
        busy = []
        for _ in range(MAX_CONNECTIONS):
            frames = await _connect(path)
            await frames.send(ENVELOPE)
            busy.append(frames)
        with trio.fail_after(30):
            await all_in.wait()
        one_more = await _connect(path)
        await one_more.send(ENVELOPE)
        refused = await _answer(one_more)
        release.set()
        answers = [await _answer(frames) for frames in busy]
        after = await _connect(path)  # the connections were closed: room again
        await after.send(ENVELOPE)
        served = await _answer(after)
        nursery.cancel_scope.cancel()
    assert isinstance(refused, p.Failure) and refused.code == "daemon_busy"
    assert "100 connections" in refused.message
    assert all(isinstance(answer, p.ClientReply) for answer in answers)
    assert isinstance(served, p.ClientReply)


async def test_a_peer_of_another_user_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``SO_PEERCRED``: the daemon serves the user it runs as (played here by another uid than the test's)."""
    handled: list[p.Envelope] = []

    async def handle(envelope: p.Envelope, conn: Connection) -> p.Result:
        handled.append(envelope)
        return p.Done(ok=True)

    path = tmp_path / "daemon.sock"
    with caplog.at_level(logging.WARNING, logger="memories.server"):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_socket, path, handle, list, None, os.getuid() + 1)
            frames = await _connect(path)
            await frames.send(ENVELOPE)
            answer = await _answer(frames)
            nursery.cancel_scope.cancel()
    assert answer is None and handled == []
    assert [r.getMessage() for r in caplog.records] == [
        f"refused a connection from process {os.getpid()} of another user (uid {os.getuid()})"
    ]
