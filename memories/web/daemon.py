"""The daemon's client protocol from the web app's event loop: the CLI's blocking :class:`~memories.client.Client`,
run in a worker thread so one slow request (an answer, an index) never holds up the other pages.

A call that is cancelled (the browser went away: :func:`until_hangup`) shuts its socket to the daemon down, so
the daemon sees its client hang up and cancels the request's foreground job (an ``ask`` waiting on the model),
as it does for a CLI stopped with Ctrl-C; the worker thread then ends with the closed socket.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
from typing import TypeVar

import anyio
import anyio.to_thread

from memories import protocol as p
from memories.client import Answer, Client
from memories.errors import MemoriesError
from memories.paths import Home
from memories.web.gate import Receive

R = TypeVar("R")

SILENCE_SECONDS = p.SILENCE_SECONDS
"""Seconds without a frame from the daemon (it sends a heartbeat every second) before a call fails with
``daemon_unresponsive``: the protocol's (a test lengthens it, to tell a hang-up from that timeout)."""


class _Closable(Client):
    """A :class:`Client` whose sockets another thread can shut down (:meth:`close`); once closed it opens none."""

    def __init__(self, home: Home) -> None:
        super().__init__(home)
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False

    def connect(self, timeout: float | None = p.SILENCE_SECONDS) -> socket.socket:
        sock = super().connect(timeout)
        with self._lock:
            self._sockets.append(sock)
            closed = self._closed
        if closed:
            self._shut(sock)
        return sock

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = list(self._sockets)
        for sock in sockets:
            self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # closed already by the worker thread
            sock.shutdown(socket.SHUT_RDWR)


async def call(home: Home, request: p.ClientRequest[R]) -> Answer[R]:
    """Send ``request`` to the daemon of ``home``; its result and warnings. Cancelled, it hangs up on the daemon.

    Raises:
        MemoriesError: as :meth:`memories.client.Client.request` (``daemon_not_running``, ``vault_locked``, ...).
    """
    client = _Closable(home)
    try:
        return await anyio.to_thread.run_sync(
            functools.partial(client.request, request, timeout=SILENCE_SECONDS), abandon_on_cancel=True
        )
    except anyio.get_cancelled_exc_class():
        client.close()
        raise


async def until_hangup(home: Home, request: p.ClientRequest[R], receive: Receive) -> Answer[R] | None:
    """:func:`call`, cut when the browser hangs up first (``receive``, the request's ASGI channel whose body was
    read, says ``http.disconnect``: the person pressed cancel or stop, or left the page); ``None`` then.

    Raises:
        MemoriesError: as :func:`call`.
    """
    answer: Answer[R] | None = None
    failure: MemoriesError | None = None

    async def ask(scope: anyio.CancelScope) -> None:
        nonlocal answer, failure
        try:
            answer = await call(home, request)
        except MemoriesError as exc:
            failure = exc
        scope.cancel()

    async def watch(scope: anyio.CancelScope) -> None:
        while (await receive()).get("type") != "http.disconnect":
            pass
        scope.cancel()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(ask, tasks.cancel_scope)
        tasks.start_soon(watch, tasks.cancel_scope)
    if failure is not None:
        raise failure
    return answer
