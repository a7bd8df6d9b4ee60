"""The index worker's vectors kept sealed in the home (issue 19), between the worker and the store.

Keys stay in the supervisor: it seals what passes through it from the embedding worker to the index worker, and
unseals when a cache is built. Two moments:

- *Load*: a cache built since unlock, a daemon start or an eviction answers the first request that needs a vector
  space with :class:`~memories.worker_protocol.VectorsWanted`; :class:`~memories.daemon.index.feed.IndexFeed` then
  calls :meth:`KeptVectors.load`: the vault's rows of that space are unsealed in the store thread and handed over
  (:class:`~memories.worker_protocol.IndexLoadVectors`), and the request is asked again. Rows that failed
  authentication are counted for ``rag status``; their inputs are simply missing.
- *Seal*: every stored batch names the records whose sets it changed; :meth:`KeptVectors.seal` asks the worker for
  those sets and stores each as its record's row, at most every :data:`SEAL_SECONDS` during a run and at its end
  (a lock cuts a run: at most that much work is embedded again). The store writes a set only for the record's
  current eligible revision, so a delete or an edit that ran meanwhile is never undone.

With ``[rag] keep_vectors = false`` nothing is written or read (every load is empty), and the daemon deletes the
rows at start (:meth:`memories.daemon.supervisor.Daemon.start`).
"""

from __future__ import annotations

import msgspec
import trio

from memories import worker_protocol as w
from memories.daemon.core.jobs import VaultJob
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.core.workers import WorkerHandle
from memories.vault.store import VaultRow
from memories.vault.views import LoadedVectors, RecordVectors

SEAL_SECONDS = 10.0
"""Longest time between two seals during an index run: the most embedding work a lock (which cuts the run and
restarts the index worker) can throw away. A seal costs about one AES-GCM pass and one SQLite write over the
touched records' vectors (3 KiB each at 768 dimensions)."""

_NOTHING = LoadedVectors(None, [], b"", {}, 0, [], [])


class KeptVectors:
    """Load and seal the index worker's vectors.

    Args:
        store: the store gate (it seals and unseals); index: the index worker; keep: ``[rag] keep_vectors``.
    """

    def __init__(self, store: StoreGate, index: WorkerHandle, keep: bool) -> None:
        self._store = store
        self._index = index
        self.keep = keep
        self._damaged: dict[str, int] = {}
        self._pending: dict[str, set[str]] = {}

    @property
    def where(self) -> str:
        """Where vectors are kept, as ``rag status`` says it."""
        return "sealed in the home" if self.keep else "memory only"

    def damaged(self, vault: VaultRow) -> int:
        """Rows of the vault that failed authentication or decoding at its last load (skipped)."""
        return self._damaged.get(vault.id, 0)

    async def load(self, job: VaultJob, vault: VaultRow, space: w.VectorSpace) -> None:
        """Hand the vault's kept vectors of ``space`` to the index worker's cache (an empty set when none are kept).
        The records whose rows are stale or incomplete are sealed again at the end of the next index run.

        Raises:
            MemoriesError: the store's and the worker's failures (``vault_locked``, ``worker_crashed``, ...).
        """
        loaded = await self._store.load_vectors(vault, space.key) if self.keep else _NOTHING
        self._damaged[vault.id] = loaded.damaged
        self._pending[vault.id] = set(loaded.stale) | set(loaded.incomplete)
        body = w.IndexLoadVectors(
            vault=vault.id,
            space=space,
            dimension=loaded.dimension or 0,
            keys=loaded.keys,
            vectors=loaded.vectors,
            failed=loaded.failed,
        )
        await job.call(self._index, body, budget=False, epoch=False)  # IndexStale: the caller asks again

    def pending(self, vault: VaultRow) -> set[str]:
        """The records whose rows the last load found stale or incomplete (to seal at the end of an index run)."""
        return self._pending.pop(vault.id, set())

    async def seal(self, job: VaultJob, vault: VaultRow, space: w.VectorSpace, record_ids: set[str]) -> bool:
        """Seal the current sets of ``record_ids`` as their rows; ``False`` when the worker could not give them (its
        cache of the vault was evicted or rebuilt meanwhile: seal them again later).

        Raises:
            MemoriesError: the store's and the worker's failures.
        """
        if not self.keep or not record_ids:
            return True
        body = w.IndexRecordVectors(vault=vault.id, space=space, records=sorted(record_ids))
        reply = await job.call(self._index, body, budget=False, epoch=False)
        if not isinstance(reply, w.RecordVectors):
            return False
        if reply.dimension is not None:
            sets = [RecordVectors(*msgspec.structs.astuple(record)) for record in reply.records]  # the same fields
            await self._store.put_vectors(vault, space.key, reply.dimension, sets)
        return True


class SealClock:
    """When an index run seals next: at most every :data:`SEAL_SECONDS`, the touched records gathered between."""

    def __init__(self) -> None:
        self.touched: set[str] = set()
        self._last = trio.current_time()

    def due(self) -> bool:
        return bool(self.touched) and trio.current_time() - self._last >= SEAL_SECONDS

    def sealed(self) -> None:
        self.touched.clear()
        self._last = trio.current_time()
