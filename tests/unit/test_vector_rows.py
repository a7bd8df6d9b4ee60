"""Sealed vector rows (issue 19): one row per record, ``(vault id, keyed row id, sealed blob)``, on a real SQLite
store in-process.

Rows leave in the same transaction as their record (delete, move, made private, a merge that deletes it, vault
delete); a blob that fails authentication is skipped and counted; nothing about a record is readable in a row.
"""

from __future__ import annotations

import hashlib
import sqlite3
import struct
from pathlib import Path

import pytest

from memories.config import CryptoConfig
from memories.errors import MemoriesError
from memories.vault.exchange import Revision
from memories.vault.record_store import RecordStore
from memories.vault.sealing import place
from memories.vault.store import FORMAT, Store, VectorTable
from memories.vault.vectors import row_id
from memories.vault.views import RecordVectors

PASSPHRASE = "correct horse battery staple"
CHEAP = CryptoConfig(kdf_memory_kib=256, kdf_iterations=1, kdf_lanes=1)
SPACE = "local-onnx:space"


def _vector(seed: int, width: int = 4) -> bytes:
    """A float32 vector of ``width`` values (rows need not be unit here: the store moves bytes)."""
    return struct.pack(f"<{width}f", *(float(seed + i) for i in range(width)))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Home:
    """A record store over ``tmp_path/memories.db``, unlocked, with vaults ``notes`` and ``other``."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "memories.db"
        self.records = RecordStore(self.path)
        self.records.keys.init(PASSPHRASE, CHEAP)
        self.notes = self.records.vaults.create("notes", False)
        self.other = self.records.vaults.create("other", False)

    def add(self, body: str, vault: str = "notes") -> str:
        return self.records.records.add(self._vault(vault), "memory", "general", "T", body.encode(), {})[0]

    def put(self, record_id: str, texts: list[str], vault: str = "notes", space: str = SPACE) -> int:
        found = self._vault(vault)
        revision = self.records.catalog.eligible(found)[record_id]
        vectors = b"".join(_vector(n) for n in range(len(texts)))
        record = RecordVectors(record_id, revision, [_digest(t) for t in texts], vectors, {}, True)
        return self.records.vectors.put(found, space, 4, [record])

    def load(self, vault: str = "notes", space: str = SPACE):  # type: ignore[no-untyped-def]
        return self.records.vectors.load(self._vault(vault), space)

    def rows(self) -> list[tuple]:
        with sqlite3.connect(self.path) as db:
            return db.execute("SELECT vault_id, id, sealed FROM vectors ORDER BY vault_id, id").fetchall()

    def sql(self, statement: str, *params: object) -> None:
        with sqlite3.connect(self.path) as db:
            db.execute(statement, params)

    def _vault(self, name: str):  # type: ignore[no-untyped-def]
        return self.notes if name == "notes" else self.other


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path)


def test_vectors_come_back_for_their_space_and_a_row_tells_nothing_in_the_clear(home: Home) -> None:
    first, second = home.add("alpha beta"), home.add("gamma")
    assert home.put(first, ["alpha", "beta"]) == 1 and home.put(second, ["gamma"]) == 1
    loaded = home.load()
    assert loaded.dimension == 4 and set(loaded.keys) == {_digest(t) for t in ("alpha", "beta", "gamma")}
    assert len(loaded.vectors) == 3 * 16 and (loaded.damaged, loaded.incomplete, loaded.stale) == (0, [], [])
    assert home.load(space="another-space").keys == []

    rows = home.rows()
    assert [(vault, len(rid)) for vault, rid, _ in rows] == [(home.notes.id, 32)] * 2
    key = home.records.keys.vault_key(home.notes)
    assert {rid for _, rid, _ in rows} == {row_id(key, first), row_id(key, second)}
    for _, rid, sealed in rows:
        for clear in (first, second, SPACE, _digest("alpha"), "alpha"):
            assert clear.encode() not in sealed and clear not in rid
        assert bytes.fromhex(_digest("alpha")) not in sealed


def test_a_damaged_or_moved_blob_is_skipped_and_counted(home: Home) -> None:
    first, second = home.add("alpha"), home.add("beta")
    home.put(first, ["alpha"])
    home.put(second, ["beta"])
    key = home.records.keys.vault_key(home.notes)
    blobs = {rid: blob for _, rid, blob in home.rows()}
    flipped = bytearray(blobs[row_id(key, first)])
    flipped[len(flipped) // 2] ^= 1
    home.sql("UPDATE vectors SET sealed = ? WHERE id = ?", bytes(flipped), row_id(key, first))
    loaded = home.load()
    assert (loaded.damaged, loaded.keys, loaded.incomplete) == (1, [_digest("beta")], [first])

    home.sql("UPDATE vectors SET sealed = ? WHERE id = ?", blobs[row_id(key, first)], row_id(key, first))
    home.sql("UPDATE vectors SET sealed = ? WHERE id = ?", blobs[row_id(key, first)], row_id(key, second))
    loaded = home.load()
    assert (loaded.damaged, loaded.keys, loaded.incomplete) == (1, [_digest("alpha")], [second])


def test_a_blob_copied_into_another_vault_fails(home: Home) -> None:
    mine = home.add("alpha")
    theirs = home.add("alpha", vault="other")
    home.put(mine, ["alpha"])
    [(_, _, blob)] = home.rows()
    key = home.records.keys.vault_key(home.other)
    home.sql("INSERT INTO vectors (vault_id, id, sealed) VALUES (?, ?, ?)", home.other.id, row_id(key, theirs), blob)
    loaded = home.load("other")
    assert (loaded.damaged, loaded.keys, loaded.incomplete) == (1, [], [theirs])


def test_rows_leave_with_their_record(home: Home) -> None:
    deleted, moved, private, kept = (home.add(body) for body in ("one", "two", "three", "four"))
    for record_id in (deleted, moved, private, kept):
        home.put(record_id, [record_id])
    records = home.records.records
    records.delete(home.notes, deleted)
    records.move(home.notes, moved, home.other)
    records.update(home.notes, private, title=None, body=None, sensitivity="private", meta=None)
    records.update(home.notes, kept, title="renamed", body=None, sensitivity=None, meta=None)
    key = home.records.keys.vault_key(home.notes)
    assert [rid for _, rid, _ in home.rows()] == [row_id(key, kept)]
    assert home.load().stale == [kept]  # written for the revision before the rename
    home.records.vaults.delete(home.notes)
    assert home.rows() == []


def test_a_merge_that_deletes_a_record_deletes_its_row(home: Home, tmp_path: Path) -> None:
    """Another device (the same vault, adopted with its key) gets the record and its row, then the deletion."""
    record_id = home.add("alpha")
    store = home.records.store
    (tmp_path / "b").mkdir()
    other = Home(tmp_path / "b")
    other.notes = other.records.vaults.adopt(home.notes.id, "shared", home.records.keys.vault_key(home.notes))

    def arrive(deleted: bool) -> None:
        rows = [row for row in store.revisions(home.notes.id, record_id) if row.deleted == deleted]
        other.records.exchange.merge(
            other.notes, [Revision(r.id, place(home.notes, record_id, r), r.header, r.body) for r in rows]
        )

    arrive(deleted=False)
    other.put(record_id, ["alpha"])
    assert len(other.rows()) == 1
    home.records.records.delete(home.notes, record_id)
    arrive(deleted=True)
    assert other.rows() == []


def test_a_row_for_a_record_that_is_gone_is_dropped_at_load(home: Home) -> None:
    record_id = home.add("alpha")
    home.put(record_id, ["alpha"])
    [(_, rid, blob)] = home.rows()
    home.records.records.delete(home.notes, record_id)
    home.sql("INSERT INTO vectors (vault_id, id, sealed) VALUES (?, ?, ?)", home.notes.id, rid, blob)  # an old copy
    assert home.load().keys == [] and home.rows() == []


def test_a_write_for_an_older_revision_or_a_deleted_record_is_skipped(home: Home) -> None:
    """The index worker's vectors may be from before an edit or a delete that the store thread ran meanwhile."""
    record_id = home.add("alpha")
    revision = home.records.catalog.eligible(home.notes)[record_id]
    home.records.records.update(home.notes, record_id, title=None, body=b"beta", sensitivity=None, meta=None)
    old = RecordVectors(record_id, revision, [_digest("alpha")], _vector(1), {}, True)
    assert home.records.vectors.put(home.notes, SPACE, 4, [old]) == 0
    home.records.records.delete(home.notes, record_id)
    assert home.records.vectors.put(home.notes, SPACE, 4, [old._replace(revision=revision + 1)]) == 0
    assert home.rows() == []


def test_keep_vectors_off_deletes_every_row_without_a_key(home: Home) -> None:
    home.put(home.add("alpha"), ["alpha"])
    home.put(home.add("beta", vault="other"), ["beta"], vault="other")
    home.records.store.close()
    assert RecordStore(home.path).vectors.forget_all() == 2
    assert home.rows() == []


def test_a_format_2_store_gets_the_vectors_table_and_a_later_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "memories.db"
    store = Store(path)
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE vectors")
        db.execute("PRAGMA user_version = 2")
    store = Store(path)
    assert store.format == FORMAT == 3 and VectorTable(store).rows("x") == []
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 4")
    records = RecordStore(path)
    with pytest.raises(MemoriesError) as refused:
        records.unlock(PASSPHRASE)
    assert refused.value.code == "home_too_new" and "newer release" in refused.value.message
    assert records.store.format == 4  # left as it was
