"""Where ``memories mcp serve --http`` listens, as ``serve`` and ``inject --http`` both spell it (no SDK import).

>>> url_of(*parse_listen("8765"))
'http://127.0.0.1:8765/mcp'
"""

from __future__ import annotations

from memories.errors import MemoriesError

PATH = "/mcp"
"""The one path the HTTP endpoint serves."""

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
"""Host names a request may address and the server may bind."""


def parse_listen(text: str) -> tuple[str, int]:
    """``PORT``, ``127.0.0.1:PORT``, ``localhost:PORT`` or ``[::1]:PORT`` as ``(address, port)``; port 0 picks a
    free one.

    >>> parse_listen("8765"), parse_listen("[::1]:0")
    (('127.0.0.1', 8765), ('::1', 0))

    Raises:
        MemoriesError: ``invalid_argument`` for another address (only loopback is served: the message says how to
            reach it from elsewhere) or a port that is not 0 to 65535.
    """
    host, _, port_text = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
    if not (port_text.isascii() and port_text.isdigit() and int(port_text) <= 65535):
        raise MemoriesError("invalid_argument", f"--http {text}: expected [127.0.0.1:]PORT with a port 0 to 65535")
    if host not in LOOPBACK_NAMES:
        raise MemoriesError(
            "invalid_argument",
            f"--http {text}: the MCP endpoint binds to loopback only (127.0.0.1 or [::1]): plain HTTP would hand "
            "grant tokens to the network; reach it from another machine through an SSH tunnel "
            "(ssh -L PORT:127.0.0.1:PORT this-host)",
        )
    return ("127.0.0.1" if host == "localhost" else host), int(port_text)


def url_of(address: str, port: int) -> str:
    """The endpoint's URL: ``http://127.0.0.1:8765/mcp``, ``http://[::1]:8765/mcp``."""
    shown = f"[{address}]" if ":" in address else address
    return f"http://{shown}:{port}{PATH}"
