"""Issue 29, item 2: a search must never need a write. On a full disk, a read-only home or a database another
process holds for writing, the searches and the other read-only requests keep working: the daemon's bookkeeping
(the order of the vaults searched most recently, :class:`~memories.daemon.index.warm_up.RecentVaults`) is best
effort, logged once, never the request's failure. A read-only database is made with ``PRAGMA query_only``
(``SQLITE_READONLY``, as a read-only mount gives), a held one with a second connection's write transaction; a full
disk, where only a real one refuses a small update in place, is tests/e2e/test_full_disk.py's."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable

import pytest

from memories import protocol as p
from tests.fixtures.middle import Middle


def _read_only(middle: Middle) -> Callable[[], None]:
    db = middle.daemon.store._records.store._db
    db.execute("PRAGMA query_only = ON")
    return lambda: db.execute("PRAGMA query_only = OFF") and None


def _held(middle: Middle) -> Callable[[], None]:
    db = middle.daemon.store._records.store._db
    db.execute("PRAGMA busy_timeout = 50")
    other = sqlite3.connect(middle.daemon.home.db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")

    def release() -> None:
        other.execute("ROLLBACK")
        other.close()
        db.execute("PRAGMA busy_timeout = 5000")

    return release


@pytest.mark.parametrize("refuse", [_read_only, _held], ids=["read-only", "held for writing"])
async def test_reads_need_no_write(
    middle: Middle, refuse: Callable[[Middle], Callable[[], None]], caplog: pytest.LogCaptureFixture
) -> None:
    ref = await middle.add("the lighthouse keeper's logbook", title="Lighthouse")
    release = refuse(middle)
    try:
        for _ in range(2):  # the second time too: nothing was remembered, nothing is retried noisily
            for mode in ("bm25", None):
                report = await middle.ok(p.RagSearch(vault="notes", query="lighthouse", mode=mode))
                assert [hit.asset_id for hit in report.results][:1] == [ref.id]
            found = await middle.ok(p.MemorySearch(vault="notes", query="lighthouse"))
            assert [hit.id for hit in found.results] == [ref.id]
            assert (await middle.ok(p.MemoryRead(vault="notes", id=ref.id))).title == "Lighthouse"
            assert [record.id for record in (await middle.ok(p.MemoryList(vault="notes"))).records] == [ref.id]
            await middle.ok(p.RagStatus(vault="notes"))
    finally:
        release()
    noted = [r for r in caplog.records if "searched most recently" in r.getMessage()]
    assert len(noted) == 1 and noted[0].levelno == logging.WARNING, [r.getMessage() for r in noted]
    assert "lighthouse" not in noted[0].getMessage()
