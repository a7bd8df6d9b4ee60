"""``mcp serve``: the MCP server for AI clients, on stdio or on a loopback HTTP port (the SDK loads only here)."""

from __future__ import annotations

import click

from memories.cli.output import Session, command, common_options


@click.group()
@common_options
def mcp(json_mode: bool, home: str | None, config: str | None) -> None:
    """The MCP server for AI clients (`memories inject` configures them)."""


@command(mcp)
@click.option(
    "--http",
    "listen",
    metavar="[127.0.0.1:]PORT",
    help="Serve Streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio (loopback only; port 0 picks a free "
    "one); each request sends its grant token as `Authorization: Bearer`.",
)
def serve(session: Session, listen: str | None) -> None:
    """Serve MCP on stdin/stdout with the grant token in MEMORIES_GRANT_TOKEN (ends when stdin ends), or over
    HTTP with --http (ends on SIGTERM)."""
    from memories.hardening import harden_process

    harden_process()  # first, as the daemon does: it holds the grant token(s) and the notes it relays
    if listen is None:
        from memories.mcp.server import serve_stdio

        serve_stdio(session.home)
        return
    from memories.mcp.http import serve_http

    serve_http(session.home, listen)


@command(mcp)
@click.option(
    "--http",
    "listen",
    required=True,
    metavar="[127.0.0.1:]PORT",
    help="The port `memories mcp serve --http` listens on (or should).",
)
def status(session: Session, listen: str) -> int:
    """Who listens on the MCP HTTP port: nobody, you, or another user (whose process would capture the grant
    token a client sends; http_port_foreign). Linux; elsewhere it cannot tell."""
    from memories.mcp.endpoint import parse_listen, url_of
    from memories.mcp.listener import listener_uids, refuse_foreign

    address, port = parse_listen(listen)
    owners = listener_uids(port)
    refuse_foreign(port, owners)
    if owners is None:
        listening = "unknown (this system does not show sockets' owners)"
    elif owners:
        listening = "yes, by you"
    else:
        listening = "no: nothing listens on the port (start `memories mcp serve --http`)"
    document = {"url": url_of(address, port), "listening": None if owners is None else bool(owners)}
    session.emit(document, [], lambda doc: click.echo(f"{doc['url']}: listening: {listening}"))
    return 0
