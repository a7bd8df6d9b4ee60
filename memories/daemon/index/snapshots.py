"""The index worker's lexical caches kept as sealed snapshots in the home (issue 28), between the worker and the store.

Keys stay in the supervisor, as for the kept vectors (:mod:`memories.daemon.index.kept_vectors`): the worker hands
its cache out as bytes and takes them back; the store thread seals and unseals (:mod:`memories.vault.snapshots`).
Two moments:

- *Restore*: when :class:`~memories.daemon.index.feed.IndexFeed` finds no cache of a vault (after an unlock, a
  daemon start, an eviction), it first asks :meth:`IndexSnapshots.restore`: the snapshot is unsealed and compared
  with the records in the store thread (every eligible record at its chosen head revision, nothing else), then
  handed to the worker (:class:`~memories.worker_protocol.IndexRestore`), which checks its analysis version. The feed
  then sends the (empty) final batch that stamps the epoch, as after any build. A snapshot that fails any check is
  deleted with one log line and a ``rag status`` warning, and the cache is built from the records; the build writes
  a new one.
- *Write*: rewritten whole, in the background, debounced: a build or a delta that changed the cache schedules a write
  :data:`WRITE_DELAY_SECONDS` after the last such change of the vault; the write asks the worker for its cache at
  that epoch (:class:`~memories.worker_protocol.IndexTakeSnapshot`) and stores it only if the records are still
  exactly those (the store thread checks). Cost per write: the worker's serialization (msgpack of the chunk rows and
  ``sqlite3.serialize()`` of the FTS5 database), one AES-GCM pass and one SQLite row of about 5 times the
  vault's text (tens of MiB at 100,000 chunks); a burst of edits costs one write. What is due is written first, at
  once, by ``daemon stop`` and by a lock (each bounded in time: a write cut short leaves the older snapshot, which
  the next unlock finds stale, discards and rebuilds), and before a vault not cached is loaded, since that load may
  evict the vault whose write is due (the worker keeps two, R-21).

The row of a vault over its limits holds its figures instead (:meth:`IndexSnapshots.keep_over`,
:mod:`memories.daemon.index.over_limit`): its next refusal, after a lock or a restart too, costs no build.

With ``[rag] keep_index = false`` nothing is written or read, and the daemon deletes the kept snapshots at start.
"""

from __future__ import annotations

import logging

import trio

from memories import worker_protocol as w
from memories.daemon.core.context import StartSoon
from memories.daemon.core.jobs import Epochs, VaultJob
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.core.workers import WorkerHandle
from memories.errors import MemoriesError
from memories.limits import IndexLimits, VaultFigures
from memories.vault.store import VaultRow

log = logging.getLogger("memories.snapshots")

WRITE_DELAY_SECONDS = 5.0
"""Quiet time after a vault's last cache change before its snapshot is rewritten: a burst of edits (an ingest, a
watched folder's scan) costs one write."""


class IndexSnapshots:
    """Restore and write the index worker's lexical caches.

    Args:
        store: the store gate (it seals and unseals); index: the index worker; epochs: the vault epochs (a write is
        kept only if its vault did not change meanwhile); keep: ``[rag] keep_index``.

    Attributes:
        restored, built_after_discard, written: counts since the daemon started (for tests and ``daemon status``).
    """

    def __init__(self, store: StoreGate, index: WorkerHandle, epochs: Epochs, keep: bool) -> None:
        self._store = store
        self._index = index
        self._epochs = epochs
        self.keep = keep
        self.start_soon: StartSoon | None = None
        """Where background writes run (the daemon's nursery, set at start; ``None``: nothing is written)."""
        self._discarded: dict[str, str] = {}
        self._due: dict[str, tuple[VaultRow, int, float]] = {}
        self._writing = False
        self.restored = 0
        self.written = 0

    def warning(self, vault: VaultRow) -> str | None:
        """Why the vault's last snapshot was discarded, until a later one is restored (for ``rag status``)."""
        why = self._discarded.get(vault.id)
        if why is None:
            return None
        return f"the index snapshot of vault {vault.name} was discarded ({why}); the index was built from the records"

    async def restore(
        self, job: VaultJob, vault: VaultRow, limits: IndexLimits | None = None
    ) -> dict[str, int] | VaultFigures | None:
        """Give the index worker the vault's cache from its snapshot (within ``limits``); returns the revisions the
        cache holds then (the worker's :class:`~memories.worker_protocol.IndexStale` ``have`` when another job built
        it meanwhile), or ``None`` when there is no usable snapshot (build from the records), or the figures kept
        for a vault found over its limits at these very records (:meth:`keep_over`; nothing reaches the worker).

        Raises:
            MemoriesError: ``vault_too_large`` for a snapshot over ``limits`` (with its figures in the details), the
                store's and the worker's failures (``vault_locked``, ``worker_crashed``, ...).
        """
        if not self.keep:
            return None
        opened = await self._store.load_snapshot(vault)
        if opened is None:
            return None
        if isinstance(opened, str):
            self._discarded[vault.id] = opened
            return None
        if opened.over is not None:
            return opened.over
        restore = w.IndexRestore(vault=vault.id, data=opened.data, limits=limits or IndexLimits())
        reply = await job.call(self._index, restore, epoch=False)
        if isinstance(reply, w.IndexStale):
            return reply.have
        if reply.have is None:
            why = reply.problem or "the index worker refused it"
            await self._store.delete_snapshot(vault)
            log.warning("vault %s: its index snapshot was discarded (%s); building from the records", vault.id, why)
            self._discarded[vault.id] = why
            return None
        self.restored += 1
        self._discarded.pop(vault.id, None)
        return reply.have

    async def sealed_over(self, vault: VaultRow) -> VaultFigures | None:
        """The figures sealed for the vault (:meth:`keep_over`) if they match its records now; ``None`` otherwise
        (no row, a snapshot of a cache, or figures of older records, which are deleted).

        Raises:
            MemoriesError: the store's failures (``vault_locked``, ...).
        """
        if not self.keep:
            return None
        opened = await self._store.load_snapshot(vault)
        if isinstance(opened, str):
            self._discarded[vault.id] = opened
            return None
        return None if opened is None else opened.over

    async def keep_over(self, vault: VaultRow, have: dict[str, int], figures: VaultFigures) -> None:
        """Keep the figures of a vault found over its limits, sealed in place of its snapshot, for the records
        ``have`` (nothing is written when they are no longer the vault's). Never raises: they are a cache."""
        self._due.pop(vault.id, None)
        if not self.keep or self._store.locked:
            return
        try:
            await self._store.put_snapshot(vault, have, b"", figures)
        except MemoriesError as exc:
            log.info("vault %s: its figures over the limits were not kept: %s", vault.id, exc.code)

    def changed(self, vault: VaultRow, epoch: int) -> None:
        """The vault's cache changed and is now at ``epoch``: write its snapshot after :data:`WRITE_DELAY_SECONDS`
        of quiet (in the background)."""
        if not self.keep or self.start_soon is None:
            return
        self._due[vault.id] = (vault, epoch, trio.current_time() + WRITE_DELAY_SECONDS)
        if not self._writing:
            self._writing = True
            self.start_soon(self._write_due)

    async def flush(self) -> None:
        """Write every snapshot that is due now, without waiting for the quiet time (``daemon stop``, a lock, and
        before a cold vault is loaded). Never raises; a flush that is cancelled part way leaves the rest unwritten."""
        due, self._due = self._due, {}
        for vault, epoch, _ in due.values():
            await self._write(vault, epoch)

    async def _write_due(self) -> None:
        try:
            while self._due:
                vault_id, (vault, epoch, at) = min(self._due.items(), key=lambda item: item[1][2])
                now = trio.current_time()
                if at > now:
                    await trio.sleep(at - now)
                    continue
                if self._due.get(vault_id) == (vault, epoch, at):
                    del self._due[vault_id]
                    await self._write(vault, epoch)
        finally:
            self._writing = False

    async def _write(self, vault: VaultRow, epoch: int) -> None:
        """Take the vault's cache at ``epoch`` and store it sealed; skipped when the cache or the vault moved on
        (a later change schedules another write). Never raises: a snapshot is a cache."""
        if self._store.locked or self._epochs.get(vault.id) != epoch:
            return
        try:
            reply = await self._index.call(w.IndexTakeSnapshot(vault=vault.id, epoch=epoch))
            if isinstance(reply, w.IndexStale):
                return
            if reply.problem is not None:
                log.info("vault %s: no index snapshot is kept: %s", vault.id, reply.problem)
                return
            if await self._store.put_snapshot(vault, reply.have, reply.data):
                if self._epochs.get(vault.id) != epoch:  # changed while it was sealed: it may hold an old sibling
                    await self._store.delete_snapshot(vault)
                    return
                self.written += 1
        except MemoriesError as exc:
            log.info("vault %s: the index snapshot was not written: %s", vault.id, exc.code)
        except Exception as exc:  # the daemon must keep serving
            log.error("vault %s: the index snapshot was not written: %s", vault.id, type(exc).__name__)
