"""The supervisor's worker handle against the in-process fake worker: typed replies, refusal of another install,
late replies, crashes (pytest-trio, no processes)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
import trio

from memories import worker_protocol as w
from memories.daemon.core.workers import WorkerHandle
from memories.errors import MemoriesError
from tests.fixtures.fake_worker import FakeWorker


class Drops:
    count = 0

    def __call__(self) -> None:
        self.count += 1


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        yield nursery
        nursery.cancel_scope.cancel()


def start(nursery: trio.Nursery, fake: FakeWorker, drops: Drops | None = None) -> WorkerHandle:
    handle = WorkerHandle("index", fake.spawn, drops or Drops())
    nursery.start_soon(handle.supervise)
    return handle


async def test_a_reply_has_the_type_its_request_declares(nursery: trio.Nursery) -> None:
    fake = FakeWorker(nursery, {w.IndexCheckQuery: lambda request: w.QueryChecked(terms=len(request.query))})
    handle = start(nursery, fake)
    reply = await handle.call(w.IndexCheckQuery(query="abc"))
    assert reply == w.QueryChecked(terms=3)
    assert handle.completed == {"IndexCheckQuery": 1}


async def test_a_reply_of_another_type_is_a_protocol_error(nursery: trio.Nursery) -> None:
    fake = FakeWorker(nursery, {w.IndexCheckQuery: lambda request: w.IndexSynced()})
    handle = start(nursery, fake)
    with pytest.raises(MemoriesError) as caught:
        await handle.call(w.IndexCheckQuery(query="abc"))
    assert caught.value.code == "protocol_error"
    assert "IndexSynced, not QueryChecked" in caught.value.message


@pytest.mark.parametrize("field, value", [("protocol", w.WORKER_PROTOCOL_VERSION + 1), ("install", "0.0.1")])
async def test_a_worker_of_another_install_is_refused(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture, field: str, value: object
) -> None:
    fake = FakeWorker(nursery, {w.IndexCheckQuery: lambda request: w.QueryChecked(terms=1)})
    fake.hello[field] = value
    fake.hello["extra"] = "a field this install does not know"  # read leniently: no decode error
    handle = start(nursery, fake)
    with caplog.at_level(logging.ERROR, logger="memories.workers"), pytest.raises(MemoriesError) as caught:
        await handle.call(w.IndexCheckQuery(query="q"))
    assert caught.value.code == "restart_needed"
    assert handle.refusal is not None and str(value) in handle.refusal
    assert handle.info().state == "refused"
    assert fake.spawned == 1  # not restarted in a loop: the same install would come back
    assert any("refused the index worker" in record.getMessage() for record in caplog.records)
    assert fake.requests == []


async def test_a_late_reply_after_cancel_is_dropped_and_counted(nursery: trio.Nursery) -> None:
    started, release = trio.Event(), trio.Event()

    async def slow(request: w.IndexCheckQuery) -> w.QueryChecked:
        started.set()
        await release.wait()  # ignores the cancel notice: answers late
        return w.QueryChecked(terms=1)

    fake = FakeWorker(nursery, {w.IndexCheckQuery: slow})
    drops = Drops()
    handle = start(nursery, fake, drops)
    scope = trio.CancelScope()

    async def cancel_once_the_worker_has_it() -> None:  # a known point, not a deadline that load can outrun
        await started.wait()
        scope.cancel()

    nursery.start_soon(cancel_once_the_worker_has_it)
    with scope:
        await handle.call(w.IndexCheckQuery(query="q"))
    assert scope.cancelled_caught
    await trio.testing.wait_all_tasks_blocked()
    assert fake.cancels == [1]
    release.set()
    await trio.testing.wait_all_tasks_blocked()
    assert drops.count == 1
    assert handle.completed == {}


async def test_a_crash_mid_step_fails_the_call_and_restarts_the_worker(nursery: trio.Nursery) -> None:
    crashed = False

    async def crash_once(request: w.IndexCheckQuery) -> w.QueryChecked:
        nonlocal crashed
        if not crashed:
            crashed = True
            fake.crash()
            await trio.sleep_forever()
        return w.QueryChecked(terms=2)

    fake = FakeWorker(nursery, {w.IndexCheckQuery: crash_once})
    handle = start(nursery, fake)
    with pytest.raises(MemoriesError) as caught:
        await handle.call(w.IndexCheckQuery(query="q"))
    assert caught.value.code == "worker_crashed"
    assert "killed by signal 9" in caught.value.message
    assert (await handle.call(w.IndexCheckQuery(query="q"))).terms == 2
    assert handle.restarts == 1 and fake.spawned == 2
