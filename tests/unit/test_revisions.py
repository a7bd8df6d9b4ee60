"""Revision ids, the sealed head set and rollback detection (issue 10), on a real SQLite store in-process.

A revision's id is the SHA-256 of its sealed form; each vault's head set names every record's heads. Rows changed,
dropped or rolled back under a running daemon, or before the next unlock, give ``integrity_error`` on read.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import msgspec
import pytest

from memories import crypto
from memories.config import CryptoConfig
from memories.errors import MemoriesError
from memories.vault.heads import Head, HeadSet, chosen_head
from memories.vault.record_store import RecordStore
from memories.vault.sealing import RecordHeader
from memories.vault.store import RevisionRow, Write

PASSPHRASE = "correct horse battery staple"
CHEAP = CryptoConfig(kdf_memory_kib=256, kdf_iterations=1, kdf_lanes=1)


class Home:
    """A store, keyring and vaults over ``tmp_path/memories.db``, unlocked, with vault ``notes``."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "memories.db"
        self.open()
        self.keys.init(PASSPHRASE, CHEAP)
        self.vault = self.vaults.create("notes", False)

    def open(self) -> None:
        self.record_store = RecordStore(self.path)
        self.store, self.keys, self.vaults = self.record_store.store, self.record_store.keys, self.record_store.vaults
        self.records, self.catalog = self.record_store.records, self.record_store.catalog

    def add(self, body: str) -> str:
        return self.records.add(self.vault, "memory", "general", "T", body.encode(), {})[0]

    def update(self, record_id: str, body: str) -> int:
        return self.records.update(self.vault, record_id, title=None, body=body.encode(), sensitivity=None, meta=None)[
            1
        ]

    def reopen(self) -> None:
        """What the next unlock sees: a fresh keyring and catalog over the same file."""
        self.store.close()
        self.open()
        self.record_store.unlock(PASSPHRASE)
        self.vault = self.vaults.resolve("notes")

    def sql(self, statement: str, *params: object) -> list[tuple]:
        with sqlite3.connect(self.path) as db:
            return db.execute(statement, params).fetchall()


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path)


def test_a_revision_id_is_the_hash_of_the_sealed_revision_and_names_its_parent(home: Home) -> None:
    record = home.add("one")
    assert home.update(record, "two") == 2
    rows = home.store.revisions(home.vault.id, record)
    assert [row.revision for row in rows] == [1, 2]
    first, second = sorted(rows, key=lambda row: row.revision)
    assert first.parents == () and second.parents == (first.id,)
    for row in rows:
        place = crypto.RevisionPlace(home.vault.id, record, row.revision, row.parents, False, row.created)
        assert row.id == hashlib.sha256(crypto.sealed_revision(place, row.header, row.body)).hexdigest()
    view = home.records.read(home.vault, record, None)
    assert (view.revision, view.revision_id, view.body) == (2, second.id, "two")
    assert home.records.read(home.vault, record, first.id[:8]).body == "one"
    assert home.records.read(home.vault, record, 1).created == view.created == first.created


def test_the_head_set_counts_every_write(home: Home) -> None:
    record = home.add("one")
    home.update(record, "two")
    gone = home.add("three")
    home.records.delete(home.vault, gone)
    key = home.keys.vault_key(home.vault)
    sealed = home.store.heads(home.vault.id)
    assert sealed is not None
    heads = msgspec.msgpack.decode(crypto.open_sealed(key, sealed, crypto.heads_aad(home.vault.id)), type=HeadSet)
    assert heads.counter == 4 and list(heads.records) == [record, gone]
    assert heads.records[record] == [Head(heads.records[record][0].id, 2)]
    [deletion] = home.store.revisions(home.vault.id, gone)  # the tombstone alone remains
    assert deletion.deleted and heads.records[gone] == [Head(deletion.id, 2, True)]
    assert home.vaults.count_records(home.vault) == 1


def test_a_dropped_latest_revision_is_an_integrity_error(home: Home) -> None:
    record, other = home.add("one"), home.add("other")
    home.update(record, "two")
    home.sql("DELETE FROM revisions WHERE record_id = ? AND revision = 2", record)
    with pytest.raises(MemoriesError) as caught:
        home.records.read(home.vault, record, None)
    assert caught.value.code == "integrity_error" and caught.value.details["field"] == "revision"
    home.reopen()
    assert home.catalog.damaged(home.vault) == {record: 2}
    assert [s.damaged for s in home.catalog.summaries(home.vault, None)] == [False, True]
    assert home.records.read(home.vault, other, None).body == "other"
    home.records.delete(home.vault, record)  # a damaged record can still be deleted
    assert home.vaults.count_records(home.vault) == 1


def test_a_latest_revision_replaced_by_an_older_valid_one_is_an_integrity_error(home: Home) -> None:
    record = home.add("one")
    home.update(record, "two")
    home.sql(
        "UPDATE revisions SET (revision, parents, created, header, body) = "
        "(SELECT revision, parents, created, header, body FROM revisions WHERE record_id = ?1 AND revision = 1) "
        "WHERE record_id = ?1 AND revision = 2",
        record,
    )
    for reopened in (False, True):
        if reopened:
            home.reopen()
        with pytest.raises(MemoriesError) as caught:
            home.records.read(home.vault, record, None)
        assert caught.value.code == "integrity_error"


def test_a_rolled_back_head_set_and_a_dropped_middle_revision_are_integrity_errors(home: Home) -> None:
    record = home.add("one")
    [(old_heads,)] = home.sql("SELECT sealed FROM heads")
    home.update(record, "two")
    home.update(record, "three")
    home.sql("UPDATE heads SET sealed = ?", old_heads)
    home.reopen()
    with pytest.raises(MemoriesError, match="rolled back"):
        home.records.read(home.vault, record, None)

    other = home.add("a")
    home.update(other, "b")
    home.update(other, "c")
    home.sql("DELETE FROM revisions WHERE record_id = ? AND revision = 2", other)
    for revision in (None, 1, 2):
        with pytest.raises(MemoriesError) as caught:
            home.records.read(home.vault, other, revision)
        assert caught.value.code == "integrity_error"


def test_a_missing_or_foreign_head_set_fails_the_vault(home: Home) -> None:
    home.add("one")
    work = home.vaults.create("work", False)
    home.sql(
        "UPDATE heads SET sealed = (SELECT sealed FROM heads WHERE vault_id = ?) WHERE vault_id = ?",
        work.id,
        home.vault.id,
    )
    home.reopen()
    with pytest.raises(MemoriesError, match="head set"):
        home.catalog.entries(home.vault)
    home.sql("DELETE FROM heads WHERE vault_id = ?", home.vault.id)
    home.reopen()
    with pytest.raises(MemoriesError, match="head set"):
        home.vaults.count_records(home.vault)


def test_a_renamed_vault_name_in_the_database_is_an_integrity_error(home: Home) -> None:
    home.add("one")
    renamed = home.vaults.rename(home.vault, "journal")
    assert home.keys.vault_key(renamed)
    home.sql("UPDATE vaults SET name = 'diary' WHERE id = ?", home.vault.id)
    with pytest.raises(MemoriesError, match="name"):
        home.keys.vault_key(home.vaults.resolve("diary"))


def _sibling(home: Home, record: str, parent: RevisionRow, body: str, at: float) -> RevisionRow:
    """A revision of ``record`` with ``parent`` as its parent, as another device would have sealed it."""
    key = home.keys.vault_key(home.vault)
    place = crypto.RevisionPlace(home.vault.id, record, parent.revision + 1, (parent.id,), False, at)
    header = crypto.seal(
        key, msgspec.msgpack.encode(RecordHeader("memory", "general", "T", {})), crypto.record_aad(place, "header")
    )
    sealed_body = crypto.seal(key, body.encode(), crypto.record_aad(place, "body"))
    revision_id = crypto.revision_id(place, header, sealed_body)
    return RevisionRow(record, revision_id, place.revision, place.parents, at, header, sealed_body)


def test_siblings_share_a_number_and_an_update_takes_every_head_as_parent(home: Home) -> None:
    record = home.add("one")
    [root] = home.store.revisions(home.vault.id, record)
    siblings = [_sibling(home, record, root, body, root.created + 1) for body in ("left", "right")]
    heads = HeadSet(5, {record: [Head(row.id, row.revision) for row in siblings]})
    key = home.keys.vault_key(home.vault)
    sealed = crypto.seal(key, msgspec.msgpack.encode(heads), crypto.heads_aad(home.vault.id))
    home.store.write(Write(home.vault.id, sealed, siblings))
    home.reopen()

    chosen = chosen_head(heads.records[record])
    assert home.records.read(home.vault, record, None).revision_id == chosen.id
    with pytest.raises(MemoriesError) as caught:
        home.records.read(home.vault, record, 2)
    assert caught.value.code == "ambiguous_revision"
    assert caught.value.details["revisions"] == sorted(row.id for row in siblings)
    assert {home.records.read(home.vault, record, row.id).body for row in siblings} == {"left", "right"}

    assert home.update(record, "merged") == 3
    merged = home.records.read(home.vault, record, None)
    [row] = [r for r in home.store.revisions(home.vault.id, record) if r.id == merged.revision_id]
    assert row.parents == tuple(sorted(s.id for s in siblings))


def test_move_reseals_every_revision_under_the_target_with_new_ids(home: Home) -> None:
    record = home.add("one")
    home.update(record, "two")
    before = {row.id for row in home.store.revisions(home.vault.id, record)}
    work = home.vaults.create("work", False)
    assert home.records.move(home.vault, record, work) == 2
    after = home.store.revisions(work.id, record)
    assert len(after) == 2 and not before & {row.id for row in after}
    assert [row.deleted for row in home.store.revisions(home.vault.id, record)] == [True]
    home.reopen()
    assert home.records.read(home.vaults.resolve("work"), record, 1).body == "one"
    assert home.vaults.count_records(home.vault) == 0
