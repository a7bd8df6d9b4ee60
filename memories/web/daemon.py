"""The daemon's client protocol from the web app's event loop: the CLI's blocking :class:`~memories.client.Client`,
run in a worker thread so one slow request (an answer, an index) never holds up the other pages."""

from __future__ import annotations

import functools
from typing import TypeVar

import anyio.to_thread

from memories import protocol as p
from memories.client import Answer, Client
from memories.paths import Home

R = TypeVar("R")


async def call(home: Home, request: p.ClientRequest[R]) -> Answer[R]:
    """Send ``request`` to the daemon of ``home``; its result and warnings.

    Raises:
        MemoriesError: as :meth:`memories.client.Client.request` (``daemon_not_running``, ``vault_locked``, ...).
    """
    return await anyio.to_thread.run_sync(functools.partial(Client(home).request, request), abandon_on_cancel=True)
