"""``memories mcp serve --http [HOST:]PORT``: the MCP server as Streamable HTTP at ``/mcp``, on loopback only.

The SDK's session manager serves both eras on the one endpoint: the 2025 revisions with sessions
(``Mcp-Session-Id``, an SSE stream per request, the optional GET stream) and 2026-07-28 as single exchanges,
including its ``Mcp-Method``/``Mcp-Name`` header checks (-32020 when they disagree with the body). uvicorn runs it
(the ASGI server the SDK itself installs and documents; a dependency beyond the design card's list).

Security model, enforced by :class:`Guard` in front of the SDK, before anything is read:

- **Loopback binds only** (127.0.0.1, ``::1``, ``localhost``): plain HTTP would hand grant tokens to the network.
  Remote use goes through an SSH tunnel (``ssh -L PORT:127.0.0.1:PORT host``).
- **DNS rebinding**: a ``Host`` whose name is not 127.0.0.1, localhost or ``[::1]`` gets 403; so does an
  ``Origin`` other than ``http://127.0.0.1:PORT``, ``http://localhost:PORT`` or ``http://[::1]:PORT`` (this
  server's port). A request without ``Origin`` (every non-browser client) is accepted. The SDK's own check is
  off: it takes any port in an Origin and answers a bad Host with 421.
- **Bearer grant tokens**: each request is judged under the token of its own ``Authorization: Bearer`` header,
  in the daemon, exactly as a stdio call under ``MEMORIES_GRANT_TOKEN`` (a missing token makes every call
  ``grant_invalid``, as on stdio). Nothing is cached across requests (no token, no status, no result), so one
  server serves several grants that never see each other's vault. No token is ever logged (uvicorn's access log
  is off; the server logs codes, never headers).
- **A session needs a valid grant**: an ``initialize`` (the request that makes the SDK create a session) is read
  whole first and is answered 401 without a bearer token the daemon accepts (503 when the daemon cannot say), so
  token-less requests cannot fill the session table. A body must arrive within :data:`BODY_SECONDS` (408) and
  hold at most :data:`MAX_BODY_BYTES` (413); a client that hangs up mid-body is one log line.
- **Bounded connections**: request headers within :data:`memories.serving.HEADER_SECONDS`
  (:class:`~memories.serving.HeaderDeadline`), at most :data:`memories.serving.MAX_HTTP_CONNECTIONS` at once
  (503 beyond), idle keep-alive connections closed after 5 s (uvicorn's default).
- **A call ends with its exchange**: when the HTTP exchange that carried a call closes (the client went away), the
  call is cancelled and the daemon cancels its job. The SDK does this itself for 2026-07-28; for the 2025
  revisions, whose calls run in the session, the guard cancels them (a gap of the SDK, filled here).

With the daemon stopped or the home locked each call gets ``daemon_not_running`` / ``vault_locked`` and the server
stays up; SIGTERM (or Ctrl-C) ends it with status 0.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

import anyio
import uvicorn
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from memories.errors import MemoriesError
from memories.mcp import status
from memories.mcp.endpoint import LOOPBACK_NAMES, PATH, parse_listen, url_of
from memories.mcp.server import Context, build_server, logging_to_stderr
from memories.paths import Home
from memories.serving import (
    MAX_HTTP_CONNECTIONS,
    HeaderDeadline,
    SignalFreeServer,
    host_name,
    listen_socket,
    quiet_repeats,
    stop_on_signal,
)

log = logging.getLogger("memories.mcp")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
"""The ASGI callables' types (the ASGI 3 specification)."""

SHUTDOWN_SECONDS = 5
"""How long SIGTERM waits for open exchanges (a client's GET stream stays open) before closing them."""

BODY_SECONDS = 30.0
"""A POST's whole body must arrive this long after its headers (the daemon socket's first-request deadline), else
408 and the connection closes: a trickling client holds nothing for long."""

MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest POST body read (the SDK's own message limit, ``MAXIMUM_MESSAGE_SIZE``); a longer one is 413."""

_EXCHANGE = "memories.exchange"
"""The ASGI scope key of the request's :class:`_Exchange` (the SDK hands tool handlers the same scope)."""


class _Exchange:
    """The calls an HTTP exchange carries: cancelled when it ends."""

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()
        self._closed = False

    @contextlib.contextmanager
    def call(self) -> Iterator[anyio.CancelScope]:
        scope = anyio.CancelScope()
        if self._closed:
            scope.cancel()
        self._scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._scopes.discard(scope)

    def close(self) -> None:
        self._closed = True
        for scope in self._scopes:
            scope.cancel()


class _HttpPeer:
    """HTTP: each request's own bearer token; ``memory_ask``'s hint asked with it; a call ends with its exchange."""

    no_token = (
        "this request carries no grant token: send the header `Authorization: Bearer <grant token>` "
        "(`memories grant create` or `memories inject --http`)"
    )

    def __init__(self, home: Home) -> None:
        self._home = home

    def token(self, ctx: Context) -> str | None:
        request = ctx.request
        return bearer(request.headers.get("authorization") if request is not None else None)

    async def remote_generation(self, ctx: Context) -> bool:
        return status.remote_generation(await status.fetch(self._home, self.token(ctx)))

    def call_scope(self, ctx: Context) -> contextlib.AbstractContextManager[anyio.CancelScope]:
        exchange = ctx.request.scope.get(_EXCHANGE) if ctx.request is not None else None
        return exchange.call() if isinstance(exchange, _Exchange) else anyio.CancelScope()


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header; ``None`` without one or for another scheme."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class Guard:
    """The ASGI app: ``/mcp`` only, loopback ``Host`` and same-port ``Origin`` only (403 otherwise), a POST's body
    read whole within :data:`BODY_SECONDS` and an ``initialize`` only with a grant the daemon accepts (401), then
    the SDK's session manager (``manager``: anything with its ``handle_request``), with each exchange's calls
    cancelled when it ends."""

    def __init__(self, manager: StreamableHTTPSessionManager, port: int, home: Home) -> None:
        self._manager = manager
        self._home = home
        self._origins = {url_of(name, port).removesuffix(PATH) for name in LOOPBACK_NAMES}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers: dict[str, list[str]] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        if scope["path"] != PATH:
            await _refuse(send, 404, f"not found: the MCP endpoint is {PATH}")
            return
        hosts, origins = headers.get("host", []), headers.get("origin", [])
        if len(hosts) != 1 or host_name(hosts[0]) not in LOOPBACK_NAMES:
            await _refuse(send, 403, "forbidden: the Host header must name 127.0.0.1, localhost or [::1]")
            return
        if len(origins) > 1 or (origins and origins[0].strip().lower() not in self._origins):
            await _refuse(send, 403, "forbidden: requests from another origin (a web page) are not served")
            return
        if scope["method"] == "POST":
            body = await _read_body(receive, send)
            if body is None:
                return
            refusal = await self._refusal(body, headers.get("authorization", []))
            if refusal is not None:
                await _refuse(send, *refusal)
                return
            receive = _replay(body, receive)
        exchange = _Exchange()
        scope[_EXCHANGE] = exchange
        try:
            await self._manager.handle_request(scope, receive, send)
        finally:
            exchange.close()

    async def _refusal(self, body: list[MutableMapping[str, Any]], authorization: list[str]) -> tuple[int, str] | None:
        """401 or 503 and why, for an ``initialize`` without a grant the daemon accepts; ``None`` to serve."""
        if not _is_initialize(b"".join(message.get("body", b"") for message in body)):
            return None
        token = bearer(authorization[0]) if len(authorization) == 1 else None
        if token is None:
            return 401, (
                "unauthorized: initialize needs the header `Authorization: Bearer <grant token>` "
                "(`memories grant create` or `memories inject --http`)"
            )
        answer = await status.fetch(self._home, token)
        if not isinstance(answer, MemoriesError):
            return None
        if answer.code.startswith("grant_"):
            return 401, f"unauthorized: {answer.code}: the grant token is not valid for this home"
        return 503, f"unavailable: the daemon cannot check the grant token ({answer.code}: {answer.message})"


def _is_initialize(body: bytes) -> bool:
    """Whether a POST body is (or, in a batch, holds) the JSON-RPC request ``initialize``; not JSON: no (the SDK
    answers it)."""
    try:
        message = json.loads(body)
    except ValueError:
        return False
    messages = message if isinstance(message, list) else [message]
    return any(isinstance(m, dict) and m.get("method") == "initialize" for m in messages)


async def _read_body(receive: Receive, send: Send) -> list[MutableMapping[str, Any]] | None:
    """Every ``http.request`` message of the body, or ``None`` when it was refused (408 after
    :data:`BODY_SECONDS`, 413 beyond :data:`MAX_BODY_BYTES`) or the client hung up (one log line)."""
    messages: list[MutableMapping[str, Any]] = []
    size = 0
    with anyio.move_on_after(BODY_SECONDS):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                log.info("a client hung up before sending its whole request (%d bytes received)", size)
                return None
            messages.append(message)
            size += len(message.get("body", b""))
            if size > MAX_BODY_BYTES:
                await _refuse(send, 413, f"too large: a request body holds at most {MAX_BODY_BYTES} bytes")
                return None
            if not message.get("more_body", False):
                return messages
    log.info("closed a request whose body did not arrive within %g s (%d bytes received)", BODY_SECONDS, size)
    await _refuse(send, 408, f"timeout: the request body did not arrive within {BODY_SECONDS:g} s")
    return None


def _replay(body: list[MutableMapping[str, Any]], receive: Receive) -> Receive:
    """``receive`` that gives the body already read first, then what the client sends next (its disconnect)."""
    pending = list(body)

    async def again() -> MutableMapping[str, Any]:
        return pending.pop(0) if pending else await receive()

    return again


async def _refuse(send: Send, status_code: int, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status_code == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if status_code in (408, 413):
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def serve_http(home: Home, listen: str) -> None:
    """Serve MCP over HTTP on the loopback address ``listen`` (:func:`parse_listen`) until SIGTERM or SIGINT; says
    ``listening on URL`` on stderr once it accepts connections.

    Raises:
        MemoriesError: ``invalid_argument`` for an address that is not loopback or a port that cannot be bound.
    """
    address, port = parse_listen(listen)
    logging_to_stderr()
    quiet_repeats()
    sock = listen_socket(address, port, "--http")
    port = sock.getsockname()[1]
    manager = StreamableHTTPSessionManager(app=build_server(home, _HttpPeer(home)), json_response=False)
    config = uvicorn.Config(
        Guard(manager, port, home),
        http=HeaderDeadline,
        limit_concurrency=MAX_HTTP_CONNECTIONS,
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_SECONDS,
    )
    server = SignalFreeServer(config)

    async def run() -> None:
        async with manager.run(), anyio.create_task_group() as tasks:
            tasks.start_soon(stop_on_signal, server)
            print(f"listening on {url_of(address, port)}", file=sys.stderr, flush=True)
            await server.serve(sockets=[sock])
            tasks.cancel_scope.cancel()

    anyio.run(run)
