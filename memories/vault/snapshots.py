"""Sealed index snapshots: each vault's lexical cache kept in the home, sealed under a key of its vault (issue 28).

Analysing every record again (chunking, OpenCC, Jieba, FTS5 inserts) after every unlock, daemon start or eviction
costs seconds at 10,000 chunks; a snapshot brings the index worker's cache back without it. It is plaintext derived
from notes (chunk text, terms), so it is kept as the records are (R-20: never unsealed on disk, never in a sync
payload)::

    vault data key ─HKDF-SHA256("memories/index-snapshots/v1")─▶ snapshot key
    snapshot id = 16 random bytes, hex (new at every write)
    sealed = AES-256-GCM(snapshot key, SealedSnapshot, AAD = (format, "index-snapshot", SNAPSHOT_FORMAT, vault id,
                                                               snapshot id))

A row is ``(vault id, snapshot id, sealed)``: nothing else is in the clear but those ids and the blob's size. A blob
copied to another vault's row (or a row of another home) fails authentication: the key and the vault id differ.

Inside: the chosen head revision id of every record the snapshot holds (what the catalog said when it was written)
and either the index worker's bytes or, for a vault over its limits (``[rag] max_chunks`` …), the figures its
records add up to (chunks, text bytes: derived from notes, so sealed too), so that its searches are refused at once
after a restart as well (:mod:`memories.daemon.index.over_limit`). The worker's bytes are opaque here
(:mod:`memories.rag.snapshots`: the worker checks its own analysis version). *Freshness is checked, not
assumed*: a snapshot is used only when its records are exactly the vault's eligible records at exactly those head
revisions; otherwise (an edit, a delete, a sync pull, a record found damaged since) it is discarded, and the cache
is built from the records. An older copy of the row put back authenticates,
and is then used only if it still matches the records: it can hold nothing the records do not.
"""

from __future__ import annotations

import logging
import secrets
from typing import NamedTuple

import msgspec

from memories import crypto
from memories.errors import MemoriesError
from memories.limits import VaultFigures
from memories.vault.catalog import Catalog
from memories.vault.keys import Keyring
from memories.vault.store import Store, VaultRow

log = logging.getLogger("memories.snapshots")

SNAPSHOT_FORMAT = 1
"""The layout of :class:`SealedSnapshot`, bound into every snapshot's associated data."""

SNAPSHOTS_INFO = b"memories/index-snapshots/v1"


class SealedSnapshot(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """The opened blob: ``heads`` record id -> the chosen head revision id it was taken at; ``data`` the index
    worker's bytes; or, for a vault over its limits, no bytes and ``over``: what its records add up to."""

    heads: dict[str, str]
    data: bytes
    over: VaultFigures | None = None


class OpenedSnapshot(NamedTuple):
    """A snapshot that matches the records: the worker's bytes and the records' depths (record id -> revision, as
    the index worker knows them); for a vault over its limits, ``over`` (its figures) and no bytes."""

    data: bytes
    have: dict[str, int]
    over: VaultFigures | None = None


def snapshot_key(vault_key: bytes) -> bytes:
    """The key snapshots are sealed with (HKDF-SHA256 of the vault's data key, :data:`SNAPSHOTS_INFO`)."""
    return crypto.derive_key(vault_key, SNAPSHOTS_INFO)


def snapshot_aad(vault_id: str, snapshot_id: str) -> bytes:
    """Associated data of a sealed snapshot: the store format, its purpose, :data:`SNAPSHOT_FORMAT`, the vault id
    and the snapshot id (MessagePack of a fixed-length array, so no two bindings encode alike)."""
    return msgspec.msgpack.encode([crypto.FORMAT, "index-snapshot", SNAPSHOT_FORMAT, vault_id, snapshot_id])


class SnapshotTable:
    """The ``snapshots`` table of a :class:`~memories.vault.store.Store` (its schema is there): one sealed snapshot
    per vault in and out, no keys; :meth:`~memories.vault.store.Store.delete_vault` deletes a vault's row."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._db = store._db

    def row(self, vault_id: str) -> tuple[str, bytes] | None:
        """``(snapshot id, sealed blob)`` of the vault's snapshot, if it has one."""
        row = self._db.execute("SELECT id, sealed FROM snapshots WHERE vault_id = ?", (vault_id,)).fetchone()
        return None if row is None else (row[0], row[1])

    def put(self, vault_id: str, snapshot_id: str, sealed: bytes) -> None:
        """Store the vault's snapshot, replacing the one it had (one transaction)."""
        with self._store._transaction():
            self._db.execute(
                "INSERT INTO snapshots (vault_id, id, sealed) VALUES (?, ?, ?) "
                "ON CONFLICT (vault_id) DO UPDATE SET id = excluded.id, sealed = excluded.sealed",
                (vault_id, snapshot_id, sealed),
            )

    def delete(self, vault_id: str | None = None) -> int:
        """Delete the vault's snapshot (every vault's when ``None``: ``[rag] keep_index = false``); how many."""
        with self._store._transaction():
            count = self._db.execute(
                "DELETE FROM snapshots WHERE ? IS NULL OR vault_id = ?", (vault_id, vault_id)
            ).rowcount
        if count and vault_id is None:
            self._store.checkpoint()
        return int(count)


class Snapshots:
    """The sealed index snapshots of every vault. Blocking (the store's thread).

    Args:
        store: the home's database; keys: the keyring; catalog: eligibility and head revisions.
    """

    def __init__(self, store: Store, keys: Keyring, catalog: Catalog) -> None:
        self._store = store
        self._table = SnapshotTable(store)
        self._keys = keys
        self._catalog = catalog

    def load(self, vault: VaultRow) -> OpenedSnapshot | str | None:
        """The vault's snapshot if it matches the records now; ``None`` when it has none; else why not (one line),
        and the row is deleted.

        Raises:
            MemoriesError: ``vault_locked``, ``integrity_error`` (the vault's key or head set, as every read).
        """
        row = self._table.row(vault.id)
        if row is None:
            return None
        snapshot_id, blob = row
        key = self._keys.vault_key(vault)
        try:
            opened = msgspec.msgpack.decode(
                crypto.open_sealed(snapshot_key(key), blob, snapshot_aad(vault.id, snapshot_id)), type=SealedSnapshot
            )
        except (MemoriesError, msgspec.DecodeError, msgspec.ValidationError):
            return self._discard(vault, "it failed authentication or could not be read")
        if opened.heads != self._heads(vault):
            if opened.over is not None:  # the figures of an older state: no loss, nothing to warn about
                self._table.delete(vault.id)
                return None
            return self._discard(vault, "the records changed since it was written")
        return OpenedSnapshot(opened.data, self._catalog.eligible(vault), opened.over)

    def put(self, vault: VaultRow, have: dict[str, int], data: bytes, over: VaultFigures | None = None) -> bool:
        """Seal and store ``data`` as the vault's snapshot (replacing the one it had) if ``have`` (record id ->
        revision, what the worker's cache holds) is exactly the vault's eligible records now; ``False`` (nothing
        written) when the vault changed meanwhile. For a vault over its limits, ``data`` is empty and ``over`` its
        figures (what ``have`` adds up to): a later refusal needs no build, also after a restart.

        Raises:
            MemoriesError: ``vault_locked``, ``integrity_error`` (the vault's key or head set).
        """
        if have != self._catalog.eligible(vault):
            return False
        key = self._keys.vault_key(vault)
        snapshot_id = secrets.token_hex(16)
        plaintext = msgspec.msgpack.encode(SealedSnapshot(self._heads(vault), data, over))
        sealed = crypto.seal(snapshot_key(key), plaintext, snapshot_aad(vault.id, snapshot_id))
        self._table.put(vault.id, snapshot_id, sealed)
        return True

    def delete(self, vault: VaultRow) -> None:
        """Delete the vault's snapshot (no key needed)."""
        self._table.delete(vault.id)

    def forget_all(self) -> int:
        """Delete every snapshot of the home (``[rag] keep_index = false``, at daemon start: no key needed); how
        many. A store of a later format is left untouched (0)."""
        return 0 if self._store.too_new else self._table.delete()

    def _heads(self, vault: VaultRow) -> dict[str, str]:
        """Record id -> chosen head revision id of every eligible record (a sibling chosen by a sync pull at the
        same depth changes it, where the depth alone would not)."""
        eligible = self._catalog.eligible(vault)
        return {rid: entry.revision_id for rid, entry in self._catalog.entries(vault).items() if rid in eligible}

    def _discard(self, vault: VaultRow, why: str) -> str:
        self._table.delete(vault.id)
        log.warning("vault %s: its index snapshot was discarded (%s); building from the records", vault.id, why)
        return why
