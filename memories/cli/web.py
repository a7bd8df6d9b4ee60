"""``memories web``: the vault in a browser, on loopback (jinja2, markdown-it and nh3 load only here)."""

from __future__ import annotations

import click

from memories.cli.output import Session, command


@command(None, "web")
@click.option("--port", type=click.IntRange(0, 65535), default=8766, show_default=True, help="Port on 127.0.0.1.")
@click.option("--open", "open_browser", is_flag=True, help="Open the link in the default browser.")
def web(session: Session, port: int, open_browser: bool) -> None:
    """Serve search, notes, ask and status at http://127.0.0.1:PORT/ until SIGTERM or Ctrl-C; prints a link with a
    one-time token on stderr (docs/guide/web.md)."""
    from memories.hardening import harden_process

    harden_process()  # first, as mcp serve: it relays notes
    from memories.web.serve import serve_web

    serve_web(session.home, port, open_browser)
