"""The encrypted store: one SQLite database per home, holding only ciphertext for record content.

In the clear: vault ids, names and policy (the policy authenticated by the associated data of the vault's wrapped
key); record ids, revision numbers and timestamps; the sizes implied by the ciphertext; grant ids, the SHA-256 of
each grant token, and listing copies of each grant's vault, client, scope and expiry (only the sealed copy
authorizes). Sealed (see :mod:`memories.crypto`): the master key, each vault's
data key, every record field (``header`` = kind, sensitivity, title, metadata; ``body``) and each grant's terms
(vault, scope, expiry). This module moves bytes in and out and knows no keys.

Durability: WAL with ``synchronous=FULL``, so a reply sent after a commit survives a crash of the daemon or of the
machine. ``secure_delete`` zeroes freed pages, so deleted ciphertext does not linger in the file.

All methods are blocking; the daemon calls them from one worker thread at a time (``check_same_thread=False``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import NamedTuple

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
CREATE TABLE IF NOT EXISTS records (
    vault_id TEXT NOT NULL REFERENCES vaults(id),
    id       TEXT NOT NULL,
    latest   INTEGER NOT NULL,
    created  REAL NOT NULL,
    updated  REAL NOT NULL,
    PRIMARY KEY (vault_id, id)
);
CREATE TABLE IF NOT EXISTS revisions (
    vault_id  TEXT NOT NULL,
    record_id TEXT NOT NULL,
    revision  INTEGER NOT NULL,
    created   REAL NOT NULL,
    header    BLOB NOT NULL,
    body      BLOB NOT NULL,
    PRIMARY KEY (vault_id, record_id, revision),
    FOREIGN KEY (vault_id, record_id) REFERENCES records (vault_id, id) ON DELETE CASCADE
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
"""


class VaultRow(NamedTuple):
    id: str
    name: str
    device_only: bool
    created: float
    wrapped_key: bytes


class HeaderRow(NamedTuple):
    """The latest revision of one record, header ciphertext only (listing never touches bodies)."""

    id: str
    revision: int
    created: float
    updated: float
    header: bytes


class RevisionRow(NamedTuple):
    id: str
    revision: int
    created: float
    updated: float
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


class Store:
    """The SQLite file at ``path``, created with its schema if missing (file mode 0600)."""

    def __init__(self, path: Path) -> None:
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
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        """Close the connection (daemon shutdown)."""
        self._db.close()

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

    def insert_vault(self, row: VaultRow) -> None:
        """Raises ``sqlite3.IntegrityError`` when the name is taken."""
        with self._transaction():
            self._db.execute(
                "INSERT INTO vaults (id, name, device_only, created, wrapped_key) VALUES (?, ?, ?, ?, ?)",
                (row.id, row.name, int(row.device_only), row.created, row.wrapped_key),
            )

    def vaults(self) -> list[VaultRow]:
        """Every vault, oldest first."""
        rows = self._db.execute(
            "SELECT id, name, device_only, created, wrapped_key FROM vaults ORDER BY created, id"
        ).fetchall()
        return [VaultRow(r[0], r[1], bool(r[2]), r[3], r[4]) for r in rows]

    def rename_vault(self, vault_id: str, name: str) -> None:
        """Raises ``sqlite3.IntegrityError`` when the name is taken."""
        with self._transaction():
            self._db.execute("UPDATE vaults SET name = ? WHERE id = ?", (name, vault_id))

    def delete_vault(self, vault_id: str) -> None:
        """Remove a vault, its wrapped key and every record and revision, in one transaction."""
        with self._transaction():
            self._db.execute("DELETE FROM revisions WHERE vault_id = ?", (vault_id,))
            self._db.execute("DELETE FROM records WHERE vault_id = ?", (vault_id,))
            self._db.execute("DELETE FROM vaults WHERE id = ?", (vault_id,))

    def set_policy(self, vault_id: str, device_only: bool, wrapped_key: bytes) -> None:
        """Change a vault's device-only policy together with its key wrapped for that policy (one transaction)."""
        with self._transaction():
            self._db.execute(
                "UPDATE vaults SET device_only = ?, wrapped_key = ? WHERE id = ?",
                (int(device_only), wrapped_key, vault_id),
            )

    # -- records -------------------------------------------------------------------------------------------

    def record_exists(self, vault_id: str, record_id: str) -> bool:
        """The record is live (not deleted) in the vault."""
        row = self._db.execute("SELECT 1 FROM records WHERE vault_id = ? AND id = ?", (vault_id, record_id)).fetchone()
        return row is not None

    def count_records(self, vault_id: str) -> int:
        """Live records of the vault, every kind."""
        return self._db.execute("SELECT count(*) FROM records WHERE vault_id = ?", (vault_id,)).fetchone()[0]

    def add_revision(self, vault_id: str, record_id: str, revision: int, at: float, header: bytes, body: bytes) -> None:
        """Store revision ``revision`` (1 creates the record) and make it the latest, in one transaction."""
        with self._transaction():
            if revision == 1:
                self._db.execute(
                    "INSERT INTO records (vault_id, id, latest, created, updated) VALUES (?, ?, 1, ?, ?)",
                    (vault_id, record_id, at, at),
                )
            else:
                self._db.execute(
                    "UPDATE records SET latest = ?, updated = ? WHERE vault_id = ? AND id = ?",
                    (revision, at, vault_id, record_id),
                )
            self._db.execute(
                "INSERT INTO revisions (vault_id, record_id, revision, created, header, body) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (vault_id, record_id, revision, at, header, body),
            )

    def latest_headers(self, vault_id: str) -> list[HeaderRow]:
        """Every live record of the vault with its latest revision's header ciphertext, oldest first."""
        rows = self._db.execute(
            """
            SELECT r.id, r.latest, r.created, r.updated, v.header
            FROM records AS r
            JOIN revisions AS v ON v.vault_id = r.vault_id AND v.record_id = r.id AND v.revision = r.latest
            WHERE r.vault_id = ?
            ORDER BY r.created, r.id
            """,
            (vault_id,),
        ).fetchall()
        return [HeaderRow(*r) for r in rows]

    def revision(self, vault_id: str, record_id: str, revision: int | None) -> RevisionRow | None:
        """One revision (the latest when ``revision`` is ``None``), or ``None`` if there is no such revision."""
        rows = self._db.execute(
            """
            SELECT r.id, v.revision, r.created, v.created, v.header, v.body
            FROM records AS r
            JOIN revisions AS v ON v.vault_id = r.vault_id AND v.record_id = r.id
            WHERE r.vault_id = ? AND r.id = ? AND v.revision = coalesce(?, r.latest)
            """,
            (vault_id, record_id, revision),
        ).fetchall()
        return RevisionRow(*rows[0]) if rows else None

    def bodies(self, vault_id: str, record_ids: list[str]) -> dict[str, tuple[int, bytes, bytes]]:
        """Latest ``(revision, header, body)`` ciphertext of each given live record."""
        found: dict[str, tuple[int, bytes, bytes]] = {}
        for start in range(0, len(record_ids), 500):
            batch = record_ids[start : start + 500]
            marks = ",".join("?" * len(batch))
            rows = self._db.execute(
                f"""
                SELECT r.id, v.revision, v.header, v.body
                FROM records AS r
                JOIN revisions AS v
                  ON v.vault_id = r.vault_id AND v.record_id = r.id AND v.revision = r.latest
                WHERE r.vault_id = ? AND r.id IN ({marks})
                """,
                (vault_id, *batch),
            ).fetchall()
            for record_id, revision, header, body in rows:
                found[record_id] = (revision, header, body)
        return found

    def revisions(self, vault_id: str, record_id: str) -> list[RevisionRow]:
        """Every revision of a live record, oldest first (``created`` is the record's, ``updated`` the revision's
        time), or ``[]``."""
        rows = self._db.execute(
            """
            SELECT r.id, v.revision, r.created, v.created, v.header, v.body
            FROM records AS r
            JOIN revisions AS v ON v.vault_id = r.vault_id AND v.record_id = r.id
            WHERE r.vault_id = ? AND r.id = ?
            ORDER BY v.revision
            """,
            (vault_id, record_id),
        ).fetchall()
        return [RevisionRow(*row) for row in rows]

    def move_record(self, source_vault: str, target_vault: str, record_id: str, revisions: list[RevisionRow]) -> None:
        """Replace a record of ``source_vault`` by the same record (id, times, revisions re-sealed by the caller)
        in ``target_vault``, in one transaction. Raises ``sqlite3.IntegrityError`` if the target has that id."""
        latest = revisions[-1]
        with self._transaction():
            self._db.execute(
                "INSERT INTO records (vault_id, id, latest, created, updated) VALUES (?, ?, ?, ?, ?)",
                (target_vault, record_id, latest.revision, latest.created, latest.updated),
            )
            self._db.executemany(
                "INSERT INTO revisions (vault_id, record_id, revision, created, header, body) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(target_vault, record_id, row.revision, row.updated, row.header, row.body) for row in revisions],
            )
            self._db.execute("DELETE FROM revisions WHERE vault_id = ? AND record_id = ?", (source_vault, record_id))
            self._db.execute("DELETE FROM records WHERE vault_id = ? AND id = ?", (source_vault, record_id))

    def delete_record(self, vault_id: str, record_id: str) -> None:
        """Remove a record and every revision (their pages are zeroed by ``secure_delete``)."""
        with self._transaction():
            self._db.execute("DELETE FROM revisions WHERE vault_id = ? AND record_id = ?", (vault_id, record_id))
            self._db.execute("DELETE FROM records WHERE vault_id = ? AND id = ?", (vault_id, record_id))

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


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` on an exception (autocommit connection)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")
