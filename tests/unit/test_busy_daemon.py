"""Issue 29, item 1: a daemon that runs but is busy is never called absent. A full listen backlog (the connect
fails with ``EAGAIN``) and the daemon's ``daemon_busy`` refusal are tried again for a moment, then are
``daemon_busy`` (retryable, and the message says so) in both clients: the CLI's (:mod:`memories.client`) and the MCP
server's (:mod:`memories.mcp.link`, which MCP over stdio and HTTP use). In process: a Unix socket that never accepts,
and a socket server in a thread that plays the daemon."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest

from memories import protocol as p
from memories.client import Client
from memories.errors import MemoriesError
from memories.framing import recv_frame, send_frame
from memories.mcp import link
from memories.paths import Home

_BUSY = msgspec.msgpack.encode(p.Failure(code="daemon_busy", message="the daemon is running but busy"))
_ANSWER = msgspec.msgpack.encode(p.Reply(result=p.VaultListing(vaults=[])))


def _home(tmp_path: Path) -> Home:
    home = Home(str(tmp_path / "home"), str(tmp_path / "home" / "config.toml"))
    os.makedirs(os.path.dirname(home.socket_path), exist_ok=True)
    return home


@pytest.fixture
def full_backlog(tmp_path: Path) -> Iterator[Home]:
    """A home whose socket listens but never accepts, its backlog filled until a connect fails with EAGAIN."""
    home = _home(tmp_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(home.socket_path)
    server.listen(0)
    waiting: list[socket.socket] = []
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(home.socket_path)
        except BlockingIOError:
            sock.close()
            break
        waiting.append(sock)
        assert len(waiting) < 1000, "the backlog never filled"
    yield home
    for sock in waiting:
        sock.close()
    server.close()


def _assert_busy(error: MemoriesError) -> None:
    assert error.code == "daemon_busy"
    assert "running but busy" in error.message and "try again" in error.message


def test_a_full_backlog_is_daemon_busy_for_the_cli(full_backlog: Home) -> None:
    with pytest.raises(MemoriesError) as failed:
        Client(full_backlog).request(p.VaultList())
    _assert_busy(failed.value)


def test_a_full_backlog_is_daemon_busy_for_mcp(full_backlog: Home) -> None:
    with pytest.raises(MemoriesError) as failed:
        anyio.run(link.request, full_backlog, p.VaultList())
    _assert_busy(failed.value)


def _daemon(home: Home, refusals: int, refused: threading.Event | None = None) -> threading.Thread:
    """Answers the first ``refusals`` connections ``daemon_busy`` without reading them (as the daemon beyond its
    connection limit does), then serves one VaultList. ``refused`` is set after the first refusal is closed."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(home.socket_path)
    server.listen(8)

    def serve() -> None:
        with server:
            for _ in range(refusals):
                conn, _ = server.accept()
                with conn:
                    send_frame(conn, _BUSY)
                if refused is not None:
                    refused.set()
            conn, _ = server.accept()
            with conn:
                recv_frame(conn)
                send_frame(conn, _ANSWER)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_the_cli_tries_a_busy_daemon_again(tmp_path: Path) -> None:
    home = _home(tmp_path)
    thread = _daemon(home, refusals=3)
    assert Client(home).request(p.VaultList()).result == p.VaultListing(vaults=[])
    thread.join(30)


def test_mcp_tries_a_busy_daemon_again(tmp_path: Path) -> None:
    home = _home(tmp_path)
    thread = _daemon(home, refusals=3)
    assert anyio.run(link.request, home, p.VaultList()).result == p.VaultListing(vaults=[])
    thread.join(30)


def test_a_busy_daemon_that_closed_before_the_request_was_sent_is_not_called_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal waits in the client's buffer while the send fails (``EPIPE``): it was read as 'closed the
    connection without an answer (it stopped or crashed)'. Every attempt is refused here, so the client gives up."""
    home = _home(tmp_path)
    refused = threading.Event()
    attempts = 0
    connect = Client.connect

    def connect_after_the_refusal(self: Client, timeout: float | None = p.SILENCE_SECONDS) -> socket.socket:
        nonlocal attempts
        sock = connect(self, timeout)
        attempts += 1
        if attempts == 1:
            assert refused.wait(30)
        return sock

    monkeypatch.setattr(Client, "connect", connect_after_the_refusal)
    monkeypatch.setattr("memories.client.BUSY_PAUSES", ())
    _daemon(home, refusals=1, refused=refused)
    with pytest.raises(MemoriesError) as failed:
        Client(home).request(p.VaultList())
    assert failed.value.code == "daemon_busy"
