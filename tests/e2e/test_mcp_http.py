"""``memories mcp serve --http``: the loopback endpoint's security model and its calls (issue 23, acceptance 3 and
4): foreign Origin or Host refused, loopback binds only, each request judged under its own bearer token (the same
refusals as stdio), grants that never see each other's vault, caps and strict arguments, lock, revoke and a client
that goes away mid-call, no token in the log, SIGTERM."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.daemon import PASSPHRASE, HomeDir, initialize, memories_executable, with_hooks
from tests.fixtures.mcp_client import grant, server_env
from tests.fixtures.mcp_wire import MODERN, HttpServer, HttpWire, envelope, messages

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def _line(result: dict[str, Any]) -> str:
    assert result["isError"] is True and len(result["content"]) == 1
    text: str = result["content"][0]["text"]
    assert "\n" not in text
    return text


def _call(wire: HttpWire, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = wire.request("tools/call", {"name": tool, "arguments": arguments})
    return result


def test_only_loopback_hosts_and_this_servers_origins_are_served(home: HomeDir) -> None:
    """DNS rebinding and web pages: a Host that is not loopback and an Origin other than this server's own are
    403; no Origin (every non-browser client) is served. Binding to anything but loopback is refused with the way
    to reach the endpoint remotely. With no daemon each call says so and the server stays up; SIGTERM ends it."""
    for listen in ("0.0.0.0:0", "[::]:8765"):
        done = subprocess.run(
            [memories_executable(), "mcp", "serve", "--http", listen],
            capture_output=True,
            env=server_env(home, None),
            timeout=60,
        )
        assert done.returncode == 1 and done.stdout == b""
        assert done.stderr.decode().startswith(
            f"error: invalid_argument: --http {listen}: the MCP endpoint binds to loopback only"
        ), done.stderr
        assert b"ssh -L" in done.stderr and b"listening" not in done.stderr
    with HttpServer(home) as server:
        assert server.url == f"http://127.0.0.1:{server.port}/mcp"
        port = server.port
        refused = [
            {"Origin": "http://evil.example"},
            {"Origin": f"http://evil.example:{port}"},
            {"Origin": "http://localhost:3000"},  # another local web app
            {"Origin": "null"},
            {"Host": "evil.example"},
            {"Host": f"evil.example:{port}"},
            {"Host": f"127.0.0.1.evil.example:{port}"},
        ]
        for headers in refused:
            response = httpx.post(server.url, json=INITIALIZE, headers={**ACCEPT, **headers}, timeout=60)
            assert response.status_code == 403, headers
            assert response.json()["error"]["message"].startswith("forbidden: ")
        for headers in ({}, {"Origin": f"http://localhost:{port}"}, {"Origin": f"http://127.0.0.1:{port}"}):
            response = httpx.post(server.url, json=INITIALIZE, headers={**ACCEPT, **headers}, timeout=60)
            assert response.status_code == 401, headers  # past Host and Origin: a session needs a grant (item 11)
        assert httpx.get(server.url.replace("/mcp", "/other"), timeout=60).status_code == 404

        wire = HttpWire(server.url, "mem_" + "A" * 43)
        refused = wire.post(INITIALIZE)  # no daemon can check the token: no session
        assert refused.status_code == 503 and "daemon_not_running" in refused.text
        assert wire.session is None
        opened = wire.open(MODERN)
        assert "The Memories daemon is not running" in opened["instructions"]
        for _ in range(2):
            line = _line(_call(wire, "memory_search", {"query": "x"}))
            assert line.startswith("daemon_not_running: ") and "memories daemon start" in line
        assert server.stop() == 0
    assert "Traceback" not in "".join(server.log)


def test_each_request_is_judged_under_its_own_token(home: HomeDir, tmp_path: Path) -> None:
    """One server, several grants: each request goes to the daemon under its own bearer token and nothing is
    cached across tokens, so two grants never see each other's vault, even in one session; no token, a malformed,
    revoked or expired one get stdio's refusals (and an initialize without a valid one is 401: no session); caps
    and strict arguments hold; lock answers vault_locked and the server stays up; no token ever reaches the log."""
    clock = tmp_path / "clock-offset"
    clock.write_text("0")
    with_hooks(home, clock_offset_file=str(clock))
    initialize(home, "V1")
    home.ok("vault", "create", "V2")
    a = home.ok("memory", "add", "V1", "--title", "apple A", "--body", "apple orchard in V1")["id"]
    home.ok("memory", "add", "V2", "--title", "apple C", "--body", "apple from V2")
    big = tmp_path / "big.md"
    big.write_text("农业发展银行支持乡村振兴。" * 3000)  # 39,000 characters: more than one page
    big_id = home.ok("memory", "add", "V1", "--title", "big", "--file", str(big))["id"]
    g1 = grant(home, "V1", "search,read")["token"]
    g2 = grant(home, "V2", "search")["token"]
    revoked = grant(home, "V1", "search")
    home.ok("grant", "revoke", revoked["id"])
    expiring = grant(home, "V1", "search", expires="1h")["token"]
    with HttpServer(home, MEMORIES_DEBUG="1") as server:
        one, two = HttpWire(server.url, g1), HttpWire(server.url, g2)
        assert 'the vault "V1"' in one.open("2025-06-18")["instructions"]
        assert 'the vault "V2"' in two.open(MODERN)["instructions"]
        for wire, vault_title in ((one, "apple A"), (two, "apple C"), (one, "apple A")):
            found = _call(wire, "memory_search", {"query": "apple", "limit": 100})["structuredContent"]
            assert [r["title"] for r in found["results"]] == [vault_title]
        # the same session with another grant's token: that request is judged under that token
        one.headers["Authorization"] = f"Bearer {g2}"
        found = _call(one, "memory_search", {"query": "apple"})["structuredContent"]
        assert [r["title"] for r in found["results"]] == ["apple C"]
        assert _line(_call(one, "memory_read", {"id": a})).startswith("scope_denied: ")
        one.headers["Authorization"] = f"Bearer {g1}"

        pages, offset = 0, 0
        while offset is not None:
            page = _call(one, "memory_read", {"id": big_id, "offset": offset})["structuredContent"]
            offset, pages = page["next_offset"], pages + 1
        assert pages > 1
        assert _line(_call(one, "memory_search", {"query": "x", "limit": 5.5})) == (
            "invalid_argument: limit: expected an integer"
        )
        assert _line(_call(one, "memory_search", {"query": "x", "colour": "red"})).startswith(
            "invalid_argument: colour: unknown argument"
        )

        refusals = {
            None: "grant_invalid: this request carries no grant token: send the header `Authorization: Bearer",
            "not-a-token": "grant_invalid: the grant token is not valid for this home",
            revoked["token"]: "grant_revoked: ",
        }
        for token, start in refusals.items():
            wire = HttpWire(server.url, token)
            assert wire.post(INITIALIZE).status_code == 401 and wire.session is None, token  # no session (item 11)
            assert "no valid grant" in wire.open(MODERN)["instructions"]
            assert _line(_call(wire, "memory_search", {"query": "apple"})).startswith(start), token
        basic = HttpWire(server.url, None, Authorization="Basic dXNlcjpwYXNz")
        assert basic.post(INITIALIZE).status_code == 401
        basic.open(MODERN)
        assert _line(_call(basic, "memory_search", {"query": "apple"})).startswith("grant_invalid: this request")

        late = HttpWire(server.url, expiring)
        late.open("2025-11-25")
        assert "results" in _call(late, "memory_search", {"query": "apple"})["structuredContent"]
        clock.write_text("7200")
        assert _line(_call(late, "memory_search", {"query": "apple"})).startswith("grant_expired: ")

        home.ok("lock")
        assert _line(_call(one, "memory_search", {"query": "apple"})).startswith("vault_locked: ")
        fresh = HttpWire(server.url, g1)
        assert "home is locked" in fresh.open("2025-11-25")["instructions"]
        home.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
        assert _call(one, "memory_search", {"query": "apple"})["structuredContent"]["results"]
        assert server.stop() == 0
    log = "".join(server.log)
    assert "memories.mcp" in log or "mcp.server" in log  # debug logging was on
    for token in (g1, g2, expiring, revoked["token"]):
        assert token not in log and token[4:] not in log


def _raw_post(port: int, message: dict[str, Any], token: str, **headers: str) -> socket.socket:
    """Send one POST on a socket of its own and leave the response unread (the test closes the socket)."""
    body = json.dumps(message).encode()
    lines = [
        "POST /mcp HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"Authorization: Bearer {token}",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return sock


def _running(home: HomeDir) -> Any:
    return [j for j in home.ok("jobs")["jobs"] if j["state"] == "running"] or None


def test_a_call_ends_with_its_exchange_and_a_revoke_drops_its_result(home: HomeDir) -> None:
    """A client that goes away mid-call (its HTTP exchange closes) cancels the call's job, in a 2025 session and in a
    2026-07-28 exchange; a revoke during a call drops its result."""
    with_hooks(home, step_delay_seconds={"IndexQuery": 5})
    initialize(home)
    home.ok("memory", "add", "notes", "--title", "slow", "--body", "a slow search")
    token = grant(home, "notes", "search,read")["token"]
    with HttpServer(home) as server:
        legacy = HttpWire(server.url, token)
        legacy.open("2025-11-25")
        call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "memory_search"}}
        call["params"]["arguments"] = {"query": "slow"}
        assert legacy.session is not None
        sessioned = {"Mcp-Session-Id": legacy.session, "MCP-Protocol-Version": "2025-11-25"}
        modern_call = json.loads(json.dumps(call))
        modern_call["params"]["_meta"] = envelope(MODERN)
        stateless = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "memory_search"}
        for message, headers in ((call, sessioned), (modern_call, stateless)):
            before = len([j for j in home.ok("jobs")["jobs"] if j["state"] in ("cancelling", "cancelled")])
            sock = _raw_post(server.port, message, token, **headers)
            home.wait_for(lambda: _running(home), timeout=60, what="the search job")
            sock.close()

            def cancelled(count: int = before) -> Any:  # cancelling: cut, its last step still ending
                jobs = [j for j in home.ok("jobs")["jobs"] if j["state"] in ("cancelling", "cancelled")]
                return jobs if len(jobs) > count else None

            assert home.wait_for(cancelled, timeout=60, what="a cancelled job")[-1]["kind"] == "search"
        line = _line(_call(legacy, "memory_read", {"id": "0000000000000000"}))  # the session goes on
        assert line.startswith("record_not_found: ")

        revoked = grant(home, "notes", "search")
        answer: list[dict[str, Any]] = []
        wire = HttpWire(server.url, revoked["token"])
        wire.open(MODERN)
        caller = threading.Thread(target=lambda: answer.append(_call(wire, "memory_search", {"query": "slow"})))
        caller.start()
        home.wait_for(lambda: _running(home), timeout=60, what="the search job")
        home.ok("grant", "revoke", revoked["id"])
        caller.join(timeout=120)
        assert _line(answer[0]).startswith("grant_revoked: ")
        assert server.stop() == 0


def test_an_http_exchange_lists_every_message_of_a_call() -> None:
    """The SSE parser of these tests: notifications, then the answer (one data line per event)."""
    body = 'event: message\r\ndata: {"a": 1}\r\n\r\n: ping\r\n\r\nevent: message\r\ndata: {"id": 2}\r\n\r\n'
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)
    assert messages(response) == [{"a": 1}, {"id": 2}]
