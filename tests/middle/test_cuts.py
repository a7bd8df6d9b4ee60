"""What the daemon does when a call is cut from outside: a lock during a slow step, a job over its budget, an idle
home, a client that hangs up. In-process (tests/fixtures/middle.py); time is trio's ``MockClock`` where it
matters. Moved from tests/e2e/test_vault_daemon.py (issue 18 item 4), which keeps a smoke test of the hang-up through
the CLI; tests/e2e/test_remote.py keeps one of a lock during a slow step."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import DaemonConfig
from memories.daemon.server import serve_socket
from memories.errors import MemoriesError
from memories.framing import MAX_CLIENT_FRAME, FrameStream
from tests.fixtures.middle import Middle, running_middle


async def _outcome(middle: Middle, request: p.Request, into: dict[str, Any]) -> None:
    try:
        into["result"] = await middle.ok(request)
    except MemoriesError as exc:
        into["error"] = exc


def _hold_queries(middle: Middle) -> trio.Event:
    """Hold the index worker's next queries until the returned event is set; ``started`` says when one arrived."""
    middle.index.started.pop(w.IndexQuery, None)
    hold = middle.index.holds[w.IndexQuery] = trio.Event()
    return hold


async def _query_started(middle: Middle) -> None:
    await middle.index.started.setdefault(w.IndexQuery, trio.Event()).wait()


async def test_lock_during_a_slow_step_never_delivers_its_result(middle: Middle) -> None:
    await middle.add("locked away", title="secret")
    search = p.RagSearch(vault="notes", query="locked")
    await middle.ok(search)  # warm the cache
    hold = _hold_queries(middle)
    outcome: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_outcome, middle, search, outcome)
        await _query_started(middle)
        await middle.ok(p.Lock())
        hold.set()
    assert "result" not in outcome and outcome["error"].code == "vault_locked"
    assert "locked away" not in msgspec.json.encode(outcome["error"].details).decode() + outcome["error"].message


async def test_job_over_budget_ends_at_the_next_step_check(tmp_path: Path, mock_clock: trio.testing.MockClock) -> None:
    async with running_middle(tmp_path, daemon=DaemonConfig(job_budget_seconds=1)) as middle:
        await middle.add("budget test", title="slow")
        sync = middle.index.handlers()[w.IndexSync]

        async def slow_sync(request: w.IndexSync) -> Any:
            mock_clock.jump(1.5)  # the step takes longer than the whole budget
            return await sync(request)

        middle.fakes["index"].handlers[w.IndexSync] = slow_sync
        with pytest.raises(MemoriesError) as caught:
            await middle.ok(p.RagSearch(vault="notes", query="budget"))
        assert caught.value.code == "budget_exceeded" and "budget of 1 s" in caught.value.message
        job = (await middle.ok(p.Jobs())).jobs[-1]
        assert job.error is not None
        assert (job.kind, job.state, job.error.code) == ("search", "failed", "budget_exceeded")


async def test_idle_auto_lock(tmp_path: Path, mock_clock: trio.testing.MockClock) -> None:
    idle = DaemonConfig(job_budget_seconds=300, auto_lock_minutes=0.02)  # 1.2 s idle
    async with running_middle(tmp_path, daemon=idle) as middle:
        for _ in range(120):  # virtual seconds: a hang fails, never a slow machine
            if (await middle.ok(p.Status())).locked:
                break
            mock_clock.jump(1)
            await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(MemoriesError) as caught:
            await middle.ok(p.MemoryList(vault="notes"))
        assert caught.value.code == "vault_locked"


async def test_a_client_that_hangs_up_cancels_its_job_and_the_daemon_lives_on(middle: Middle, tmp_path: Path) -> None:
    """Through the daemon's own socket server: the client sends a search and closes its end while the search's
    step runs (Ctrl-C or a kill of the CLI, an MCP client going away)."""
    await middle.add("hang up", title="t")
    hold = _hold_queries(middle)
    daemon = middle.daemon
    search = p.RagSearch(vault="notes", query="hang")
    envelope = p.Envelope(
        protocol=p.PROTOCOL_VERSION, home=daemon.home.root, config=daemon.home.config_path, request=search
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_socket, tmp_path / "daemon.sock", daemon.handle, daemon.warnings)
        client = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await client.connect(str(tmp_path / "daemon.sock"))
        stream = trio.SocketStream(client)
        await FrameStream(stream, stream, MAX_CLIENT_FRAME).send(msgspec.msgpack.encode(envelope))
        await _query_started(middle)
        job = next(j for j in daemon.jobs._active.values() if j.kind == "search")
        await stream.aclose()
        with trio.fail_after(30):
            while next(j for j in (await middle.ok(p.Jobs())).jobs if j.id == job.id).state != "cancelled":
                await trio.sleep(0.01)
        hold.set()
        nursery.cancel_scope.cancel()
    assert (await middle.ok(p.Status())).running_jobs == 0  # the daemon lives on and answers
    assert (await middle.ok(search)).results
