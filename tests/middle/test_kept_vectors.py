"""Vectors kept sealed in the home (issue 19) in the daemon's middle: sealed as batches are stored, handed back to a
cache built after lock, never written for a record that left meanwhile, skipped with a warning when damaged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import RagConfig
from memories.daemon.core.context import RequestContext
from tests.fixtures.middle import PASSPHRASE, Middle, running_middle


def _counting_model(middle: Middle) -> list[int]:
    """A fake model; the list grows by each batch's size."""
    batches: list[int] = []

    def embed(request: w.EmbedBatch) -> w.Vectors:
        batches.append(len(request.inputs))
        return w.Vectors(vectors=bytes(16 * len(request.inputs)), dimension=4)

    middle.fake_model(embed)
    middle.fakes["embedding"].handlers[w.EmbedQuery] = lambda r: w.Vectors(vectors=bytes(16), dimension=4)
    return batches


def _rows(middle: Middle) -> list[tuple[str, bytes]]:
    with sqlite3.connect(middle.daemon.home.db_path) as db:
        return db.execute("SELECT id, sealed FROM vectors ORDER BY id").fetchall()


async def _relock(middle: Middle) -> None:
    await middle.ok(p.Lock())
    await middle.ok(p.Unlock(passphrase=PASSPHRASE))


async def test_vectors_come_back_after_lock_and_nothing_is_embedded_again(middle: Middle) -> None:
    ids = [(await middle.add(f"alpha {n}")).id for n in range(3)]
    batches = _counting_model(middle)
    assert (await middle.ok(p.RagIndex(vault="notes"))).embedded_now == 3
    assert len(_rows(middle)) == 3
    for row_id, sealed in _rows(middle):
        assert all(record_id not in row_id and record_id.encode() not in sealed for record_id in ids)

    await _relock(middle)
    assert (await middle.ok(p.RagStatus(vault="notes"))).embedded is None  # sealed, not loaded: not "0 embedded"
    search = p.RagSearch(vault="notes", query="alpha", mode="vector")
    assert {hit.asset_id for hit in (await middle.ok(search)).results} == set(ids)
    report = await middle.ok(p.RagIndex(vault="notes"))
    assert (report.embedded_now, report.reused, sum(batches)) == (0, 3, 3)
    [load] = middle.index.loads[1:]  # the first was the empty one of the first index run
    assert len(load.keys) == 3 and load.dimension == 4
    status = await middle.ok(p.RagStatus(vault="notes"))
    assert (status.embedded, status.missing, status.vectors) == (3, 0, "sealed in the home")


async def test_an_edit_reembeds_its_record_and_its_row_is_rewritten(middle: Middle) -> None:
    first = (await middle.add("alpha")).id
    await middle.add("beta")
    batches = _counting_model(middle)
    await middle.ok(p.RagIndex(vault="notes"))
    before = dict(_rows(middle))
    await middle.ok(p.MemoryUpdate(vault="notes", id=first, body=b"gamma"))
    assert (await middle.ok(p.RagIndex(vault="notes"))).embedded_now == 1
    after = dict(_rows(middle))
    assert len(after) == 2 and len([rid for rid in after if after[rid] != before[rid]]) == 1
    await _relock(middle)
    assert (await middle.ok(p.RagIndex(vault="notes"))).embedded_now == 0 and sum(batches) == 3


async def test_a_record_deleted_while_its_vectors_are_sealed_gets_no_row(middle: Middle) -> None:
    doomed = (await middle.add("alpha")).id
    await middle.add("beta")
    _counting_model(middle)
    middle.index.holds[w.IndexRecordVectors] = release = trio.Event()
    started = middle.index.started.setdefault(w.IndexRecordVectors, trio.Event())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(middle.ok, p.RagIndex(vault="notes"))
        await started.wait()  # the worker is handing out the sets of both records
        await middle.ok(p.MemoryDelete(vault="notes", id=doomed))
        release.set()
    assert len(_rows(middle)) == 1


async def test_a_damaged_row_is_skipped_with_a_warning_and_its_record_embedded_again(middle: Middle) -> None:
    for body in ("alpha", "beta"):
        await middle.add(body)
    batches = _counting_model(middle)
    await middle.ok(p.RagIndex(vault="notes"))
    (row_id, sealed), _ = _rows(middle)
    flipped = bytearray(sealed)
    flipped[len(flipped) // 2] ^= 1
    with sqlite3.connect(middle.daemon.home.db_path) as db:
        db.execute("UPDATE vectors SET sealed = ? WHERE id = ?", (bytes(flipped), row_id))
    await _relock(middle)
    found = await middle.ok(p.RagSearch(vault="notes", query="alpha", mode="vector"))
    assert found.results  # searches keep working; the damaged row's record was embedded again on demand
    assert sum(batches) == 3
    ctx = RequestContext()
    await middle.ok(p.RagStatus(vault="notes"), ctx)
    assert any("1 sealed vector rows" in warning for warning in ctx.warnings)
    assert dict(_rows(middle))[row_id] != bytes(flipped)  # rewritten


async def test_with_keep_vectors_off_nothing_is_written(tmp_path: Path) -> None:
    async with running_middle(tmp_path, RagConfig(keep_vectors=False)) as middle:
        await middle.add("alpha")
        batches = _counting_model(middle)
        await middle.ok(p.RagIndex(vault="notes"))
        assert _rows(middle) == []
        assert (await middle.ok(p.RagStatus(vault="notes"))).vectors == "memory only"
        await _relock(middle)
        assert (await middle.ok(p.RagIndex(vault="notes"))).embedded_now == 1 and batches == [1, 1]
