"""What the daemon does by itself after an unlock or a model install (issue 19), in the background: warm the caches
of the (at most two) vaults searched most recently, so the first search rarely pays the build, and keep embedded
every vault whose kept vectors miss inputs (new records, edits, a vault never indexed, another model since the last
run, a model installed just now).

The vaults searched most recently are remembered across lock and restart, sealed under the master key
(:meth:`memories.vault.vaults.Vaults.remember_search`). Nothing runs with ``[rag] auto_index = "off"``.
"""

from __future__ import annotations

import logging

from memories.daemon.core.store_gate import StoreGate
from memories.daemon.index.backends import EmbeddingBackend
from memories.daemon.index.indexing import Indexing
from memories.errors import MemoriesError
from memories.vault.store import VaultRow

log = logging.getLogger("memories.indexing")


class RecentVaults:
    """The vaults searched most recently, remembered sealed in the home (read once per unlock).

    Args:
        store: the store gate.
    """

    def __init__(self, store: StoreGate) -> None:
        self._store = store
        self._order: list[str] | None = None

    async def searched(self, vault: VaultRow) -> None:
        """A search of ``vault`` ran: it becomes the most recent (written only when the order changes). Raises what
        the store raises (``vault_locked``)."""
        if self._order is None:
            self._order = await self._store.recent_vaults()
        if self._order[:1] != [vault.id]:
            self._order = await self._store.remember_search(vault)

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
        raises: a lock meanwhile (or a home still locked) ends it, and anything else is logged."""
        if self._auto == "off":
            return
        try:
            vaults = {vault.id: vault for vault in await self._store.vaults()}
            recent = [vaults[vault_id] for vault_id in await self._store.recent_vaults() if vault_id in vaults]
            for vault in recent:
                await self._indexing.start_reindex(vault, refresh=True)
            others = [vault for vault in vaults.values() if vault not in recent]
            for vault in others:
                if await self._incomplete(vault):
                    await self._indexing.start_reindex(vault)
        except MemoriesError as exc:
            log.info("the background work after an unlock or install stopped: %s", exc.code)
        except Exception as exc:  # the daemon must keep serving
            log.error("the background work after an unlock or install failed: %s", type(exc).__name__)

    async def _incomplete(self, vault: VaultRow) -> bool:
        """Whether the daemon embeds the vault by itself and its kept vectors (of the current space) miss inputs,
        judged from the sealed rows alone: no cache is built for it."""
        if not await self._indexing.embeds_by_itself(vault):
            return False
        space = await self._backend.space()
        loaded = await self._store.load_vectors(vault, space.key)
        return bool(loaded.incomplete)
