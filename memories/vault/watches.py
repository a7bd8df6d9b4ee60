"""Watched folders: each registration and what its watch has seen, sealed under its vault's key.

A folder's path is as private as a note's, so a registration (the folder, its rules, the state of each file the
watch imported: its card, size, modification time and inode, whether it has been seen absent) is one sealed blob
per watch (``crypto.watch_aad``: bound to the vault and the watch id). While locked only their number is known.
A deleted vault's watches are deleted with it (:meth:`memories.vault.store.Store.delete_vault`).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from memories import crypto
from memories.errors import MemoriesError
from memories.vault.keys import Keyring
from memories.vault.store import Store, VaultRow, WatchTable

OnDelete = Literal["delete", "keep"]
"""What a watch does with the card of a file that is gone: ``delete`` it (after the deletion rules), or ``keep``
it (marked missing in ``memory list``)."""


class WatchedFile(msgspec.Struct, array_like=True):
    """One file the watch has seen, by its path relative to the folder.

    Attributes:
        card: the record id of its card (``None`` for a file that was refused).
        size: bytes; mtime_ns: modification time in nanoseconds; inode: its inode, when it was last imported or
            refused (a change of any is a change of the file).
        absent_since: Unix seconds of the first scan that did not find it, ``None`` while it is there.
        refused: ``code: message`` of its refusal, reported once (until the file changes).
    """

    card: str | None
    size: int
    mtime_ns: int
    inode: int
    absent_since: float | None = None
    refused: str | None = None


class Watch(msgspec.Struct, kw_only=True):
    """A watched folder: its registration and state (unknown fields of a later release are ignored).

    Attributes:
        id: 16 hex digits; vault_id: the vault it imports into.
        folder: the folder's resolved absolute path; device, inode: the folder's own, when it was registered (or
            resumed): a folder renamed away and replaced by another has other ones.
        recursive, exclude: as ``rag ingest`` takes them; on_delete: :data:`OnDelete`.
        created: Unix seconds of the registration.
        paused: why the watch is paused (nothing is imported or deleted until ``--resume``), ``None`` while active.
        index_error: why the search index could not be brought up to date after the last change (``None`` once a
            later change's refresh succeeds). A refused file's reason is its :attr:`WatchedFile.refused`.
        last_change: Unix seconds of the last change imported or deleted; last_scan: of the last scan.
        deletions: Unix seconds of the cards it deleted in the last ten minutes (the mass-deletion rule).
        files: relative path (``/``-separated) -> :class:`WatchedFile`.
        unlisted: the subfolders (relative paths) the last scan could not list: their files are kept as they were,
            neither updated nor deleted.
    """

    id: str
    vault_id: str
    folder: str
    device: int
    inode: int
    recursive: bool = False
    exclude: list[str] = []
    on_delete: OnDelete = "delete"
    created: float = 0.0
    paused: str | None = None
    index_error: str | None = None
    last_change: float | None = None
    last_scan: float | None = None
    deletions: list[float] = []
    files: dict[str, WatchedFile] = {}
    unlisted: list[str] = []


class Watches:
    """The watched folders' registrations. Blocking (the store's thread).

    Args:
        store: the home's database; keys: the keyring (each registration is sealed under its vault's key).
    """

    def __init__(self, store: Store, keys: Keyring) -> None:
        self._table = WatchTable(store)
        self._keys = keys

    def count(self, vault: VaultRow | None = None) -> int:
        """How many folders are watched (into ``vault`` when given); works while locked."""
        return self._table.count(vault.id if vault is not None else None)

    def of(self, vault: VaultRow) -> list[Watch]:
        """The vault's watches, oldest first.

        Raises:
            MemoriesError: ``vault_locked``; ``integrity_error`` when a registration fails authentication.
        """
        key = self._keys.vault_key(vault)
        watches = []
        for watch_id, sealed in self._table.rows(vault.id):
            try:
                plain = crypto.open_sealed(key, sealed, crypto.watch_aad(vault.id, watch_id))
                watches.append(msgspec.msgpack.decode(plain, type=Watch))
            except (MemoriesError, msgspec.DecodeError):
                raise MemoriesError(
                    "integrity_error",
                    f"vault {vault.name}: the registration of watched folder {watch_id} failed authentication; it "
                    "was changed outside Memories",
                    {"vault": vault.name, "watch": watch_id},
                ) from None
        return watches

    def put(self, vault: VaultRow, watch: Watch) -> None:
        """Store ``watch`` (new or changed), sealed. Raises ``vault_locked``."""
        key = self._keys.vault_key(vault)
        sealed = crypto.seal(key, msgspec.msgpack.encode(watch), crypto.watch_aad(vault.id, watch.id))
        self._table.put(watch.id, vault.id, sealed)

    def remove(self, watch_id: str) -> None:
        """Forget a watch (its cards stay)."""
        self._table.delete(watch_id)

    def missing_cards(self, vault: VaultRow) -> set[str]:
        """The cards of the vault whose file a watch has seen absent (kept: ``--on-delete keep``, a paused watch,
        or not yet confirmed), for ``memory list``."""
        return {
            entry.card
            for watch in self.of(vault)
            for entry in watch.files.values()
            if entry.card is not None and entry.absent_since is not None
        }
