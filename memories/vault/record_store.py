"""The record store of one home: its parts built once over one SQLite file, and its unlock and lock."""

from __future__ import annotations

from pathlib import Path

from memories.errors import MemoriesError
from memories.vault.cards import Cards
from memories.vault.catalog import Catalog
from memories.vault.exchange import Exchange
from memories.vault.heads import Heads
from memories.vault.keys import Keyring
from memories.vault.records import Records
from memories.vault.snapshots import Snapshots
from memories.vault.store import FORMAT, Store
from memories.vault.upgrade import upgrade
from memories.vault.vaults import Vaults
from memories.vault.vectors import VectorRows
from memories.vault.watches import Watches


class RecordStore:
    """The encrypted record store at ``path`` (created if missing): every part is a public attribute, each with one
    reason to change. Blocking: the daemon runs every call in its store thread, one at a time.

    ::

        store     Store      SQLite: one statement per method, no keys
        keys      Keyring    master and vault keys while unlocked
        heads     Heads      each vault's sealed head set, the revision graph
        catalog   Catalog    decrypted headers while unlocked, eligibility (R-01, R-02), damaged records
        vaults    Vaults     create, adopt, rename, policy, delete, resolve
        records   Records    create, read, update, delete, move
        cards     Cards      ingested files' cards (a card is its file)
        exchange  Exchange   what sync exports and imports
        vectors   VectorRows each record's embedding vectors, sealed
        snapshots Snapshots  each vault's index snapshot, sealed
        watches   Watches    watched folders' sealed registrations and state
    """

    def __init__(self, path: Path) -> None:
        self.store = Store(path)
        self.keys = Keyring(self.store)
        self.heads = Heads(self.store)
        self.catalog = Catalog(self.store, self.keys, self.heads)
        self.vaults = Vaults(self.store, self.keys, self.heads, self.catalog)
        self.records = Records(self.store, self.keys, self.heads, self.catalog)
        self.cards = Cards(self.records, self.catalog, self.keys)
        self.watches = Watches(self.store, self.keys)
        self.exchange = Exchange(self.store, self.keys, self.heads, self.catalog)
        self.vectors = VectorRows(self.store, self.keys, self.catalog)
        self.snapshots = Snapshots(self.store, self.keys, self.catalog)

    def unlock(self, passphrase: str) -> Path | None:
        """Unlock the keyring and, the first time a store of an earlier release is unlocked, upgrade it (a backup
        first, then one transaction; :func:`memories.vault.upgrade.upgrade`). Returns the backup's path after an
        upgrade, else ``None``.

        Raises:
            MemoriesError: ``home_too_new`` (a store of a later format: nothing is derived or changed); what
                :meth:`Keyring.unlock` raises (nothing changes); after a failed upgrade the home stays locked and
                unchanged.
        """
        if self.store.too_new:
            raise MemoriesError(
                "home_too_new",
                f"this home was written by a newer release of Memories (store format {self.store.format}; this "
                f"release reads formats up to {FORMAT}): upgrade Memories to open it",
                {"format": self.store.format, "supported": FORMAT},
            )
        self.keys.unlock(passphrase)
        if self.store.format == FORMAT:
            return None
        try:
            backup = self.store.backup()
            upgrade(self.store, self.keys)
        except BaseException:
            self.keys.lock()
            raise
        return backup

    def verify_passphrase(self, passphrase: str) -> None:
        """Prove ``passphrase`` against the stored master key without changing what is unlocked (an unlock of a
        home that is unlocked already). Raises what :meth:`Keyring.unlock` raises."""
        Keyring(self.store).unlock(passphrase)

    def lock(self) -> None:
        """Drop every key, decrypted header, head set and what is known of damaged records."""
        self.keys.lock()
        self.heads.forget()
        self.catalog.forget()

    def close(self) -> None:
        """Close the database (daemon shutdown)."""
        self.store.close()
