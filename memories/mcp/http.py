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

from memories.mcp import status
from memories.mcp.endpoint import LOOPBACK_NAMES, PATH, parse_listen, url_of
from memories.mcp.server import Context, build_server, logging_to_stderr
from memories.paths import Home
from memories.serving import SignalFreeServer, host_name, listen_socket, stop_on_signal

log = logging.getLogger("memories.mcp")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
"""The ASGI callables' types (the ASGI 3 specification)."""

SHUTDOWN_SECONDS = 5
"""How long SIGTERM waits for open exchanges (a client's GET stream stays open) before closing them."""

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
        header = request.headers.get("authorization") if request is not None else None
        if header is None:
            return None
        scheme, _, token = header.strip().partition(" ")
        return token.strip() if scheme.lower() == "bearer" else None

    async def remote_generation(self, ctx: Context) -> bool:
        return status.remote_generation(await status.fetch(self._home, self.token(ctx)))

    def call_scope(self, ctx: Context) -> contextlib.AbstractContextManager[anyio.CancelScope]:
        exchange = ctx.request.scope.get(_EXCHANGE) if ctx.request is not None else None
        return exchange.call() if isinstance(exchange, _Exchange) else anyio.CancelScope()


class Guard:
    """The ASGI app: ``/mcp`` only, loopback ``Host`` and same-port ``Origin`` only (403 otherwise), then the
    SDK's session manager, with each exchange's calls cancelled when it ends."""

    def __init__(self, manager: StreamableHTTPSessionManager, port: int) -> None:
        self._manager = manager
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
        exchange = _Exchange()
        scope[_EXCHANGE] = exchange
        try:
            await self._manager.handle_request(scope, receive, send)
        finally:
            exchange.close()


async def _refuse(send: Send, status_code: int, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
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
    sock = listen_socket(address, port, "--http")
    port = sock.getsockname()[1]
    manager = StreamableHTTPSessionManager(app=build_server(home, _HttpPeer(home)), json_response=False)
    config = uvicorn.Config(
        Guard(manager, port),
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
