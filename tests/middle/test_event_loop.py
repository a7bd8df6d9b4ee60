"""Nothing blocking on the daemon's event loop (issue 7, acceptance 4): every store call runs in a thread holding the
store's limiter, and answering a request opens no file on the event loop (an audit hook on ``open`` checks the
thread). The requests go through the real socket server, as a client's would."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from memories import protocol as p
from memories.client import Client
from memories.daemon.server import serve_socket
from memories.paths import Home
from tests.fixtures.middle import PASSPHRASE, Middle

_opened_on_loop: list[str] = []
_watching = threading.Event()
_loop_thread: list[threading.Thread] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _watching.is_set() and threading.current_thread() in _loop_thread:
        path = args[0]
        name = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else repr(path)
        if not name.endswith((".py", ".pyc", ".so")):  # lazy imports are not replies reading files
            _opened_on_loop.append(name)


sys.addaudithook(_audit)  # audit hooks cannot be removed: this one only records while a test watches


@pytest.fixture
def watching() -> Iterator[list[str]]:
    _opened_on_loop.clear()
    _loop_thread[:] = [threading.current_thread()]
    yield _opened_on_loop
    _watching.clear()


REQUESTS: list[p.Request] = [
    p.Status(),
    p.VaultList(),
    p.VaultShow(vault="notes"),
    p.MemoryAdd(vault="notes", kind="memory", sensitivity="general", title="t", body=b"alpha body"),
    p.MemoryList(vault="notes"),
    p.MemorySearch(vault="notes", query="alpha"),
    p.RagStatus(vault="notes"),
    p.Jobs(),
    p.Unlock(passphrase=PASSPHRASE),
    p.Lock(),
    p.RagStatus(vault="notes"),
    p.Unlock(passphrase=PASSPHRASE),
]


async def _ask_all(middle: Middle, home: Home) -> list[str]:
    client = Client(home)
    codes = []
    for request in REQUESTS:
        reply = await trio.to_thread.run_sync(client.request, request)
        codes.append(type(reply).__name__)
    return codes


async def test_no_reply_opens_a_file_on_the_event_loop(middle: Middle, watching: list[str]) -> None:
    root = middle.daemon.home.root
    Path(middle.daemon.home.config_path).write_text("[daemon]\nauto_lock_minutes = 0\n")  # a config to re-read
    home = Home(root, middle.daemon.home.config_path)
    async with trio.open_nursery() as nursery:
        socket = Path(middle.daemon.home.socket_path)
        socket.parent.mkdir(mode=0o700, exist_ok=True)
        await nursery.start(serve_socket, socket, middle.daemon.handle, middle.daemon.warnings)
        await _ask_all(middle, home)  # once for lazy imports and first loads
        _watching.set()
        codes = await _ask_all(middle, home)
        _watching.clear()
        nursery.cancel_scope.cancel()
    assert codes == ["Answer"] * len(REQUESTS)  # a result each, of the type its request declares
    assert watching == []


async def test_no_store_call_runs_outside_the_limiter(middle: Middle) -> None:
    gate = middle.daemon.store
    loop = threading.current_thread()
    outside: list[str] = []
    store = middle.daemon.record_store.store
    for name in [n for n in dir(store) if not n.startswith("_") and callable(getattr(store, n))]:
        method = getattr(store, name)

        def checked(*args: Any, _method: Any = method, _name: str = name) -> Any:
            if threading.current_thread() is loop or gate.exclusive().borrowed_tokens != 1:
                outside.append(_name)
            return _method(*args)

        setattr(store, name, checked)
    for request in REQUESTS:
        await middle.ok(request)
    await middle.ok(p.VaultCreate(name="second"))
    assert outside == []
