"""What the store's file says before SQLite opens it (issue 29, item 3): a file truncated, overwritten or emptied
where a store was is ``database_damaged``, naming the file and the upgrade backups beside it, never taken for a new
home (an empty file made ``unlock`` say ``not_initialized: run memories init``, inviting the person to overwrite the
evidence) and never changed."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from memories.errors import MemoriesError
from memories.paths import storage_error


def upgrade_backups(path: Path) -> list[Path]:
    """The copies :meth:`Store.backup` made beside the store at ``path`` before upgrades, oldest first."""
    return sorted(path.parent.glob(f"{path.stem}.format-*.db"))


def database_damaged(path: Path) -> MemoriesError:
    """``database_damaged`` for the store at ``path``, naming the file and the upgrade backups beside it (the
    person's way back), or saying there are none."""
    backups = upgrade_backups(path)
    if backups:
        way_back = (
            f"the upgrade backups beside it: {', '.join(b.name for b in backups)} (move the damaged file away and copy "
            f"the newest backup to {path.name}; what was written after that backup is not in it)"
        )
    else:
        way_back = f"no upgrade backup is beside it: restore {path.name} from a backup of your own"
    return MemoriesError(
        "database_damaged",
        f"the database {path} is damaged (truncated, overwritten or not a Memories store); nothing was changed; "
        + way_back,
        {"file": str(path), "backups": [str(b) for b in backups]},
    )


def emptied(path: Path) -> bool:
    """An empty file where a store was: a 0-byte ``path`` with an upgrade backup or a non-empty write-ahead log
    beside it (a new home has neither)."""
    try:
        if path.stat().st_size != 0:
            return False
    except FileNotFoundError:
        return False
    return bool(upgrade_backups(path)) or _has_wal(path)


def _has_wal(path: Path) -> bool:
    """A non-empty write-ahead log beside the store at ``path``."""
    try:
        return path.with_name(path.name + "-wal").stat().st_size > 0
    except FileNotFoundError:
        return False


def truncated(path: Path) -> bool:
    """A store file shorter than its own header says: SQLite's header keeps the database size in pages (offset 28)
    and the page size (offset 16, 1 meaning 65,536), valid when the change counter (offset 24) equals the
    version-valid-for number (offset 92) (sqlite.org/fileformat2.html, 1.3). In WAL mode the file only grows at a
    checkpoint, which writes the header too: with a write-ahead log beside it (a checkpoint a full disk cut short,
    the log still holding every page) the file may be shorter and whole; without one, a shorter file lost its end.
    Read without opening the database."""
    if _has_wal(path):
        return False
    try:
        with open(path, "rb") as file:
            header = file.read(100)
            size = os.fstat(file.fileno()).st_size
    except FileNotFoundError:
        return False
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        return False  # empty (a new store) or not SQLite at all: SQLite itself says SQLITE_NOTADB
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    valid = header[24:28] == header[92:96]
    return valid and size < pages * page_size


_SQLITE_READONLY = 8
_SQLITE_CORRUPT = 11
_SQLITE_FULL = 13
_SQLITE_NOTADB = 26  # SQLite result codes (sqlite.org/rescode.html)


def storage_refusal(exc: BaseException, path: Path) -> MemoriesError | None:
    """What a failed call of the store at ``path`` means when the disk or the file, not the call, failed:
    ``disk_full`` for SQLite's full database or disk (``SQLITE_FULL``: no space, a quota, or ``max_page_count``) and
    for ``ENOSPC``/``EDQUOT``, ``home_read_only`` for ``SQLITE_READONLY`` and ``EROFS``, each naming the home's
    folder, ``database_damaged`` for ``SQLITE_CORRUPT`` and ``SQLITE_NOTADB`` (:func:`database_damaged`); ``None``
    for anything else. SQLite reports ``ENOSPC`` as ``SQLITE_FULL`` (os_unix.c)."""
    folder = str(path.parent)
    if isinstance(exc, sqlite3.Error):
        primary = getattr(exc, "sqlite_errorcode", -1) & 0xFF  # extended result codes keep the primary in 8 bits
        if primary == _SQLITE_FULL:
            return storage_error(errno.ENOSPC, folder)
        if primary in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
            return database_damaged(path)
        if primary == _SQLITE_READONLY:
            return MemoriesError(
                "home_read_only",
                f"the database in {folder} cannot be written (its file system was made read-only, or the file was): "
                "nothing was changed",
                {"folder": folder},
            )
        return None
    return storage_error(exc.errno, folder) if isinstance(exc, OSError) else None
