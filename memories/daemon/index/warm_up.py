"""What the daemon does by itself after an unlock or a model install (issue 19), in the background: warm the caches
of the (at most two) vaults searched most recently, so the first search rarely pays the build, and keep embedded
every vault whose kept vectors miss inputs (new records, edits, a vault never indexed, another model since the last
run, a model installed just now).

The vaults searched most recently are remembered across lock and restart, sealed under the master key
(:meth:`memories.vault.vaults.Vaults.remember_search`). With ``[rag] auto_index = "off"`` only the recent vaults'
caches are warmed (from their sealed snapshots when they match, :mod:`memories.daemon.index.snapshots`): ``auto_index``
governs embedding only (issue 28).
"""

from __future__ import annotations

import logging
import sqlite3

from memories.daemon.core.store_gate import StoreGate
from memories.daemon.index.backends import EmbeddingBackend
from memories.daemon.index.indexing import Indexing
from memories.errors import MemoriesError
from memories.logs import log_failure
from memories.vault.store import VaultRow
from memories.vault.vaults import RECENT

log = logging.getLogger("memories.indexing")


class RecentVaults:
    """The vaults searched most recently, remembered sealed in the home (read once per unlock).

    Args:
        store: the store gate.
    """

    def __init__(self, store: StoreGate) -> None:
        self._store = store
        self._order: list[str] | None = None
        self._refusal_logged = False

    async def searched(self, vault: VaultRow) -> None:
        """A search of ``vault`` ran: it becomes the most recent (written only when the order changes).

        Best effort (issue 29, item 2: a search never needs a write): when the home refuses the write (a full disk,
        a read-only home, a database another process holds for writing), the order is kept in memory only and the
        first such refusal is logged, once per daemon; the search goes on.

        Raises:
            MemoriesError: ``vault_locked`` (what reading the order raises).
        """
        if self._order is None:
            self._order = await self._store.recent_vaults()
        if self._order[:1] == [vault.id]:
            return
        try:
            self._order = await self._store.remember_search(vault)
        except MemoriesError as exc:
            if exc.code not in ("disk_full", "home_read_only"):
                raise
            self._not_remembered(vault, exc.code)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:  # "database is locked": another process writes
                raise
            self._not_remembered(vault, "database is locked")

    def _not_remembered(self, vault: VaultRow, why: str) -> None:
        assert self._order is not None
        self._order = [vault.id, *(other for other in self._order if other != vault.id)][:RECENT]
        if not self._refusal_logged:
            self._refusal_logged = True
            log.warning("the vaults searched most recently are not remembered: the home refused a write (%s)", why)

    def forget(self) -> None:
        """Lock: the order is read again, sealed, after the next unlock."""
        self._order = None


class WarmUp:
    """The background work an unlock starts.

    Args:
        store: the store gate; indexing: starts the background index jobs; backend: the embedding backend (its
        vector space); auto_index: ``[rag] auto_index``.
    """

    def __init__(self, store: StoreGate, indexing: Indexing, backend: EmbeddingBackend, auto_index: str) -> None:
        self._store = store
        self._indexing = indexing
        self._backend = backend
        self._auto = auto_index

    async def catch_up(self) -> None:
        """Start the background jobs of an unlock or a model install (a task in the daemon's nursery): the recent
        vaults first, then every other vault the daemon embeds by itself whose kept vectors miss inputs. Never
        raises: a lock meanwhile (or a home still locked) ends it, and anything else is logged. With ``auto_index =
        "off"`` the recent vaults' caches are warmed all the same (nothing is embedded)."""
        try:
            vaults = {vault.id: vault for vault in await self._store.vaults()}
            recent = [vaults[vault_id] for vault_id in await self._store.recent_vaults() if vault_id in vaults]
            for vault in recent:
                await self._indexing.start_reindex(vault, refresh=True)
            if self._auto == "off":
                return
            others = [vault for vault in vaults.values() if vault not in recent]
            for vault in others:
                if await self._incomplete(vault):
                    await self._indexing.start_reindex(vault)
        except MemoriesError as exc:
            log.info("the background work after an unlock or install stopped: %s", exc.code)
        except Exception as exc:  # the daemon must keep serving
            log_failure(log, "the background work after an unlock or install failed", exc)

    async def _incomplete(self, vault: VaultRow) -> bool:
        """Whether the daemon embeds the vault by itself and its kept vectors (of the current space) miss inputs,
        judged from the sealed rows alone: no cache is built for it."""
        if not await self._indexing.embeds_by_itself(vault):
            return False
        space = await self._backend.space()
        loaded = await self._store.load_vectors(vault, space.key)
        return bool(loaded.incomplete)
