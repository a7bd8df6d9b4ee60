"""The middle's :class:`~tests.fixtures.middle.FakeIndex` keeps the index worker's epoch rules: the same requests
give the same answers (reply type and the ``have`` of a stale answer) from the fake and from ``workers.index``'s
own handlers, run in process. A change of the real rules fails here until the fake follows (issue 18 item 5)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from memories import worker_protocol as w
from tests.fixtures.middle import FakeIndex
from workers import index as real


def _record(record_id: str, revision: int = 1) -> w.IndexRecord:
    return w.IndexRecord(id=record_id, revision=revision, kind="memory", title=record_id, body=f"body of {record_id}")


def _sync(epoch: int, upserts: list[str], *, fresh: bool = False, final: bool = False, **more: Any) -> w.IndexSync:
    return w.IndexSync(
        vault="v", epoch=epoch, upserts=[_record(r) for r in upserts], deletes=more.pop("deletes", []),
        final=final, fresh=fresh, **more,
    )  # fmt: skip


def _query(epoch: int) -> w.IndexQuery:
    return w.IndexQuery(
        vault="v", epoch=epoch, query="body", mode="bm25", match_mode="any", limit=10, cards_only=False,
        no_rerank=True,
    )  # fmt: skip


SCRIPT: list[w.WorkerRequest[Any]] = [
    _query(1),  # no cache: stale, nothing held
    w.IndexAtEpoch(vault="v", epoch=1),
    _sync(1, ["a"]),  # a delta for a cache that is not there (evicted): stale
    _sync(1, ["a"], fresh=True),
    w.IndexAtEpoch(vault="v", epoch=1),  # not stamped before the final batch
    _query(1),
    _sync(1, ["b"], final=True, expected={"a": 1, "b": 1}),
    w.IndexAtEpoch(vault="v", epoch=1),
    _query(1),
    _query(2),  # another epoch: stale, with what the cache holds
    _sync(2, ["c"], fresh=True),  # a fresh start while a cache exists (another job built it): stale
    _sync(2, [], deletes=["a"]),
    w.IndexAtEpoch(vault="v", epoch=1),  # a batch un-stamps the cache
    _sync(2, ["d"], final=True, expected={"b": 1}),  # drops d, not expected, then stamps
    w.IndexAtEpoch(vault="v", epoch=2),
    _sync(3, [], final=True, expected={"b": 1, "e": 1}),  # e never came: stale, not stamped
    w.IndexAtEpoch(vault="v", epoch=3),
    w.IndexDrop(vault="v"),
    w.IndexAtEpoch(vault="v", epoch=2),
]


def _shape(reply: Any) -> Any:
    """What the rules decide: the reply's type, and a stale answer's ``have``."""
    return (type(reply).__name__, reply.have) if isinstance(reply, w.IndexStale) else type(reply).__name__


@pytest.fixture
def fresh_worker() -> Iterator[None]:
    real._caches.clear()
    yield
    real._caches.clear()


HANDLERS = {
    w.IndexSync: real.sync,
    w.IndexQuery: real.query,
    w.IndexAtEpoch: real.at_epoch,
    w.IndexDrop: real.drop,
}


async def test_the_fake_index_answers_as_the_index_worker_does(fresh_worker: None) -> None:
    fake = FakeIndex().handlers()
    for step, request in enumerate(SCRIPT):
        want = _shape(HANDLERS[type(request)](request, None))  # type: ignore[operator]
        got = _shape(await fake[type(request)](request))
        assert got == want, (step, msgspec.json.encode(request).decode()[:120])
