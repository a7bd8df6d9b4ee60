"""``memories mcp serve``: the MCP server on stdio, on the official SDK's low-level ``Server`` (``mcp`` 2.x).

Only this module and :mod:`memories.mcp.stdio` import the SDK, and only ``mcp serve`` imports them, so no other
command pays for it.

- stdout carries protocol messages only: nothing is printed before the transport starts, the SDK's stdio
  transport points fd 1 at stderr while it serves (a stray print cannot corrupt the stream), logging goes to
  stderr (``MEMORIES_DEBUG=1`` for debug logs), and nothing ever prompts.
- The grant token comes from ``MEMORIES_GRANT_TOKEN`` only (never an argument). Without it the server still
  starts and every call fails with ``grant_invalid``, so the client shows why.
- Each call is one daemon request (:mod:`memories.mcp.link`), checked in the daemon against the grant. A result
  carries the document as structured content and as one JSON text block; a failure is a tool result with
  ``isError`` and one line, ``code: message``.
- Every request gets an answer: a line the SDK cannot read (not JSON, or a string with a lone surrogate) is
  answered with a JSON-RPC error (:mod:`memories.mcp.stdio`), and the server reads on.
- The server exits when stdin ends (the client closed it, or died); a call in flight is cancelled with it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import anyio
import mcp.types as types
import msgspec
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from memories import __version__
from memories import protocol as p
from memories.clients import TOKEN_ENV
from memories.errors import MemoriesError
from memories.mcp import link
from memories.mcp.stdio import AnsweringReader, error_line
from memories.mcp.tools import TOOLS, decode
from memories.paths import Home

log = logging.getLogger("memories.mcp")

INSTRUCTIONS = (
    "Read-only access to one vault of the user's encrypted Memories notes, limited by the user's grant. "
    "Use memory_retrieve for questions about the notes and cite the labels ([S1]); memory_read pages through a "
    "note; results are capped and say truncated."
)


def _error(exc: MemoriesError) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=error_line(exc))], is_error=True)


def _result(reply: p.ClientReply) -> types.CallToolResult:
    document: dict[str, Any] = reply.document()
    if reply.warnings:
        document["warnings"] = reply.warnings
    text = msgspec.json.encode(document).decode("utf-8")
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=document)


class _Handlers:
    def __init__(self, home: Home, token: str) -> None:
        self._home = home
        self._token = token

    async def list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=spec.name, description=spec.description, input_schema=spec.input_schema())
                for spec in TOOLS.values()
            ]
        )

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            if not self._token.strip():
                raise MemoriesError(
                    "grant_invalid",
                    f"{TOKEN_ENV} is not set; give this server a grant token (`memories inject` or "
                    "`memories grant create`)",
                )
            call = decode(params.name, params.arguments)
            return _result(await link.request(self._home, p.Granted(token=self._token, call=call)))
        except MemoriesError as exc:
            log.debug("%s failed: %s", params.name, exc.code)
            return _error(exc)
        except Exception as exc:  # a bug: still one line for the client; the details go to stderr
            log.exception("%s failed unexpectedly", params.name)
            return _error(MemoriesError("internal_error", f"the MCP server failed ({type(exc).__name__})"))


def serve(home: Home) -> None:
    """Serve MCP on stdin/stdout until stdin ends."""
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if os.environ.get("MEMORIES_DEBUG") else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    # Bytes that are not UTF-8 come back from the environment as lone surrogates, which cannot be sent; as U+FFFD
    # the token is judged by the daemon like any other malformed one (grant_invalid, its one message).
    token = os.environ.get(TOKEN_ENV, "").encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    handlers = _Handlers(home, token)
    server: Server[Any] = Server(
        "memories",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
    )

    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream):
            reader = AnsweringReader(read_stream, write_stream)
            await server.run(reader, write_stream, server.create_initialization_options())

    anyio.run(run)
