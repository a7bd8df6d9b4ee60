"""What a request handler gets besides its request: a small context, not the socket connection.

A handler adds warnings for the reply and attaches the jobs it starts, so the client sees their progress and a
client that hangs up cancels them. A job the daemon starts by itself (background indexing) runs with a context
attached to nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from memories import protocol as p

if TYPE_CHECKING:
    from memories.daemon.core.jobs import Job


class RequestContext:
    """The warnings of one request's reply, and where its jobs report.

    Args:
        attach: called with each job the request starts (the client connection streams its progress and cancels it
            on hang-up); ``None`` for work nobody waits for.
    """

    def __init__(self, attach: Callable[[Job], None] | None = None) -> None:
        self.warnings: list[str] = []
        self._attach = attach

    @property
    def detached(self) -> bool:
        """Nobody waits for this request's jobs (the daemon's own work)."""
        return self._attach is None

    def attach(self, job: Job) -> None:
        """Report ``job`` to whoever waits for this request (nobody, for the daemon's own work)."""
        if self._attach is not None:
            self._attach(job)

    def warn(self, note: str) -> None:
        """Add a warning to the reply, once."""
        if note not in self.warnings:
            self.warnings.append(note)


StartSoon = Callable[..., None]
"""Start a task in the daemon's nursery (``nursery.start_soon``): background jobs and watches outlive the request
that started them. Not the worker spawner (:data:`memories.daemon.core.workers.Spawn`, which starts processes)."""

Handler = Callable[[Any, RequestContext], Awaitable[p.Result]]
"""A request handler: the typed request and its context."""

Handlers = dict[type, Handler]
"""Request type -> handler: what each handler module exports; the supervisor merges them."""
