"""``memories web``'s server: 127.0.0.1 only, the :class:`~memories.web.gate.Gate` in front of the pages, uvicorn
with no access log (a logged URL would hold the link token), :mod:`memories.serving`'s header deadline and
connection cap, ended by SIGTERM or Ctrl-C with status 0."""

from __future__ import annotations

import sys
import webbrowser

import anyio
import uvicorn

from memories.paths import Home
from memories.serving import MAX_HTTP_CONNECTIONS, HeaderDeadline, SignalFreeServer, listen_socket, stop_on_signal
from memories.web.access import Access
from memories.web.gate import Gate
from memories.web.pages import Pages

ADDRESS = "127.0.0.1"
"""The only address served: loopback (plain HTTP would hand the session to the network)."""

DEFAULT_PORT = 8766
"""``--port``'s default (``mcp serve --http`` examples use 8765)."""


def build(home: Home, port: int, access: Access) -> Gate:
    """The whole ASGI app for the daemon of ``home`` served on ``port``."""
    return Gate(Pages(home).app(), access, port)


def serve_web(home: Home, port: int, open_browser: bool) -> None:
    """Serve the web app on 127.0.0.1 port ``port`` (0: a free one) until SIGTERM or SIGINT; prints the link with
    its one-time token on stderr (flushed) once it accepts connections, and opens it with ``open_browser``.

    Raises:
        MemoriesError: ``invalid_argument`` naming ``--port`` when the port cannot be bound.
    """
    sock = listen_socket(ADDRESS, port, "--port")
    port = sock.getsockname()[1]
    access = Access()
    config = uvicorn.Config(
        build(home, port, access),
        lifespan="off",
        log_level="warning",
        access_log=False,
        http=HeaderDeadline,
        limit_concurrency=MAX_HTTP_CONNECTIONS,
    )
    server = SignalFreeServer(config)
    link = f"http://{ADDRESS}:{port}/search?token={access.token}"

    async def run() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(stop_on_signal, server)
            print(f"memories web: open {link}", file=sys.stderr, flush=True)
            if open_browser:
                webbrowser.open(link)
            await server.serve(sockets=[sock])
            tasks.cancel_scope.cancel()

    anyio.run(run)
