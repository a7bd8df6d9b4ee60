"""Vaults: create, adopt (sync join), rename, set the device-only policy, delete, list and resolve by id or name.

Each vault has a random data key, wrapped under the master key with its id, device-only policy and name bound into
the associated data (R-41, :meth:`memories.vault.keys.Keyring.vault_key`), and a sealed head set made with it.
"""

from __future__ import annotations

import sqlite3
import time
import unicodedata

import msgspec

from memories import crypto
from memories.errors import MemoriesError
from memories.vault.catalog import Catalog
from memories.vault.heads import Heads, HeadSet, is_live, seal_heads
from memories.vault.keys import Keyring
from memories.vault.rules import check_name, new_id
from memories.vault.store import Store, VaultRow

RECENT = 2
"""Vaults remembered as searched most recently: as many as the index worker caches (R-21), warmed at unlock."""

_RECENT = "recent_vaults"


class Vaults:
    """Vault rows over the store. Blocking (the store's thread).

    Args:
        store: the home's database; keys: the keyring; heads: the vaults' head sets; catalog: the decrypted headers
        (a deleted vault's are dropped).
    """

    def __init__(self, store: Store, keys: Keyring, heads: Heads, catalog: Catalog) -> None:
        self._store = store
        self._keys = keys
        self._heads = heads
        self._catalog = catalog

    def resolve(self, ref: str) -> VaultRow:
        """The vault whose id or unique name is ``ref``.

        Raises:
            MemoriesError: ``vault_not_found``; ``ambiguous_vault`` when ``ref`` is one vault's id and another's
                name (``create`` prevents this, so only a store written otherwise can hold such a pair).
        """
        ref = unicodedata.normalize("NFC", ref)
        matches = [v for v in self._store.vaults() if ref in (v.id, v.name)]
        if not matches:
            raise MemoriesError("vault_not_found", f"no vault has the id or name {ref!r}")
        if len(matches) > 1:
            raise MemoriesError("ambiguous_vault", f"{ref!r} names more than one vault; use the id")
        return matches[0]

    def create(self, name: str, device_only: bool) -> VaultRow:
        """Raises ``invalid_vault_name``, ``vault_name_taken``, ``vault_locked``. Names are kept in Unicode NFC, so
        two names that look the same are the same name."""
        name = check_name(name)
        existing = self._store.vaults()
        if any(name == vault.id for vault in existing):
            raise MemoriesError("vault_name_taken", f"{name!r} is the id of another vault; choose another name")
        vault_id = new_id()
        while any(vault_id in (vault.id, vault.name) for vault in existing):
            vault_id = new_id()
        key = crypto.new_key()
        row = VaultRow(
            vault_id, name, device_only, time.time(), self._keys.wrap_vault_key(vault_id, key, device_only, name)
        )
        try:
            self._store.insert_vault(row, seal_heads(key, vault_id, HeadSet(0, {})))
        except sqlite3.IntegrityError:
            raise MemoriesError("vault_name_taken", f"a vault named {name!r} already exists") from None
        return row

    def adopt(self, vault_id: str, name: str, key: bytes) -> VaultRow:
        """Add a vault that another device made, with its id and data key (``sync join``); no device ever makes a
        second key for a vault. Synced vaults are never device-only.

        Raises:
            MemoriesError: ``invalid_vault_name``, ``vault_name_taken`` (give another name), ``vault_locked``.
        """
        name = check_name(name)
        if any(name == vault.id for vault in self._store.vaults()):
            raise MemoriesError("vault_name_taken", f"{name!r} is the id of another vault; choose another name")
        row = VaultRow(vault_id, name, False, time.time(), self._keys.wrap_vault_key(vault_id, key, False, name))
        try:
            self._store.insert_vault(row, seal_heads(key, vault_id, HeadSet(0, {})))
        except sqlite3.IntegrityError:
            raise MemoriesError("vault_name_taken", f"a vault named {name!r} exists here; join with --name") from None
        return row

    def rename(self, vault: VaultRow, name: str) -> VaultRow:
        """Give a vault another name (its id, keys and records stay).

        Raises:
            MemoriesError: ``invalid_vault_name``, ``vault_name_taken``, ``vault_locked``.
        """
        name = check_name(name)
        if any(name == other.id for other in self._store.vaults() if other.id != vault.id):
            raise MemoriesError("vault_name_taken", f"{name!r} is the id of another vault; choose another name")
        renamed = vault._replace(
            name=name,
            wrapped_key=self._keys.wrap_vault_key(vault.id, self._keys.vault_key(vault), vault.device_only, name),
        )
        try:
            self._store.update_vault(renamed)
        except sqlite3.IntegrityError:
            raise MemoriesError("vault_name_taken", f"a vault named {name!r} already exists") from None
        return renamed

    def delete(self, vault: VaultRow) -> int:
        """Delete a vault with its key and every record and revision; returns how many records it held. Raises
        ``vault_locked``."""
        self._keys.master()
        count = self._store.count_records(vault.id)
        self._store.delete_vault(vault.id)
        self._store.checkpoint()
        self._keys.forget_vault(vault.id)
        self._catalog.forget(vault.id)
        self._heads.forget(vault.id)
        return count

    def recent(self) -> list[str]:
        """The ids of the vaults searched most recently, most recent first (at most :data:`RECENT`), as sealed
        under the master key by :meth:`remember_search` (``[]`` when none were, or the setting does not open).
        Raises ``vault_locked``."""
        sealed = self._store.get_setting(_RECENT)
        if sealed is None:
            return []
        try:
            opened = crypto.open_sealed(self._keys.master(), sealed, crypto.setting_aad(_RECENT))
            return msgspec.msgpack.decode(opened, type=list[str])[:RECENT]
        except (MemoriesError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            if isinstance(exc, MemoriesError) and exc.code == "vault_locked":
                raise
            return []

    def remember_search(self, vault_id: str) -> list[str]:
        """Put ``vault_id`` first among the vaults searched most recently (sealed under the master key: which
        vaults a person searches is theirs to know); returns the new order. Raises ``vault_locked``."""
        order = [vault_id, *(other for other in self.recent() if other != vault_id)][:RECENT]
        sealed = crypto.seal(self._keys.master(), msgspec.msgpack.encode(order), crypto.setting_aad(_RECENT))
        self._store.put_settings({_RECENT: sealed})
        return order

    def all(self) -> list[VaultRow]:
        """Every vault, oldest first (named ``all``: a method ``list`` would shadow the builtin in this class's
        annotations)."""
        return self._store.vaults()

    def count_records(self, vault: VaultRow) -> int:
        """Live records of the vault (raises ``vault_locked``, ``integrity_error``)."""
        return sum(is_live(heads) for heads in self._heads.of(vault, self._keys.vault_key(vault)).records.values())

    def set_policy(self, vault: VaultRow, device_only: bool) -> VaultRow:
        """Set the device-only policy, sealed with the vault key (R-41); raises ``vault_locked``,
        ``integrity_error``."""
        wrapped = self._keys.wrap_vault_key(vault.id, self._keys.vault_key(vault), device_only, vault.name)
        changed = vault._replace(device_only=device_only, wrapped_key=wrapped)
        self._store.update_vault(changed)
        return changed
