"""Issue 29, item 3: a home's database that is truncated, overwritten or emptied is ``database_damaged``, naming
the file and the upgrade backups beside it, at the daemon's start (:class:`~memories.vault.store.Store`), never
``internal_error`` and never a new home (``unlock`` said ``not_initialized: run memories init``, inviting the person to
overwrite the evidence)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memories.errors import CODES, MemoriesError
from memories.vault.store import Store


def _filled(path: Path) -> None:
    store = Store(path)
    store.put_settings({f"k{number}": os.urandom(3000) for number in range(200)})  # about 150 pages
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()


def _damaged(path: Path) -> MemoriesError:
    with pytest.raises(MemoriesError) as refused:
        Store(path)
    assert refused.value.code == "database_damaged" and "database_damaged" in CODES
    assert str(path) in refused.value.message and refused.value.details is not None
    return refused.value


def test_a_truncated_store_is_damaged(tmp_path: Path) -> None:
    db = tmp_path / "memories.db"
    _filled(db)
    os.truncate(db, db.stat().st_size // 2)
    error = _damaged(db)
    assert "no upgrade backup" in error.message and error.details == {"file": str(db), "backups": []}


def test_an_overwritten_store_is_damaged_and_left_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "memories.db"
    _filled(db)
    garbage = os.urandom(8192)
    db.write_bytes(garbage)
    _damaged(db)
    assert db.read_bytes() == garbage  # nothing was changed


def test_an_emptied_store_beside_a_backup_is_damaged_and_names_it(tmp_path: Path) -> None:
    db = tmp_path / "memories.db"
    backup = tmp_path / "memories.format-2.20261101-120000.db"
    _filled(backup)
    db.write_bytes(b"")
    error = _damaged(db)
    assert backup.name in error.message and error.details is not None and error.details["backups"] == [str(backup)]
    assert db.stat().st_size == 0


def test_an_empty_file_alone_and_a_missing_one_are_a_new_store(tmp_path: Path) -> None:
    (tmp_path / "a.db").write_bytes(b"")
    for path in (tmp_path / "a.db", tmp_path / "b.db"):
        store = Store(path)
        assert store.get_setting("anything") is None
        store.close()


def test_a_whole_store_opens_again(tmp_path: Path) -> None:
    db = tmp_path / "memories.db"
    _filled(db)
    store = Store(db)
    assert store.get_setting("k7") is not None
    store.close()
