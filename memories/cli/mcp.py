"""``mcp serve``: the MCP server on stdio for AI clients (the SDK loads only here)."""

from __future__ import annotations

import click

from memories.cli.output import Session, command, common_options


@click.group()
@common_options
def mcp(json_mode: bool, home: str | None, config: str | None) -> None:
    """The MCP server for AI clients (`memories inject` configures them)."""


@command(mcp)
def serve(session: Session) -> None:
    """Serve MCP on stdin/stdout with the grant token in MEMORIES_GRANT_TOKEN; ends when stdin ends."""
    from memories.hardening import harden_process

    harden_process()  # first, as the daemon does: it holds the grant token and the notes it relays
    from memories.mcp.server import serve_stdio

    serve_stdio(session.home)
