"""The encrypted store: one SQLite database per home, holding only ciphertext for record content.

In the clear: vault ids, names and policy (both authenticated by the associated data of the vault's wrapped key);
record ids, revision ids, depths, parents and timestamps (authenticated by each revision's fields and its id); the
sizes implied by the ciphertext; grant ids, the SHA-256 of each grant token, and listing copies of each grant's
vault, client, scope and expiry (only the sealed copy authorizes). Sealed (see :mod:`memories.crypto`): the master
key, each vault's data key, every record field (``header`` = kind, sensitivity, title, metadata; ``body``), each
vault's head set (its records' head revision ids and a counter), each grant's terms (vault, scope, expiry) and each
record's embedding vectors (one row per record under an id keyed by the vault key, :mod:`memories.vault.vectors`).
This module moves bytes in and out and knows no keys.

Durability: WAL with ``synchronous=FULL``, so a reply sent after a commit survives a crash of the daemon or of the
machine. ``secure_delete`` zeroes freed pages, so deleted ciphertext does not linger in the file.

All methods are blocking; the daemon calls them from one worker thread at a time (``check_same_thread=False``).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from memories.errors import MemoriesError
from memories.vault.store_file import database_damaged, emptied, storage_refusal, truncated

FORMAT = 3
"""The store format, kept in SQLite's ``user_version``. Format 1 (releases 0.1 and 0.2, ``user_version`` 0) had a
``records`` table and revisions numbered 1, 2, 3 with no ids and no head set; :meth:`Store.upgrade` turns it into
the current format once, at the first unlock (:meth:`memories.vault.record_store.RecordStore.unlock`). Format 3 adds
the ``vectors`` table (sealed embedding vectors); a format-2 store gets the empty table when it is opened (nothing
that exists changes, so no backup is made). A store of a later format (:attr:`Store.too_new`) is left untouched and
refused at unlock (``home_too_new``)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (
    key   TEXT PRIMARY KEY,
    value BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS vaults (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    device_only INTEGER NOT NULL,
    created     REAL NOT NULL,
    wrapped_key BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS watches (
    id       TEXT PRIMARY KEY,
    vault_id TEXT NOT NULL,
    sealed   BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS grants (
    id         TEXT PRIMARY KEY,
    token_hash BLOB NOT NULL UNIQUE,
    vault_id   TEXT NOT NULL,
    client     TEXT NOT NULL,
    scope      TEXT NOT NULL,
    created    REAL NOT NULL,
    expires    REAL,
    revoked    REAL,
    terms      BLOB
);
CREATE TABLE IF NOT EXISTS snapshots (
    vault_id TEXT PRIMARY KEY,
    id       TEXT NOT NULL,
    sealed   BLOB NOT NULL
);
"""

# ``watches``: each watched folder's registration and state, sealed under its vault's key
# (:mod:`memories.vault.watches`). It came after format 2 was released and needs no format step:
# ``CREATE TABLE IF NOT EXISTS`` adds it to any store when it is opened, and it names its vault without a foreign
# key, so an earlier release can still delete that vault. ``snapshots`` (issue 28): each vault's sealed index
# snapshot under a random id (:mod:`memories.vault.snapshots`), added the same way and for the same reasons.

REVISIONS_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS heads (
        vault_id TEXT PRIMARY KEY REFERENCES vaults(id),
        sealed   BLOB NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS revisions (
        vault_id  TEXT NOT NULL REFERENCES vaults(id),
        record_id TEXT NOT NULL,
        id        TEXT NOT NULL,
        revision  INTEGER NOT NULL,
        parents   TEXT NOT NULL,
        deleted   INTEGER NOT NULL,
        created   REAL NOT NULL,
        header    BLOB NOT NULL,
        body      BLOB NOT NULL,
        PRIMARY KEY (vault_id, id)
    )
    """,
    "CREATE INDEX IF NOT EXISTS revisions_of_record ON revisions (vault_id, record_id, revision)",
    """
    CREATE TABLE IF NOT EXISTS sync (
        vault_id TEXT PRIMARY KEY REFERENCES vaults(id),
        state    BLOB NOT NULL
    )
    """,
)
"""Format 2: every revision under its id (``parents``: the parent ids separated by spaces, sorted), and one sealed
head set per vault (each record's head revisions and a counter; :class:`memories.vault.heads.HeadSet`), and
each synced vault's sync state (its folder, this device's id, the payload files seen; no content)."""

VECTORS_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    vault_id TEXT NOT NULL REFERENCES vaults(id),
    id       TEXT NOT NULL,
    sealed   BLOB NOT NULL,
    PRIMARY KEY (vault_id, id)
) WITHOUT ROWID
"""
"""Format 3: one row per record with vectors; ``id`` is keyed by the vault key (it names no record without it) and
``sealed`` holds everything else (:class:`memories.vault.vectors.SealedVectors`)."""


class VaultRow(NamedTuple):
    id: str
    name: str
    device_only: bool
    created: float
    wrapped_key: bytes


class RevisionRow(NamedTuple):
    """One stored revision: ``id`` is its revision id (SHA-256 hex of the sealed revision), ``revision`` its depth,
    ``parents`` its parent ids, ``created`` a Unix time in seconds, ``deleted`` whether it is a deletion. Nothing
    here is trusted until the id is recomputed from the rest and found in the vault's sealed head set (or as a
    parent of a head)."""

    record_id: str
    id: str
    revision: int
    parents: tuple[str, ...]
    created: float
    header: bytes
    body: bytes
    deleted: bool = False


class Write(NamedTuple):
    """One vault's part of a transaction: revisions to store, revision ids to erase, its new sealed head set, and the
    ids of vector rows to delete (of records deleted, moved away or no longer eligible)."""

    vault_id: str
    heads: bytes
    add: Sequence[RevisionRow] = ()
    erase: Sequence[str] = ()
    drop_vectors: Sequence[str] = ()


class LegacyRevisionRow(NamedTuple):
    """A revision of store format 1, read once by the upgrade."""

    vault_id: str
    record_id: str
    revision: int
    created: float
    header: bytes
    body: bytes


class GrantRow(NamedTuple):
    """One grant. ``vault_id``, ``client``, ``scope`` (comma-separated) and ``expires`` are clear copies for
    listing; only the sealed ``terms`` authorize (``None`` once revoked, so a revoke cannot be undone by editing
    the file)."""

    id: str
    token_hash: bytes
    vault_id: str
    client: str
    scope: str
    created: float
    expires: float | None
    revoked: float | None
    terms: bytes | None


_GRANT_COLUMNS = "id, token_hash, vault_id, client, scope, created, expires, revoked, terms"
_REVISION_COLUMNS = "record_id, id, revision, parents, created, header, body, deleted"


def _revision_row(row: tuple[Any, ...]) -> RevisionRow:
    record_id, revision_id, revision, parents, created, header, body, deleted = row
    return RevisionRow(record_id, revision_id, revision, tuple(parents.split()), created, header, body, bool(deleted))


class Store:
    """The SQLite file at ``path``, created with its schema if missing (file mode 0600).

    Raises:
        MemoriesError: ``disk_full`` and ``home_read_only`` (:meth:`storage_error`), ``database_damaged``
            (:mod:`memories.vault.store_file`: a file truncated, overwritten, or emptied where a store was).
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        if emptied(path) or truncated(path):
            raise database_damaged(path)
        try:
            self._open(path)
        except (sqlite3.Error, OSError) as exc:
            refused = self.storage_error(exc)
            if refused is None:
                raise
            raise refused from None

    def _open(self, path: Path) -> None:
        path.touch(mode=0o600, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        for pragma in (
            "journal_mode = WAL",
            "synchronous = FULL",
            "secure_delete = ON",
            "temp_store = MEMORY",
            "foreign_keys = ON",
            "busy_timeout = 5000",
        ):
            self._db.execute(f"PRAGMA {pragma}")
        self.too_new = self.format > FORMAT
        """The store was written by a later release (a format this one does not know): nothing here changes it, and
        unlock refuses it (``home_too_new``)."""
        if self.too_new:
            return
        with self._transaction():
            legacy = self._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'records'").fetchone() is not None
            for statement in SCHEMA.split(";"):
                self._db.execute(statement)
            if legacy and self._db.execute("SELECT 1 FROM vaults").fetchone() is None:
                # A format-1 store without vaults holds no revision: its tables are replaced now.
                self._db.execute("DROP TABLE revisions")
                self._db.execute("DROP TABLE records")
                legacy = False
            if not legacy:
                for statement in REVISIONS_SCHEMA:
                    self._db.execute(statement)
                self._db.execute(VECTORS_SCHEMA)
                self._db.execute(f"PRAGMA user_version = {FORMAT}")

    @property
    def format(self) -> int:
        """1 until :meth:`upgrade` ran on a store of an earlier release, else :data:`FORMAT` (or a later format, see
        :attr:`too_new`)."""
        return self._db.execute("PRAGMA user_version").fetchone()[0] or 1

    def close(self) -> None:
        """Close the connection (daemon shutdown)."""
        self._db.close()

    def storage_error(self, exc: BaseException) -> MemoriesError | None:
        """What a failed store call means when the disk or the file, not the call, failed
        (:func:`memories.vault.store_file.storage_refusal`); ``None`` for anything else (a bug, reported as such)."""
        return storage_refusal(exc, self._path)

    # -- settings ------------------------------------------------------------------------------------------

    def get_setting(self, key: str) -> bytes | None:
        """The value stored under ``key`` in ``settings``, or ``None``."""
        row = self._db.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def put_settings(self, values: dict[str, bytes]) -> None:
        """Write several settings in one transaction."""
        with self._transaction():
            self._db.executemany(
                "INSERT INTO settings (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                list(values.items()),
            )

    # -- vaults --------------------------------------------------------------------------------------------

    def insert_vault(self, row: VaultRow, heads: bytes) -> None:
        """Store a new vault with its sealed (empty) head set. Raises ``sqlite3.IntegrityError`` when the name is
        taken."""
        with self._transaction():
            self._db.execute(
                "INSERT INTO vaults (id, name, device_only, created, wrapped_key) VALUES (?, ?, ?, ?, ?)",
                (row.id, row.name, int(row.device_only), row.created, row.wrapped_key),
            )
            self._db.execute("INSERT INTO heads (vault_id, sealed) VALUES (?, ?)", (row.id, heads))

    def vaults(self) -> list[VaultRow]:
        """Every vault, oldest first."""
        rows = self._db.execute(
            "SELECT id, name, device_only, created, wrapped_key FROM vaults ORDER BY created, id"
        ).fetchall()
        return [VaultRow(r[0], r[1], bool(r[2]), r[3], r[4]) for r in rows]

    def update_vault(self, row: VaultRow) -> None:
        """Change a vault's name or device-only policy together with its key wrapped for them (one transaction).
        Raises ``sqlite3.IntegrityError`` when the name is taken."""
        with self._transaction():
            self._db.execute(
                "UPDATE vaults SET name = ?, device_only = ?, wrapped_key = ? WHERE id = ?",
                (row.name, int(row.device_only), row.wrapped_key, row.id),
            )

    def delete_vault(self, vault_id: str) -> None:
        """Remove a vault, its wrapped key, head set, every revision, its vector rows and its index snapshot, in one
        transaction."""
        with self._transaction():
            self._db.execute("DELETE FROM revisions WHERE vault_id = ?", (vault_id,))
            self._db.execute("DELETE FROM vectors WHERE vault_id = ?", (vault_id,))
            self._db.execute("DELETE FROM snapshots WHERE vault_id = ?", (vault_id,))
            self._db.execute("DELETE FROM heads WHERE vault_id = ?", (vault_id,))
            self._db.execute("DELETE FROM sync WHERE vault_id = ?", (vault_id,))
            self._db.execute("DELETE FROM watches WHERE vault_id = ?", (vault_id,))
            self._db.execute("DELETE FROM vaults WHERE id = ?", (vault_id,))

    # -- revisions -----------------------------------------------------------------------------------------

    def heads(self, vault_id: str) -> bytes | None:
        """The vault's sealed head set, or ``None`` (a row dropped outside Memories)."""
        row = self._db.execute("SELECT sealed FROM heads WHERE vault_id = ?", (vault_id,)).fetchone()
        return row[0] if row else None

    def write(self, *writes: Write) -> None:
        """Apply ``writes`` (to one vault each) in one transaction."""
        with self._transaction():
            for write in writes:
                erased = [(write.vault_id, revision_id) for revision_id in write.erase]
                self._db.executemany("DELETE FROM revisions WHERE vault_id = ? AND id = ?", erased)
                self._insert(write.vault_id, write.add)
                self._db.execute("UPDATE heads SET sealed = ? WHERE vault_id = ?", (write.heads, write.vault_id))
                dropped = [(write.vault_id, row_id) for row_id in write.drop_vectors]
                self._db.executemany("DELETE FROM vectors WHERE vault_id = ? AND id = ?", dropped)

    def count_records(self, vault_id: str) -> int:
        """Records with at least one stored revision in the vault (trusting nothing: for ``vault delete``)."""
        (count,) = self._db.execute(
            "SELECT count(DISTINCT record_id) FROM revisions WHERE vault_id = ?", (vault_id,)
        ).fetchone()
        return int(count)

    def revisions_by_id(self, vault_id: str, ids: list[str]) -> dict[str, RevisionRow]:
        """The stored revisions with these ids (the missing ones are absent)."""
        found: dict[str, RevisionRow] = {}
        for start in range(0, len(ids), 500):
            batch = ids[start : start + 500]
            marks = ",".join("?" * len(batch))
            rows = self._db.execute(
                f"SELECT {_REVISION_COLUMNS} FROM revisions WHERE vault_id = ? AND id IN ({marks})", (vault_id, *batch)
            ).fetchall()
            found.update((row[1], _revision_row(row)) for row in rows)
        return found

    def revisions(self, vault_id: str, record_id: str) -> list[RevisionRow]:
        """Every stored revision of a record, by depth then id, or ``[]``."""
        rows = self._db.execute(
            f"SELECT {_REVISION_COLUMNS} FROM revisions WHERE vault_id = ? AND record_id = ? ORDER BY revision, id",
            (vault_id, record_id),
        ).fetchall()
        return [_revision_row(row) for row in rows]

    def _insert(self, vault_id: str, rows: Sequence[RevisionRow]) -> None:
        self._db.executemany(
            "INSERT INTO revisions (vault_id, record_id, id, revision, parents, deleted, created, header, body) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    vault_id,
                    r.record_id,
                    r.id,
                    r.revision,
                    " ".join(r.parents),
                    int(r.deleted),
                    r.created,
                    r.header,
                    r.body,
                )
                for r in rows
            ],
        )

    def revision_index(self, vault_id: str) -> list[tuple[str, str, bool]]:
        """``(revision id, record id, deleted)`` of every stored revision of the vault (no ciphertext)."""
        rows = self._db.execute(
            "SELECT id, record_id, deleted FROM revisions WHERE vault_id = ?", (vault_id,)
        ).fetchall()
        return [(revision_id, record_id, bool(deleted)) for revision_id, record_id, deleted in rows]

    # -- sync state ----------------------------------------------------------------------------------------

    def sync_state(self, vault_id: str) -> bytes | None:
        """The vault's sync state (:class:`memories.sync.engine.SyncState` as MessagePack sealed under the vault's
        key, or in clear as releases before issue 29 stored it), or ``None``."""
        row = self._db.execute("SELECT state FROM sync WHERE vault_id = ?", (vault_id,)).fetchone()
        return row[0] if row else None

    def put_sync_state(self, vault_id: str, state: bytes) -> None:
        """Store the vault's sync state (sealed by :mod:`memories.sync.engine`)."""
        with self._transaction():
            self._db.execute(
                "INSERT INTO sync (vault_id, state) VALUES (?, ?) "
                "ON CONFLICT (vault_id) DO UPDATE SET state = excluded.state",
                (vault_id, state),
            )

    # -- upgrade -------------------------------------------------------------------------------------------

    def legacy_revisions(self) -> list[LegacyRevisionRow]:
        """Every revision of a format-1 store, by vault, record and revision number."""
        rows = self._db.execute(
            "SELECT vault_id, record_id, revision, created, header, body FROM revisions "
            "ORDER BY vault_id, record_id, revision"
        ).fetchall()
        return [LegacyRevisionRow(*row) for row in rows]

    def backup(self) -> Path:
        """Copy the whole database, before an upgrade, to ``memories.format-N.YYYYMMDD-HHMMSS.db`` beside it (a new
        file, mode 0600) with SQLite's online backup; returns its path."""
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        path = self._path.with_name(f"{self._path.stem}.format-{self.format}.{stamp}.db")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        target = sqlite3.connect(path)
        try:
            self._db.backup(target)
            target.execute("PRAGMA journal_mode = DELETE")  # one self-contained file, no -wal beside it
        finally:
            target.close()
        return path

    def upgrade(self, vaults: list[VaultRow], heads: dict[str, bytes], revisions: dict[str, list[RevisionRow]]) -> None:
        """Turn a format-1 store into the current format in one transaction: the vault rows ``vaults`` (keys wrapped
        again), every vault's sealed head set and its revisions re-sealed (vault id -> rows), an empty ``vectors``
        table; the old tables are dropped."""
        with self._transaction():
            self._db.execute("ALTER TABLE revisions RENAME TO legacy_revisions")
            for statement in REVISIONS_SCHEMA:
                self._db.execute(statement)
            self._db.execute(VECTORS_SCHEMA)
            for row in vaults:
                self._db.execute("UPDATE vaults SET wrapped_key = ? WHERE id = ?", (row.wrapped_key, row.id))
            self._db.executemany("INSERT INTO heads (vault_id, sealed) VALUES (?, ?)", list(heads.items()))
            for vault_id, rows in revisions.items():
                self._insert(vault_id, rows)
            self._db.execute("DROP TABLE legacy_revisions")
            self._db.execute("DROP TABLE records")
            self._db.execute(f"PRAGMA user_version = {FORMAT}")

    # -- grants ------------------------------------------------------------------------------------------------

    def insert_grant(self, row: GrantRow) -> None:
        """Store a new grant."""
        with self._transaction():
            self._db.execute(f"INSERT INTO grants ({_GRANT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)

    def grant_by_token_hash(self, token_hash: bytes) -> GrantRow | None:
        """The grant whose token has this SHA-256, or ``None``."""
        row = self._db.execute(f"SELECT {_GRANT_COLUMNS} FROM grants WHERE token_hash = ?", (token_hash,)).fetchone()
        return GrantRow(*row) if row else None

    def grant(self, grant_id: str) -> GrantRow | None:
        """The grant ``grant_id``, or ``None``."""
        row = self._db.execute(f"SELECT {_GRANT_COLUMNS} FROM grants WHERE id = ?", (grant_id,)).fetchone()
        return GrantRow(*row) if row else None

    def grants(self, vault_id: str | None = None) -> list[GrantRow]:
        """Every grant (of one vault when ``vault_id`` is given), oldest first."""
        rows = self._db.execute(
            f"SELECT {_GRANT_COLUMNS} FROM grants WHERE ? IS NULL OR vault_id = ? ORDER BY created, id",
            (vault_id, vault_id),
        ).fetchall()
        return [GrantRow(*r) for r in rows]

    def revoke_grants(self, grant_ids: list[str], at: float) -> None:
        """Mark grants revoked at ``at`` and erase their sealed terms, in one transaction."""
        with self._transaction():
            self._db.executemany(
                "UPDATE grants SET revoked = coalesce(revoked, ?), terms = NULL WHERE id = ?",
                [(at, grant_id) for grant_id in grant_ids],
            )

    def checkpoint(self) -> None:
        """Fold the WAL back into the database file (after deletes, so old pages leave the WAL too)."""
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class VectorTable:
    """The ``vectors`` table of a :class:`Store` (format 3): sealed rows in and out, no keys. A write that removes a
    record deletes its row in the same transaction (:attr:`Write.drop_vectors`, :meth:`Store.delete_vault`)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._db = store._db

    def rows(self, vault_id: str) -> list[tuple[str, bytes]]:
        """``(row id, sealed blob)`` of every vector row of the vault."""
        return self._db.execute("SELECT id, sealed FROM vectors WHERE vault_id = ?", (vault_id,)).fetchall()

    def put(self, vault_id: str, rows: Sequence[tuple[str, bytes]], drop: Sequence[str] = ()) -> None:
        """Store (or replace) vector rows ``(row id, sealed blob)`` and delete the rows ``drop``, in one
        transaction."""
        with self._store._transaction():
            self._db.executemany(
                "INSERT INTO vectors (vault_id, id, sealed) VALUES (?, ?, ?) "
                "ON CONFLICT (vault_id, id) DO UPDATE SET sealed = excluded.sealed",
                [(vault_id, row_id, sealed) for row_id, sealed in rows],
            )
            self._db.executemany("DELETE FROM vectors WHERE vault_id = ? AND id = ?", [(vault_id, i) for i in drop])

    def delete_all(self) -> int:
        """Delete every vector row of every vault (``[rag] keep_vectors = false``; no key needed); how many."""
        with self._store._transaction():
            count = self._db.execute("DELETE FROM vectors").rowcount
        if count:
            self._store.checkpoint()
        return count


def first_revision_times(store: Store, vault_id: str) -> dict[str, float]:
    """Record id -> the time (Unix seconds) of its first revision (the earliest of depth 1, a sibling's too) for
    every record of the vault with one stored: a record's date when its metadata names none. Read from the clear
    ``created`` column, which each revision's id authenticates."""
    rows = store._db.execute(
        "SELECT record_id, min(created) FROM revisions WHERE vault_id = ? AND revision = 1 AND NOT deleted "
        "GROUP BY record_id",
        (vault_id,),
    ).fetchall()
    return {record_id: created for record_id, created in rows}


class WatchTable:
    """The ``watches`` table of a :class:`Store`: each watched folder's sealed registration in and out, no keys
    (:mod:`memories.vault.watches`); :meth:`Store.delete_vault` deletes a vault's rows."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._db = store._db

    def rows(self, vault_id: str) -> list[tuple[str, bytes]]:
        """``(watch id, sealed registration)`` of every watched folder of the vault, oldest first."""
        return self._db.execute(
            "SELECT id, sealed FROM watches WHERE vault_id = ? ORDER BY rowid", (vault_id,)
        ).fetchall()

    def count(self, vault_id: str | None = None) -> int:
        """How many folders are registered (into one vault when given); readable while locked."""
        row = self._db.execute(
            "SELECT count(*) FROM watches WHERE ? IS NULL OR vault_id = ?", (vault_id, vault_id)
        ).fetchone()
        return int(row[0])

    def put(self, watch_id: str, vault_id: str, sealed: bytes) -> None:
        """Store a watched folder's sealed registration (new or replaced)."""
        with self._store._transaction():
            self._db.execute(
                "INSERT INTO watches (id, vault_id, sealed) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET sealed = excluded.sealed",
                (watch_id, vault_id, sealed),
            )

    def delete(self, watch_id: str) -> None:
        """Forget a watched folder."""
        with self._store._transaction():
            self._db.execute("DELETE FROM watches WHERE id = ?", (watch_id,))


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` on an exception (autocommit connection)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error:  # a full disk can fail the commit itself: the transaction is still open
                self._rollback()
                raise
        else:
            self._rollback()

    def _rollback(self) -> None:
        """``ROLLBACK`` if a transaction is still open: SQLite rolls one back itself after some errors (a full disk),
        and a ``ROLLBACK`` then would raise "no transaction is active" in place of the error that matters."""
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
