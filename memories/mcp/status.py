"""What the MCP server tells its client about the grant it holds: the server's ``instructions``, from the live state.

A few lines, from one granted status request to the daemon (:class:`~memories.protocol.ToolStatus`, answered
without building a cache or embedding): which vault the grant reaches and with which tools, how many records are
searchable, whether vector search is ready (the share of the vault's chunks that have a vector, known only while
its cache is warm, else "unknown"), whether ``memory_ask`` is configured and whether its service is on this machine,
or that the home is locked, or why the server cannot tell (no daemon, no valid grant). Nothing secret and no titles:
the vault's name is the most it says. The request is bounded by :data:`STATUS_SECONDS`, so a slow daemon delays a
client's ``initialize`` by that much at most.
"""

from __future__ import annotations

import json

import anyio

from memories import protocol as p
from memories.errors import MemoriesError
from memories.mcp import link
from memories.paths import Home

STATUS_SECONDS = 5.0
"""How long the server waits for the daemon's status before saying the state is unknown."""

USAGE = (
    "Read-only access to one vault of the user's encrypted Memories notes, limited by the user's grant. "
    "Use memory_retrieve for questions about the notes and cite the labels ([S1]); memory_read pages through a "
    "note; results are capped and say truncated."
)
"""The first line of the instructions, whatever the state."""


async def fetch(home: Home, token: str | None) -> p.ToolStatusReport | MemoriesError:
    """The daemon's status for the grant of ``token``, or the error that stands for it (``grant_invalid``
    without a token, ``daemon_not_running``, ``daemon_unresponsive`` after :data:`STATUS_SECONDS`, the grant's
    failures)."""
    if not token:
        return MemoriesError("grant_invalid", "no grant token")
    try:
        with anyio.fail_after(STATUS_SECONDS):
            answer = await link.request(home, p.Granted(token=token, call=p.ToolStatus()))
        assert isinstance(answer.result, p.ToolStatusReport)  # what ToolStatus declares, decoded as such
        return answer.result
    except TimeoutError:
        return MemoriesError("daemon_unresponsive", f"the daemon did not answer within {STATUS_SECONDS:.0f} s")
    except MemoriesError as exc:  # RequestFailed is one
        return exc


def remote_generation(status: p.ToolStatusReport | MemoriesError) -> bool:
    """Whether ``memory_ask`` sends the notes to a service that leaves the machine (``openWorldHint``); ``False``
    when the daemon could not say."""
    return isinstance(status, p.ToolStatusReport) and status.generation == "remote"


def instructions(status: p.ToolStatusReport | MemoriesError) -> str:
    """The server's instructions for ``status`` (see the module docstring).

    >>> print(instructions(p.ToolStatusReport(locked=True, generation="none")))  # doctest: +ELLIPSIS
    Read-only access ...
    The user's Memories home is locked: every call fails with vault_locked until the user unlocks it.
    """
    lines = [USAGE]
    if isinstance(status, MemoriesError):
        lines.append(_unknown(status))
    elif status.locked:
        lines.append(
            "The user's Memories home is locked: every call fails with vault_locked until the user unlocks it."
        )
    else:
        tools = ", ".join(f"memory_{scope}" for scope in status.scope)
        lines.append(
            f"This grant reaches the vault {json.dumps(status.vault, ensure_ascii=False)} with {tools}; "
            f"{_notes(status.records or 0)} searchable."
        )
        lines.append(_vectors(status))
        if "ask" in status.scope:
            lines.append(_generation(status))
    return "\n".join(lines)


def _notes(count: int) -> str:
    return "1 note is" if count == 1 else f"{count:,} notes are"


def _unknown(error: MemoriesError) -> str:
    if error.code == "daemon_not_running":
        return "The Memories daemon is not running: every call fails until the user starts and unlocks it."
    if error.code in ("grant_invalid", "grant_expired", "grant_revoked"):
        return f"This server holds no valid grant ({error.code}): every call fails until the user gives it one."
    return f"The state of the user's notes is unknown ({error.code}); calls may still work."


def _vectors(status: p.ToolStatusReport) -> str:
    if status.model is False:
        return "Vector search: not available (no embedding model is installed); searches use BM25."
    if status.embedded is None:
        return "Vector search: unknown until the first search; memory_retrieve uses BM25 while it is not ready."
    if status.embedded >= 1:
        return "Vector search: ready (every chunk of the vault has a vector); memory_retrieve is hybrid."
    return (
        f"Vector search: {int(status.embedded * 100)}% of the vault's chunks have a vector; memory_retrieve uses BM25 "
        "while many are missing."
    )


def _generation(status: p.ToolStatusReport) -> str:
    if status.generation == "none":
        return (
            "memory_ask: not configured by the user; use memory_retrieve and answer from its chunks, citing their "
            "labels."
        )
    where = "outside this machine" if status.generation == "remote" else "on this machine"
    return f"memory_ask: answers with the user's generation service {where}, citing the notes it was shown."
