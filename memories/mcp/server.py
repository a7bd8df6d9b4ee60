"""``memories mcp serve``: the MCP server, one ``mcp`` SDK 2.x low-level ``Server`` for stdio and HTTP.

Only this package imports the SDK, and only ``mcp serve`` imports it, so no other command pays for it.

The SDK serves every protocol revision a client may send, on both transports: the ``initialize`` handshake of
2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25 (the version asked for, or 2025-11-25 for one it does not know),
and the stateless 2026-07-28 revision (``server/discover``, each request's ``_meta`` naming its version and
capabilities, ``resultType``; an unknown version there is error -32022 naming the supported ones). What is ours:

- the four tools (:mod:`memories.mcp.tools`), listed in one fixed order with their titles, hints and schemas;
  ``memory_ask``'s ``openWorldHint`` is true only when the daemon reports a generation service that leaves the
  machine (on stdio asked once at the start, over HTTP for each listing with its own token);
- the instructions of ``initialize`` and ``server/discover``, from the live state of the request's grant
  (:mod:`memories.mcp.status`), through a server middleware;
- each call is one daemon request (:mod:`memories.mcp.link`) under the request's grant token, checked in the
  daemon. A result carries the document as structured content and as one JSON text block; a failure is a tool
  result with ``isError`` and one line, ``code: message``. The daemon's progress frames of a call go to the client
  as ``notifications/progress`` when it sent a ``progressToken``;
- a call ends with its request: the client's cancellation (a ``notifications/cancelled``, the end of stdin, the
  HTTP exchange that carried it closing) closes the daemon socket, and the daemon cancels the job (R-44).

What differs between the transports is a :class:`Peer`: where a request's token comes from (stdio: the
``MEMORIES_GRANT_TOKEN`` variable; HTTP: its ``Authorization`` header), and what else ends a call.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import AbstractContextManager
from typing import Any, Protocol

import anyio
import mcp.types as types
import msgspec
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from memories import __version__
from memories import protocol as p
from memories.client import Answer
from memories.clients import TOKEN_ENV
from memories.errors import MemoriesError
from memories.logs import debug_own_loggers_only, log_failure
from memories.mcp import link, status
from memories.mcp.stdio import AnsweringReader, error_line
from memories.mcp.tools import TOOLS, ToolSpec, decode
from memories.paths import Home

log = logging.getLogger("memories.mcp")

Context = ServerRequestContext[Any, Any]

PROGRESS_STEP = 1 / 1024
"""How much a progress notification's value grows when the daemon's count did not (a note alone, such as a retry
being waited for): MCP requires each notification's progress to be larger than the last."""


class Peer(Protocol):
    """What the transport decides for a request."""

    def token(self, ctx: Context) -> str | None:
        """The grant token the request carries, ``None`` for none."""

    no_token: str
    """The message of the ``grant_invalid`` a call without a token gets: what to give the server."""

    async def remote_generation(self, ctx: Context) -> bool:
        """Whether ``memory_ask`` sends notes off the machine, as the daemon reported it for this request."""

    def call_scope(self, ctx: Context) -> AbstractContextManager[anyio.CancelScope]:
        """The cancel scope a call runs in: the transport cancels it when the request's exchange ends."""


def logging_to_stderr() -> None:
    """Warnings and errors to stderr; never to stdout, never a token. With ``MEMORIES_DEBUG=1`` also Memories' own
    DEBUG lines and the libraries' INFO ones, never a library's DEBUG line: sse_starlette's quote each event streamed,
    a tool result with note text (:func:`memories.logs.debug_own_loggers_only`)."""
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if os.environ.get("MEMORIES_DEBUG") else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    debug_own_loggers_only()


def _tool(spec: ToolSpec, open_world: bool) -> types.Tool:
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        annotations=types.ToolAnnotations(
            title=spec.title,
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=spec.idempotent,
            open_world_hint=open_world and spec.name == "memory_ask",
        ),
    )


def _error(exc: MemoriesError) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=error_line(exc))], is_error=True)


def _result(answer: Answer[p.ToolResult]) -> types.CallToolResult:
    document = p.document(answer.result)
    if answer.warnings:
        document["warnings"] = answer.warnings
    text = msgspec.json.encode(document).decode("utf-8")
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=document)


class _Progress:
    """Forwards a call's progress frames to the client (a no-op when its request has no ``progressToken``)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._last: float | None = None

    async def __call__(self, frame: p.Progress) -> None:
        value = float(frame.done)
        if self._last is not None and value <= self._last:
            value = self._last + PROGRESS_STEP
        self._last = value
        total = float(frame.total) if frame.total is not None and frame.total >= value else None
        message = frame.note
        if message is None:
            message = (
                f"{frame.done:,} of {frame.total:,} {frame.unit}" if frame.total else f"{frame.done:,} {frame.unit}"
            )
        await self._ctx.session.report_progress(value, total, message)


class _Handlers:
    def __init__(self, home: Home, peer: Peer) -> None:
        self._home = home
        self._peer = peer

    async def list_tools(self, ctx: Context, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        open_world = await self._peer.remote_generation(ctx)
        return types.ListToolsResult(tools=[_tool(spec, open_world) for spec in TOOLS.values()])

    async def call_tool(self, ctx: Context, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            token = self._peer.token(ctx)
            if not token or not token.strip():
                raise MemoriesError("grant_invalid", self._peer.no_token)
            call = decode(params.name, params.arguments)
            with self._peer.call_scope(ctx) as scope:
                reply = await link.request(self._home, p.Granted(token=token, call=call), _Progress(ctx))
            if scope.cancelled_caught:  # its exchange ended: nobody reads this answer
                return _error(MemoriesError("cancelled", "the client went away; the call was cancelled"))
            return _result(reply)
        except MemoriesError as exc:
            log.debug("%s failed: %s", params.name, exc.code)
            return _error(exc)
        except Exception as exc:  # a bug: still one line for the client; the details go to stderr
            log_failure(log, f"{params.name} failed unexpectedly", exc)
            return _error(MemoriesError("internal_error", f"the MCP server failed ({type(exc).__name__})"))

    async def instructions(self, ctx: Context, call_next: CallNext) -> HandlerResult:
        """Server middleware: the instructions of ``initialize`` and ``server/discover`` for the request's grant."""
        result = await call_next(ctx)
        if ctx.method in ("initialize", "server/discover") and isinstance(result, dict):
            result["instructions"] = status.instructions(await status.fetch(self._home, self._peer.token(ctx)))
        return result


def build_server(home: Home, peer: Peer) -> Server[Any]:
    """The SDK server of the tools for ``home``'s daemon, its requests judged by ``peer``."""
    handlers = _Handlers(home, peer)
    server: Server[Any] = Server(
        "memories",
        version=__version__,
        title="Memories",
        instructions=status.USAGE,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        # Mcp-Param header checks of a 2026-07-28 call read the schema here, not through a tools/list round trip.
        get_tool_input_schema=lambda name: TOOLS[name].input_schema if name in TOOLS else None,
    )
    server.middleware.append(handlers.instructions)
    return server


class _StdioPeer:
    """stdio: one token for every request, from the environment; ``memory_ask``'s hint as the daemon said at the
    start; nothing but the client's cancellation or the end of stdin ends a call."""

    no_token = f"{TOKEN_ENV} is not set; give this server a grant token (`memories inject` or `memories grant create`)"

    def __init__(self, token: str, remote: bool) -> None:
        self._token = token
        self._remote = remote

    def token(self, ctx: Context) -> str | None:
        return self._token

    async def remote_generation(self, ctx: Context) -> bool:
        return self._remote

    def call_scope(self, ctx: Context) -> AbstractContextManager[anyio.CancelScope]:
        return anyio.CancelScope()


def serve_stdio(home: Home) -> None:
    """Serve MCP on stdin/stdout until stdin ends (the client closed it, or died); a call in flight is cancelled.

    stdout carries protocol messages only: nothing is printed before the transport starts, the SDK's stdio
    transport points fd 1 at stderr while it serves (a stray print cannot corrupt the stream), logging goes to
    stderr, and nothing ever prompts. Every line gets an answer, also one the SDK cannot read
    (:mod:`memories.mcp.stdio`). The grant token comes from ``MEMORIES_GRANT_TOKEN`` only (never an argument);
    without it the server still starts and every call fails with ``grant_invalid``, so the client shows why.
    """
    logging_to_stderr()
    # Bytes that are not UTF-8 come back from the environment as lone surrogates, which cannot be sent; as U+FFFD
    # the token is judged by the daemon like any other malformed one (grant_invalid, its one message).
    token = os.environ.get(TOKEN_ENV, "").encode("utf-8", "surrogateescape").decode("utf-8", "replace")

    async def run() -> None:
        remote = status.remote_generation(await status.fetch(home, token))
        server = build_server(home, _StdioPeer(token, remote))
        async with stdio_server() as (read_stream, write_stream):
            reader = AnsweringReader(read_stream, write_stream)
            await server.run(reader, write_stream, server.create_initialization_options())

    anyio.run(run)
