"""Issue 21, item 6: what the disk refuses is told as such, naming the folder: ``disk_full`` (SQLite's full database
or disk, ``ENOSPC``, ``EDQUOT``) and ``home_read_only`` (``SQLITE_READONLY``, ``EROFS``), from the store, the home's
folders and a model install. The full database and a real full disk are in ``tests/middle`` and ``tests/e2e``
``test_full_disk.py``; here the other kinds, made without root (a read-only SQLite connection) or simulated."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from memories import worker_protocol as w
from memories.config import HttpConfig
from memories.daemon.index.models import model_manifest
from memories.errors import MemoriesError
from memories.paths import ensure_private_dir
from memories.vault.store import Store
from workers import remote


def test_a_read_only_database_is_home_read_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "memories.db")
    reader = sqlite3.connect(f"file:{tmp_path / 'memories.db'}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as refused:
        reader.execute("INSERT INTO settings (key, value) VALUES ('k', x'00')")
    error = store.storage_error(refused.value)
    assert error is not None and error.code == "home_read_only" and str(tmp_path) in error.message
    assert store.storage_error(sqlite3.OperationalError("no such table: x")) is None  # a bug stays a bug
    assert store.storage_error(OSError(errno.ENOSPC, "No space left on device")).code == "disk_full"  # type: ignore[union-attr]
    store.close()


def test_a_home_folder_on_a_read_only_disk_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It said ``invalid_argument: cannot create`` of a folder that exists (``chmod`` fails with ``EROFS``)."""
    home = tmp_path / "home"
    home.mkdir()

    def read_only(path: str, mode: int) -> None:
        raise OSError(errno.EROFS, "Read-only file system", path)

    monkeypatch.setattr("os.chmod", read_only)
    with pytest.raises(MemoriesError) as refused:
        ensure_private_dir(str(home))
    assert refused.value.code == "home_read_only"
    assert "read-only file system" in refused.value.message and "cannot create" not in refused.value.message


class _NoContext:
    """A worker context nothing asks anything of (the install is replaced)."""

    def cancelled(self) -> bool:
        return False


def test_a_model_install_on_a_full_disk_is_disk_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(remote, "install_model", full)
    request = w.DownloadModel(
        manifest=model_manifest(None),
        dest_dir=str(tmp_path / "models"),
        base_url=None,
        from_dir=None,
        http=HttpConfig(),
    )
    with pytest.raises(MemoriesError) as refused:
        remote.download_model(request, _NoContext())  # type: ignore[arg-type]
    assert refused.value.code == "disk_full" and str(tmp_path / "models") in refused.value.message
