"""Who listens on a loopback TCP port: another local account can bind the port of ``memories mcp serve --http``
while it is down and capture the bearer token a client sends (docs/security.md). ``inject --http`` refuses such
a port. Linux only (``/proc/net/tcp`` and ``tcp6`` give each socket's owner uid); elsewhere nothing is known.

>>> listener_uids(7654, [["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid",
...     "   0: 0100007F:1DE6 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001 0 42 1"]])
{1001}
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from memories.errors import MemoriesError

PROC_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
"""The kernel's TCP socket tables (IPv4, IPv6): one socket a line, the local port in hex, state ``0A`` LISTEN,
the owner's uid in the eighth column (proc(5))."""

_LISTEN = "0A"


def listener_uids(port: int, tables: Iterable[Iterable[str]] | None = None) -> set[int] | None:
    """The uids owning a socket that listens on TCP ``port`` (any address); ``None`` where the tables cannot be
    read (not Linux). ``tables``: the tables' lines (default: read :data:`PROC_TABLES`)."""
    if tables is None:
        tables = _read_tables()
        if tables is None:
            return None
    owners: set[int] = set()
    for lines in tables:
        for line in list(lines)[1:]:
            fields = line.split()
            if len(fields) < 8 or fields[3] != _LISTEN:
                continue
            _, _, hex_port = fields[1].rpartition(":")
            if int(hex_port, 16) == port:
                owners.add(int(fields[7]))
    return owners


def refuse_foreign(port: int, owners: set[int] | None) -> None:
    """Refuse a port whose listeners (``owners``, from :func:`listener_uids`) include another user's.

    Raises:
        MemoriesError: ``http_port_foreign`` naming the port and the uid.
    """
    others = sorted(uid for uid in owners or () if uid != os.getuid())
    if others:
        raise MemoriesError(
            "http_port_foreign",
            f"--http: port {port} is held by a process of another user (uid {others[0]}), which would receive "
            "the grant token a client sends: stop it or pick another port for `memories mcp serve --http`",
        )


def listen_uids_known() -> bool:
    """Whether this system shows sockets' owners (:data:`PROC_TABLES` readable)."""
    return _read_tables() is not None


def _read_tables() -> list[list[str]] | None:
    tables = []
    for path in PROC_TABLES:
        try:
            with open(path, encoding="ascii") as table:
                tables.append(table.read().splitlines())
        except OSError:
            continue
    return tables or None
