"""Sealed index snapshots (issue 28) in the daemon's middle, with the real index worker's handlers in-process
(``workers.index.HANDLERS``): a cache comes back after lock/unlock, a daemon restart and an eviction with no record
analysed again, and a damaged, swapped, stale or older-version snapshot is discarded (one log line, a ``rag status``
warning) and the cache built from the records, with the same results."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

import workers.index
from memories import protocol as p
from memories.config import Config, RagConfig
from memories.daemon.core.context import RequestContext
from memories.daemon.index import snapshots as daemon_snapshots
from memories.daemon.supervisor import Daemon
from memories.rag import snapshots as rag_snapshots
from memories.rag import vault_index
from tests.fixtures.fake_worker import FakeWorker
from tests.fixtures.middle import PASSPHRASE, FakeIndex, Middle, running_middle

MARKER = "zebracorn"
NOTES = [
    f"{MARKER} ownership rules of the borrow checker",
    f"所有權規則 與 {MARKER} 借用檢查",
    f"the {MARKER} lifetime of a reference",
]


class Analyses:
    """Counts the texts the index analyses (titles, chunks, metadata): zero when a cache came from a snapshot."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = vault_index.analyze_text

        def counting(text: str) -> Any:
            self.count += 1
            return real(text)

        monkeypatch.setattr(vault_index, "analyze_text", counting)


def _real_index(middle: Middle) -> None:
    """Serve the index worker's requests with ``workers.index``'s own handlers; a restart (lock) empties its
    caches as a new process would."""
    fake = middle.fakes["index"]
    fake.handlers.clear()
    fake.handlers.update({kind: _one_argument(handler) for kind, handler in workers.index.HANDLERS.items()})
    middle.index.restarted = workers.index._caches.clear  # type: ignore[method-assign]


def _one_argument(handler: Callable[[Any, Any], Any]) -> Callable[[Any], Any]:
    return lambda request: handler(request, None)


@pytest.fixture
async def real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Middle]:
    monkeypatch.setattr(daemon_snapshots, "WRITE_DELAY_SECONDS", 0.0)
    workers.index._caches.clear()
    async with running_middle(tmp_path) as middle:
        _real_index(middle)
        yield middle
    workers.index._caches.clear()


@pytest.fixture
def analyses(monkeypatch: pytest.MonkeyPatch) -> Analyses:
    return Analyses(monkeypatch)


async def _until(check: Callable[[], bool]) -> None:
    with trio.fail_after(60):
        while not check():
            await trio.sleep(0.01)


async def _fill(middle: Middle, vault: str = "notes") -> None:
    for number, body in enumerate(NOTES):
        request = p.MemoryAdd(
            vault=vault, kind="memory", sensitivity="general", title=f"note {number}", body=body.encode()
        )
        await middle.ok(request)


async def _results(middle: Middle, vault: str = "notes") -> list[list[tuple[str, str, float]]]:
    """The hits (record, text, score) of a few queries, in rank order."""
    found = []
    for query in (MARKER, "所有权", "borrow checker", "lifetime reference"):
        for match_mode in ("any", "all", "phrase"):
            report = await middle.ok(p.RagSearch(vault=vault, query=query, mode="bm25", match_mode=match_mode))
            found.append([(hit.asset_id, hit.text, hit.score) for hit in report.results])
    return found


async def _snapshot_written(middle: Middle, written: int) -> None:
    await _until(lambda: middle.daemon.snapshots.written >= written)


async def _relock(middle: Middle) -> None:
    await middle.ok(p.Lock())
    await middle.ok(p.Unlock(passphrase=PASSPHRASE))


def _db(middle: Middle) -> sqlite3.Connection:
    return sqlite3.connect(middle.daemon.home.db_path)


async def _status_warnings(middle: Middle, vault: str = "notes") -> list[str]:
    ctx = RequestContext()
    await middle.ok(p.RagStatus(vault=vault), ctx)
    return ctx.warnings


async def test_lock_and_unlock_restore_the_cache_with_nothing_analysed(real: Middle, analyses: Analyses) -> None:
    await _fill(real)
    built = await _results(real)
    assert analyses.count > 0
    await _snapshot_written(real, 1)
    await _relock(real)
    analyses.count = 0
    assert await _results(real) == built
    assert analyses.count == 0 and real.daemon.snapshots.restored >= 1
    assert not await _status_warnings(real)
    (count,) = _db(real).execute("SELECT count(*) FROM snapshots").fetchone()
    assert count == 1


async def test_an_evicted_vault_comes_back_from_its_snapshot(real: Middle, analyses: Analyses) -> None:
    for name in ("second", "third"):
        await real.ok(p.VaultCreate(name=name))
    for name in ("notes", "second", "third"):
        await _fill(real, name)
    built = await _results(real)
    await _snapshot_written(real, 1)
    for name in ("second", "third"):  # two vaults are cached: "notes" is evicted
        await _results(real, name)
    assert real.vault_id not in workers.index._caches
    analyses.count = 0
    assert await _results(real) == built
    assert analyses.count == 0


async def test_a_lock_writes_the_snapshot_that_is_due(
    real: Middle, analyses: Analyses, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemon_snapshots, "WRITE_DELAY_SECONDS", 3600.0)  # due, but not written by the quiet time
    await _fill(real)
    built = await _results(real)
    assert real.daemon.snapshots.written == 0
    await _relock(real)
    analyses.count = 0
    assert await _results(real) == built
    assert analyses.count == 0 and real.daemon.snapshots.restored >= 1


async def test_a_vault_evicted_before_its_snapshot_was_due_comes_back_from_it(
    real: Middle, analyses: Analyses, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemon_snapshots, "WRITE_DELAY_SECONDS", 3600.0)
    for name in ("second", "third"):
        await real.ok(p.VaultCreate(name=name))
    for name in ("notes", "second", "third"):
        await _fill(real, name)
    built = await _results(real)
    for name in ("second", "third"):  # loading "third" evicts "notes", whose write was due: it is written first
        await _results(real, name)
    assert real.vault_id not in workers.index._caches
    analyses.count = 0
    assert await _results(real) == built
    assert analyses.count == 0


async def test_a_restart_restores_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daemon_snapshots, "WRITE_DELAY_SECONDS", 3600.0)  # written only by `daemon stop`
    workers.index._caches.clear()
    async with running_middle(tmp_path) as middle:
        _real_index(middle)
        await _fill(middle)
        built = await _results(middle)
        assert middle.daemon.snapshots.written == 0
    workers.index._caches.clear()  # the stop wrote the snapshot before the workers ended
    analyses = Analyses(monkeypatch)
    async with restarted(middle) as again:
        assert await _results(again) == built
        assert analyses.count == 0 and again.daemon.snapshots.restored >= 1


async def test_a_damaged_snapshot_is_discarded_and_rebuilt(
    real: Middle, analyses: Analyses, caplog: pytest.LogCaptureFixture
) -> None:
    await _fill(real)
    built = await _results(real)
    await _snapshot_written(real, 1)
    with _db(real) as db:
        (sealed,) = db.execute("SELECT sealed FROM snapshots").fetchone()
        flipped = sealed[:40] + bytes([sealed[40] ^ 1]) + sealed[41:]
        db.execute("UPDATE snapshots SET sealed = ?", (flipped,))
    await _relock(real)
    analyses.count = 0
    with caplog.at_level(logging.WARNING, logger="memories.snapshots"):
        assert await _results(real) == built
    assert analyses.count > 0
    assert [r.message for r in caplog.records if "discarded" in r.message] == [
        f"vault {real.vault_id}: its index snapshot was discarded (it failed authentication or could not be read); "
        "building from the records"
    ]
    [warning] = await _status_warnings(real)
    assert "discarded" in warning and "failed authentication" in warning
    await _snapshot_written(real, 2)  # the rebuilt cache is written again: the next unlock uses it
    await _relock(real)
    analyses.count = 0
    assert await _results(real) == built
    assert analyses.count == 0 and not await _status_warnings(real)


async def test_another_vaults_snapshot_is_discarded(real: Middle, analyses: Analyses) -> None:
    other = await real.ok(p.VaultCreate(name="other"))
    await _fill(real)
    await _fill(real, "other")
    await real.ok(p.MemoryAdd(vault="other", kind="memory", sensitivity="general", title="x", body=b"only there"))
    built = await _results(real)
    await _results(real, "other")
    await _until(lambda: _db(real).execute("SELECT count(*) FROM snapshots").fetchone()[0] == 2)
    with _db(real) as db:
        swapped = db.execute("SELECT id, sealed FROM snapshots WHERE vault_id = ?", (other.id,)).fetchone()
        db.execute("UPDATE snapshots SET id = ?, sealed = ? WHERE vault_id = ?", (*swapped, real.vault_id))
    await _relock(real)
    analyses.count = 0
    assert await _results(real) == built
    assert analyses.count > 0
    assert any("failed authentication" in warning for warning in await _status_warnings(real))


async def test_a_snapshot_older_than_an_edit_is_discarded(real: Middle, analyses: Analyses) -> None:
    await _fill(real)
    first = await real.ok(p.MemoryAdd(vault="notes", kind="memory", sensitivity="general", title="t", body=b"old"))
    await _results(real)
    await _snapshot_written(real, 1)
    real.daemon.snapshots.start_soon = None  # as if the daemon stopped before writing again
    await real.ok(p.MemoryUpdate(vault="notes", id=first.id, body=f"{MARKER} edited body".encode()))
    await real.ok(p.MemoryDelete(vault="notes", id=(await real.add(f"{MARKER} doomed")).id))
    await _relock(real)
    analyses.count = 0
    report = await real.ok(p.RagSearch(vault="notes", query="edited", mode="bm25"))
    assert [hit.asset_id for hit in report.results] == [first.id]
    assert analyses.count > 0
    assert any("the records changed" in warning for warning in await _status_warnings(real))


async def test_a_snapshot_of_another_analysis_version_is_discarded(
    real: Middle, analyses: Analyses, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rag_snapshots, "analysis_version", lambda: "0 an older release")
    await _fill(real)
    built = await _results(real)
    await _snapshot_written(real, 1)
    monkeypatch.undo()
    _real_index(real)
    analyses = Analyses(monkeypatch)
    await _relock(real)
    assert await _results(real) == built
    assert analyses.count > 0
    assert any("another analysis version" in warning for warning in await _status_warnings(real))
    assert _db(real).execute("SELECT count(*) FROM snapshots").fetchone()[0] in (0, 1)


async def test_keep_index_off_deletes_the_snapshots_at_start_and_writes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemon_snapshots, "WRITE_DELAY_SECONDS", 0.0)
    workers.index._caches.clear()
    async with running_middle(tmp_path) as middle:
        _real_index(middle)
        await _fill(middle)
        built = await _results(middle)
        await _snapshot_written(middle, 1)
    workers.index._caches.clear()
    off = msgspec.structs.replace(middle.daemon.config, rag=RagConfig(keep_index=False))
    async with restarted(middle, off) as again:
        assert _db(again).execute("SELECT count(*) FROM snapshots").fetchone()[0] == 0
        assert await _results(again) == built
        await again.ok(p.MemoryAdd(vault="notes", kind="memory", sensitivity="general", title="t", body=b"more"))
        await _results(again)
        await trio.sleep(0.1)  # not a timing assertion: a write would have been due at once
        assert again.daemon.snapshots.written == 0 and again.daemon.snapshots.restored == 0
        assert _db(again).execute("SELECT count(*) FROM snapshots").fetchone()[0] == 0


async def test_deleting_a_vault_deletes_its_snapshot(real: Middle) -> None:
    other = await real.ok(p.VaultCreate(name="other"))
    await _fill(real, "other")
    await _results(real, "other")
    await _until(lambda: _db(real).execute("SELECT count(*) FROM snapshots").fetchone()[0] == 1)
    await real.ok(p.VaultDelete(vault="other"))
    assert _db(real).execute("SELECT count(*) FROM snapshots WHERE vault_id = ?", (other.id,)).fetchone()[0] == 0


async def test_no_plaintext_in_any_file_of_the_home(real: Middle) -> None:
    await _fill(real)
    chunks = [hit.text for hit in (await real.ok(p.RagSearch(vault="notes", query=MARKER, mode="bm25"))).results]
    await _snapshot_written(real, 1)
    await real.ok(p.Lock())
    needles = [MARKER.encode(), "所有權".encode(), "所有权".encode(), *(chunk.encode() for chunk in chunks)]
    import hashlib

    needles += [hashlib.sha256(chunk.encode()).hexdigest().encode() for chunk in chunks]
    needles += [hashlib.sha256(chunk.encode()).digest() for chunk in chunks]
    for path in Path(real.daemon.home.root).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not [needle for needle in needles if needle in data], path


@asynccontextmanager
async def restarted(before: Middle, config: Config | None = None) -> AsyncIterator[Middle]:
    """A new daemon (real index handlers, empty caches) on the home of ``before`` and its config (or ``config``),
    unlocked."""
    async with trio.open_nursery() as nursery:
        index = FakeIndex()
        fakes = {name: FakeWorker(nursery, {}) for name in ("index", "embedding", "remote")}
        settings = config or before.daemon.config
        daemon = Daemon(before.daemon.home, settings, None, None, spawn=lambda name: fakes[name].spawn(name))
        middle = Middle(daemon, index, fakes)
        _real_index(middle)
        await daemon.start(nursery)
        await middle.ok(p.Unlock(passphrase=PASSPHRASE))
        middle.vault_id = before.vault_id
        try:
            yield middle
        finally:
            await daemon.stop()
            with trio.CancelScope(shield=True):
                async with daemon.store.exclusive():
                    daemon.store.close()
