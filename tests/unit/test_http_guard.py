"""Issue 29, items 6 and 11: the HTTP endpoint closes what it does not serve. A token-less (or refused)
``initialize`` is 401 and never reaches the SDK, so it creates no session; a body must arrive in time (408); a
client that hangs up mid-body is one log line; request headers have a deadline (uvicorn has none). In process:
the ASGI guard with a recording stand-in for the SDK's session manager, and uvicorn in a thread on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn

from memories import protocol as p
from memories import serving
from memories.errors import MemoriesError
from memories.mcp import http, status
from memories.paths import Home

INITIALIZE = json.dumps(
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
).encode()
CALL = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode()


class Manager:
    """Stands in for the SDK's session manager: records the bodies it was handed and answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def handle_request(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.bodies.append(message["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def _post(
    guard: http.Guard, messages: list[MutableMapping[str, Any]], token: str | None = None, hang: bool = False
) -> list[MutableMapping[str, Any]]:
    headers = [(b"host", b"127.0.0.1:8765")]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {"type": "http", "path": "/mcp", "method": "POST", "headers": headers}
    pending = list(messages)
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        if pending:
            return pending.pop(0)
        if hang:
            await anyio.sleep_forever()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    anyio.run(guard, scope, receive, send)
    return sent


def _body(data: bytes) -> MutableMapping[str, Any]:
    return {"type": "http.request", "body": data, "more_body": False}


def _guard(tmp_path: Path) -> tuple[http.Guard, Manager]:
    manager = Manager()
    home = Home(str(tmp_path / "home"), str(tmp_path / "home" / "config.toml"))
    return http.Guard(manager, 8765, home), manager  # type: ignore[arg-type]


def test_a_token_less_initialize_is_401_and_creates_no_session(tmp_path: Path) -> None:
    guard, manager = _guard(tmp_path)
    sent = _post(guard, [_body(INITIALIZE)])
    assert sent[0]["status"] == 401 and (b"www-authenticate", b"Bearer") in sent[0]["headers"]
    assert b"Authorization: Bearer" in sent[1]["body"]
    assert manager.bodies == []


def test_an_initialize_with_a_token_the_daemon_refuses_is_401(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def refused(home: Home, token: str | None) -> MemoriesError:
        return MemoriesError("grant_revoked", "revoked")

    monkeypatch.setattr(status, "fetch", refused)
    guard, manager = _guard(tmp_path)
    assert _post(guard, [_body(INITIALIZE)], token="mem_x")[0]["status"] == 401
    assert manager.bodies == []


def test_an_initialize_is_503_when_no_daemon_can_check_its_token(tmp_path: Path) -> None:
    guard, manager = _guard(tmp_path)
    sent = _post(guard, [_body(INITIALIZE)], token="mem_x")
    assert sent[0]["status"] == 503 and b"daemon_not_running" in sent[1]["body"]
    assert manager.bodies == []


def test_an_initialize_with_a_valid_grant_reaches_the_sdk_with_its_whole_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def accepted(home: Home, token: str | None) -> p.ToolStatusReport:
        return p.ToolStatusReport(locked=True, generation="none")

    monkeypatch.setattr(status, "fetch", accepted)
    guard, manager = _guard(tmp_path)
    half = len(INITIALIZE) // 2
    chunks = [{"type": "http.request", "body": INITIALIZE[:half], "more_body": True}, _body(INITIALIZE[half:])]
    assert _post(guard, chunks, token="mem_x")[0]["status"] == 200
    assert manager.bodies == [INITIALIZE[:half]] and len(manager.bodies) == 1  # replayed as it came


def test_other_requests_without_a_token_reach_the_sdk(tmp_path: Path) -> None:
    """They create no session (a call without one is refused by the SDK, or judged grant_invalid by the daemon)."""
    guard, manager = _guard(tmp_path)
    assert _post(guard, [_body(CALL)])[0]["status"] == 200
    assert manager.bodies == [CALL]


def test_a_client_that_hangs_up_mid_body_is_one_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    guard, manager = _guard(tmp_path)
    caplog.set_level(logging.INFO)
    sent = _post(guard, [{"type": "http.request", "body": b'{"jsonrpc"', "more_body": True}])
    assert sent == [] and manager.bodies == []
    assert [r.getMessage() for r in caplog.records] == [
        "a client hung up before sending its whole request (10 bytes received)"
    ]


def test_a_body_that_does_not_arrive_in_time_is_408(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "BODY_SECONDS", 0.2)
    guard, manager = _guard(tmp_path)
    sent = _post(guard, [{"type": "http.request", "body": b"{", "more_body": True}], hang=True)
    assert sent[0]["status"] == 408 and manager.bodies == []


def test_request_headers_have_a_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection that sends half its headers (and one that sends nothing) is closed by the server."""
    monkeypatch.setattr(serving, "HEADER_SECONDS", 0.5)
    sock = serving.listen_socket("127.0.0.1", 0, "--http")
    port = sock.getsockname()[1]
    server = serving.SignalFreeServer(
        uvicorn.Config(
            http.Guard(Manager(), port, Home("/nonexistent", "/nonexistent/c")),  # type: ignore[arg-type]
            http=serving.HeaderDeadline,
            lifespan="off",
            log_level="warning",
        )
    )
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        clients = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
        clients[0].sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for client in clients:
            assert client.recv(1024) == b"", "the server closes it"  # recv times out (30 s) if it never does
            client.close()
    finally:
        server.should_exit = True
        thread.join(30)


def test_a_repeated_error_is_logged_once_with_a_count(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The accept loop of an exhausted endpoint wrote the same error 121 MB deep; now once, then with a count."""
    clock = [1000.0]
    monkeypatch.setattr(serving.time, "monotonic", lambda: clock[0])
    log = logging.getLogger("asyncio")
    repeats = serving.Repeats()
    log.addFilter(repeats)
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            for _ in range(500):
                log.error("socket.accept() out of system resource")
            log.error("another error")
            clock[0] += serving.REPEAT_SECONDS
            log.error("socket.accept() out of system resource")
    finally:
        log.removeFilter(repeats)
    assert [r.getMessage() for r in caplog.records] == [
        "socket.accept() out of system resource",
        "another error",
        "socket.accept() out of system resource (and 499 more like it in the last 60 s)",
    ]
