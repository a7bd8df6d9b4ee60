"""The store gate: the home's record store behind one limiter, as async methods.

Every store call runs in a thread, one at a time (the SQLite connection is shared across threads); nothing reads
SQLite on the event loop. Lock takes the same limiter (:meth:`StoreGate.exclusive`), so it never interleaves with a
store call. The daemon's parts call the gate's methods and never reach into the record store's parts
(:class:`memories.vault.record_store.RecordStore`); the few parts of their own that run blocking code over the
store (grants, the sync engine) run it through :meth:`StoreGate.run`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import trio

from memories.config import CryptoConfig
from memories.errors import MemoriesError
from memories.limits import VaultFigures
from memories.vault.record_store import RecordStore
from memories.vault.snapshots import OpenedSnapshot
from memories.vault.store import VaultRow
from memories.vault.views import (
    IndexText,
    ListedRecord,
    LoadedVectors,
    Note,
    OpenedRevision,
    RecordKind,
    RecordVectors,
    Sensitivity,
    StoredCard,
)
from memories.vault.watches import Watch

T = TypeVar("T")


class StoreGate:
    """The record store, one call at a time.

    Args:
        records: the home's record store (its parts are built over the same database and keyring).
    """

    def __init__(self, records: RecordStore) -> None:
        self._records = records
        self._limiter = trio.CapacityLimiter(1)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking store call in a thread, one at a time.

        Raises:
            MemoriesError: ``disk_full`` and ``home_read_only`` for what the disk refused
                (:meth:`~memories.vault.store.Store.storage_error`), and the call's own errors.
        """
        try:
            return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)
        except (sqlite3.Error, OSError) as exc:
            refused = self._records.store.storage_error(exc)
            if refused is None:
                raise
            raise refused from None

    def exclusive(self) -> trio.CapacityLimiter:
        """``async with gate.exclusive():`` — no store call runs meanwhile (lock)."""
        return self._limiter

    # -- keys (in memory: safe on the event loop) ----------------------------------------------------------

    @property
    def locked(self) -> bool:
        """No keys are held (in memory: never reads the store)."""
        return self._records.keys.locked

    @property
    def initialized(self) -> bool:
        """The home has a key hierarchy (as read at start, or made by ``init``)."""
        return self._records.keys.initialized

    def check_unlocked(self) -> None:
        """Raises ``not_initialized`` or ``vault_locked`` unless the home is unlocked."""
        self._records.keys.master()

    def drop_keys(self) -> None:
        """Drop every key and everything decrypted (lock; call it inside :meth:`exclusive`)."""
        self._records.lock()

    def close(self) -> None:
        """Close the database (daemon shutdown)."""
        self._records.close()

    async def load(self) -> None:
        """Read what the keyring needs to know before the first request (whether the home is initialized)."""
        await self.run(self._records.keys.load)

    async def init(self, passphrase: str, cost: CryptoConfig, allow_short: bool) -> None:
        """Create the key hierarchy (:meth:`memories.vault.keys.Keyring.init`)."""
        await self.run(lambda: self._records.keys.init(passphrase, cost, allow_short=allow_short))

    async def unlock(self, passphrase: str) -> Path | None:
        """Unlock, upgrading an older store first; the backup's path after an upgrade (:meth:`RecordStore.unlock`)."""
        return await self.run(self._records.unlock, passphrase)

    async def verify_passphrase(self, passphrase: str) -> None:
        """Prove ``passphrase`` while unlocked already; raises ``bad_passphrase``."""
        await self.run(self._records.verify_passphrase, passphrase)

    # -- vaults --------------------------------------------------------------------------------------------

    async def resolve(self, ref: str) -> VaultRow:
        """The vault named by id or name (works while locked).

        Raises:
            MemoriesError: ``not_initialized``, ``vault_not_found``, ``ambiguous_vault``.
        """
        if not self.initialized:
            raise MemoriesError("not_initialized", "this home has no key hierarchy yet; run `memories init`")
        return await self.run(self._records.vaults.resolve, ref)

    async def resolve_unlocked(self, ref: str) -> VaultRow:
        """:meth:`resolve`, after checking the home is unlocked, with the vault's device-only policy proven by its
        sealed key (R-41).

        Raises:
            MemoriesError: ``vault_locked``, ``integrity_error`` (a policy changed outside Memories) and what
                :meth:`resolve` raises.
        """
        self.check_unlocked()
        vault = await self.resolve(ref)
        await self.run(self._records.keys.vault_key, vault)
        return vault

    async def vaults(self) -> list[VaultRow]:
        """Every vault, oldest first (works while locked)."""
        return await self.run(self._records.vaults.all)

    async def create_vault(self, name: str, device_only: bool) -> VaultRow:
        """:meth:`memories.vault.vaults.Vaults.create`."""
        return await self.run(self._records.vaults.create, name, device_only)

    async def rename_vault(self, vault: VaultRow, name: str) -> VaultRow:
        """:meth:`memories.vault.vaults.Vaults.rename`."""
        return await self.run(self._records.vaults.rename, vault, name)

    async def set_policy(self, vault: VaultRow, device_only: bool) -> VaultRow:
        """:meth:`memories.vault.vaults.Vaults.set_policy`."""
        return await self.run(self._records.vaults.set_policy, vault, device_only)

    async def count_records(self, vault: VaultRow) -> int:
        """Live records of the vault."""
        return await self.run(self._records.vaults.count_records, vault)

    async def delete_vault(self, vault: VaultRow, first: Callable[[], T]) -> tuple[int, T]:
        """Run ``first`` (blocking), then delete the vault with its key and records, in one store call; returns how
        many records it held and what ``first`` returned."""

        def delete() -> tuple[int, T]:
            before = first()
            return self._records.vaults.delete(vault), before

        return await self.run(delete)

    # -- records -------------------------------------------------------------------------------------------

    async def add(
        self, vault: VaultRow, kind: RecordKind, sensitivity: Sensitivity, title: str, body: bytes, meta: dict[str, str]
    ) -> tuple[str, int]:
        """:meth:`memories.vault.records.Records.add`; returns ``(id, 1)``."""
        return await self.run(self._records.records.add, vault, kind, sensitivity, title, body, meta)

    async def read(self, vault: VaultRow, record_id: str, revision: int | str | None) -> OpenedRevision:
        """:meth:`memories.vault.records.Records.read`."""
        return await self.run(self._records.records.read, vault, record_id, revision)

    async def read_eligible(self, vault: VaultRow, record_id: str, revision: int | str | None) -> OpenedRevision | None:
        """:meth:`memories.vault.records.Records.read_eligible`."""
        return await self.run(self._records.records.read_eligible, vault, record_id, revision)

    async def update(
        self,
        vault: VaultRow,
        record_id: str,
        *,
        title: str | None,
        body: bytes | None,
        sensitivity: Sensitivity | None,
        meta: dict[str, str] | None,
        revision: int | str | None,
    ) -> tuple[str, int]:
        """:meth:`memories.vault.records.Records.update`; returns ``(id, revision)``."""

        def update() -> tuple[str, int]:
            return self._records.records.update(
                vault, record_id, title=title, body=body, sensitivity=sensitivity, meta=meta, revision=revision
            )

        return await self.run(update)

    async def delete(self, vault: VaultRow, record_id: str) -> None:
        """:meth:`memories.vault.records.Records.delete`."""
        await self.run(self._records.records.delete, vault, record_id)

    async def move(self, vault: VaultRow, record_id: str, target: VaultRow) -> int:
        """:meth:`memories.vault.records.Records.move`; returns the chosen head's depth."""
        return await self.run(self._records.records.move, vault, record_id, target)

    async def summaries(self, vault: VaultRow, kind: RecordKind | None) -> list[ListedRecord]:
        """The vault's listing (:meth:`memories.vault.catalog.Catalog.summaries`), each card whose file a watch has
        seen absent marked ``missing``."""

        def listing() -> list[ListedRecord]:
            rows = self._records.catalog.summaries(vault, kind)
            missing = self._records.watches.missing_cards(vault)
            return [row._replace(missing=row.id in missing) for row in rows]

        return await self.run(listing)

    async def store_card(self, vault: VaultRow, note: Note, known: str | None = None) -> StoredCard:
        """Store an imported file's note (:meth:`memories.vault.cards.Cards.store_note`); ``known`` is the card a
        watch remembers for the file."""
        return await self.run(self._records.cards.store_note, vault, note, known)

    # -- watched folders -----------------------------------------------------------------------------------

    async def watch_count(self, vault: VaultRow | None = None) -> int:
        """How many folders are watched (into ``vault`` when given); works while locked."""
        return await self.run(self._records.watches.count, vault)

    async def watches(self, vault: VaultRow) -> list[Watch]:
        """The vault's watched folders (:meth:`memories.vault.watches.Watches.of`)."""
        return await self.run(self._records.watches.of, vault)

    async def put_watch(self, vault: VaultRow, watch: Watch) -> None:
        """Store a watch's registration and state, sealed (:meth:`memories.vault.watches.Watches.put`)."""
        await self.run(self._records.watches.put, vault, watch)

    async def remove_watch(self, watch_id: str) -> None:
        """Forget a watched folder (its cards stay)."""
        await self.run(self._records.watches.remove, watch_id)

    # -- retrieval eligibility -----------------------------------------------------------------------------

    async def eligible(self, vault: VaultRow) -> dict[str, int]:
        """Record id -> head depth of every retrieval-eligible record that is not damaged."""
        return await self.run(self._records.catalog.eligible, vault)

    async def damaged(self, vault: VaultRow) -> dict[str, int]:
        """Record id -> head depth of every record found damaged since unlock."""
        return await self.run(self._records.catalog.damaged, vault)

    async def index_texts(self, vault: VaultRow, record_ids: list[str]) -> list[IndexText]:
        """The decrypted chosen heads of these eligible records (:meth:`memories.vault.catalog.Catalog.index_texts`)."""
        return await self.run(self._records.catalog.index_texts, vault, record_ids)

    # -- sealed vectors ------------------------------------------------------------------------------------

    async def load_vectors(self, vault: VaultRow, space_key: str) -> LoadedVectors:
        """The vault's kept vectors of one space, unsealed (:meth:`memories.vault.vectors.VectorRows.load`)."""
        return await self.run(self._records.vectors.load, vault, space_key)

    async def put_vectors(self, vault: VaultRow, space_key: str, dimension: int, records: list[RecordVectors]) -> int:
        """Seal and store records' vector sets (:meth:`memories.vault.vectors.VectorRows.put`); how many rows."""
        return await self.run(self._records.vectors.put, vault, space_key, dimension, records)

    async def forget_vectors(self) -> int:
        """Delete every vector row of the home (``[rag] keep_vectors = false``, at start; no key needed)."""
        return await self.run(self._records.vectors.forget_all)

    # -- sealed index snapshots ----------------------------------------------------------------------------

    async def load_snapshot(self, vault: VaultRow) -> OpenedSnapshot | str | None:
        """The vault's index snapshot if it matches the records (:meth:`memories.vault.snapshots.Snapshots.load`)."""
        return await self.run(self._records.snapshots.load, vault)

    async def put_snapshot(
        self, vault: VaultRow, have: dict[str, int], data: bytes, over: VaultFigures | None = None
    ) -> bool:
        """Seal and store the vault's index snapshot, or the figures of a vault over its limits
        (:meth:`memories.vault.snapshots.Snapshots.put`)."""
        return await self.run(self._records.snapshots.put, vault, have, data, over)

    async def delete_snapshot(self, vault: VaultRow) -> None:
        """Delete the vault's index snapshot."""
        await self.run(self._records.snapshots.delete, vault)

    async def forget_snapshots(self) -> int:
        """Delete every index snapshot of the home (``[rag] keep_index = false``, at start; no key needed)."""
        return await self.run(self._records.snapshots.forget_all)

    async def recent_vaults(self) -> list[str]:
        """The ids of the vaults searched most recently (:meth:`memories.vault.vaults.Vaults.recent`)."""
        return await self.run(self._records.vaults.recent)

    async def remember_search(self, vault: VaultRow) -> list[str]:
        """Put the vault first among those searched most recently
        (:meth:`memories.vault.vaults.Vaults.remember_search`)."""
        return await self.run(self._records.vaults.remember_search, vault.id)
