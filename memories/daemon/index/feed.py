"""Keeping the index worker's cache of a vault at the state a job started from (R-19, R-44): the index feed (named
so since issue 18: "sync" is the sync folder's, :mod:`memories.sync`; the worker's own message keeps its name,
:class:`~memories.worker_protocol.IndexSync`).

The index worker keeps one cache per vault, stamped with the vault's epoch. Every query names the epoch its job
started from; a cache at another epoch answers :class:`~memories.worker_protocol.IndexStale` with the record revisions
it holds, and :class:`IndexFeed` sends only the difference (records added or revised, records deleted or no
longer eligible), decrypted in batches of :data:`SYNC_BATCH` records — the supervisor alone decides eligibility
(R-01, R-02), so private records, credentials and files never reach a worker. The final batch carries every
eligible id and revision: the worker drops anything else and stamps the epoch only when it holds exactly those,
so a delta computed from an outdated view (another job synced meanwhile, the cache was evicted) can never leave
an ineligible record behind. Then the query runs again. A cache built since unlock, a restart or an eviction also
answers :class:`~memories.worker_protocol.VectorsWanted` for a vector space until the vectors kept in the home are
handed to it (:class:`memories.daemon.index.kept_vectors.KeptVectors`).
"""

from __future__ import annotations

import contextlib
from typing import TypeVar

import trio

from memories import worker_protocol as w
from memories.daemon.core.jobs import StaleEpoch, VaultJob
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.core.views import index_record
from memories.daemon.core.workers import WorkerHandle
from memories.daemon.index.kept_vectors import KeptVectors
from memories.daemon.index.over_limit import OverLimits, figures_of
from memories.daemon.index.snapshots import IndexSnapshots
from memories.errors import MemoriesError
from memories.limits import IndexLimits, VaultFigures
from memories.vault.store import VaultRow

R = TypeVar("R")

SYNC_BATCH = 64
"""Records per sync step: a budget check between steps, and frames far below the worker frame limit."""

SYNC_ATTEMPTS = 3
"""Times a query may find the cache stale before the job gives up with ``vault_changed``."""


class IndexFeed:
    """Calls to the index worker that first bring its cache of the vault to the job's epoch.

    Args:
        store: the store gate (eligibility and decrypted records come from it).
        index: the index worker.
        kept: the vectors kept in the home (loaded into a cache that asks for them).
        snapshots: the sealed index snapshots (a cold cache starts from one; a changed cache schedules a write).
        limits: the per-vault limits (``[rag] max_chunks`` …); a vault over them is refused at once once measured
            (:attr:`over`, :mod:`memories.daemon.index.over_limit`).
    """

    def __init__(
        self,
        store: StoreGate,
        index: WorkerHandle,
        kept: KeptVectors,
        snapshots: IndexSnapshots,
        limits: IndexLimits | None = None,
    ) -> None:
        self._store = store
        self._index = index
        self._kept = kept
        self.snapshots = snapshots
        self.over = OverLimits(limits or IndexLimits())
        self._locks: dict[str, trio.Lock] = {}
        self._resend: dict[str, set[str]] = {}

    def resend(self, vault: VaultRow, record_ids: list[str]) -> None:
        """Send these records again at the next sync even when the cache holds their depth: a pull can make a
        sibling of the same depth the chosen head of a record in conflict, and the cache knows records by depth."""
        self._resend.setdefault(vault.id, set()).update(record_ids)

    def too_large(self, vault: VaultRow) -> MemoriesError | None:
        """The vault's ``vault_too_large`` when its last sync found it over its limits (for ``rag status``)."""
        return self.over.last(vault)

    async def call(
        self, job: VaultJob, vault: VaultRow, body: w.WorkerRequest[R | w.IndexStale | w.VectorsWanted]
    ) -> R:
        """Ask the index worker; when its cache is stale, bring it to the job's epoch and ask again; when it wants
        the kept vectors of the request's space, load them and ask again.

        Raises:
            MemoriesError: ``vault_changed`` after :data:`SYNC_ATTEMPTS` stale answers, ``vault_too_large`` (at
                once, asking the worker nothing, when the vault was found over its limits at the job's epoch), and
                the worker's failures; StaleEpoch: the vault changed during the job.
        """
        self.over.check(job, vault)
        if self.over.last(vault) is not None:
            await self._still_over(job, vault)
        for _ in range(SYNC_ATTEMPTS * 2):  # each stale answer may be followed by a load
            reply = await job.call(self._index, body)
            if isinstance(reply, w.VectorsWanted):
                space = getattr(body, "space", None)
                if not isinstance(space, w.VectorSpace):
                    raise MemoriesError("protocol_error", f"{type(body).__name__} names no vector space")
                await self._kept.load(job, vault, space)
            elif isinstance(reply, w.IndexStale):
                await self._sync(job, vault, reply.have)
            else:
                return reply
        raise MemoriesError("vault_changed", "the index kept falling behind the vault; try again")

    async def refresh(self, job: VaultJob, vault: VaultRow) -> None:
        """Bring the cache up to date now (after an ingest), so the next search is fast and a vault over its limits
        is reported at once (with its figures, kept for the searches that follow). The job adopts the vault's
        current epoch first (its own writes); a change by someone else meanwhile is left to the next search.

        Raises:
            MemoriesError: ``vault_too_large``, ``budget_exceeded``, ``vault_changed`` and the worker's failures.
        """
        job.adopt_current_epoch()
        with contextlib.suppress(StaleEpoch):
            await self.call(job, vault, w.IndexAtEpoch(vault=vault.id, epoch=job.epoch))

    async def _sync(self, job: VaultJob, vault: VaultRow, have: dict[str, int] | None) -> None:
        async with self._locks.setdefault(vault.id, trio.Lock()):
            self.over.check(job, vault)  # another job found it over its limits meanwhile
            if have is None:  # a cold cache: from the vault's sealed snapshot when one matches the records
                await self.snapshots.flush()  # loading it may evict a vault whose snapshot is due: write that first
                have = await self._restore(job, vault)
            eligible = await self._store.eligible(vault)
            held = have or {}
            resend = set(self._resend.get(vault.id, ()))
            deletes = [record_id for record_id in held if record_id not in eligible]
            changed = [rid for rid, revision in eligible.items() if held.get(rid) != revision or rid in resend]
            batches = [changed[i : i + SYNC_BATCH] for i in range(0, len(changed), SYNC_BATCH)] or [[]]
            for number, batch in enumerate(batches):
                final = number == len(batches) - 1
                upserts = [index_record(text) for text in await self._store.index_texts(vault, batch)]
                expected = {}
                if final:  # without the records found damaged while decrypting (they are left out, R-44 holds)
                    damaged = await self._store.damaged(vault)
                    expected = {rid: rev for rid, rev in eligible.items() if damaged.get(rid) != rev}
                sync = w.IndexSync(
                    vault=vault.id,
                    epoch=job.epoch,
                    upserts=upserts,
                    deletes=deletes if number == 0 else [],
                    final=final,
                    fresh=have is None and number == 0,
                    expected=expected,
                    limits=self.over.limits,
                )
                try:
                    reply = await job.call(self._index, sync)
                except MemoriesError as exc:
                    if exc.code != "vault_too_large":
                        raise
                    # A fresh build's batches hold every record once: count the rest; a delta's: count them all.
                    if have is None:
                        counted, rest = figures_of(exc.details), batches[number + 1 :]
                    else:
                        ids = list(eligible)
                        counted = VaultFigures(0, 0)
                        rest = [ids[i : i + SYNC_BATCH] for i in range(0, len(ids), SYNC_BATCH)]
                    figures = await self._measure(job, vault, counted, rest)
                    raise await self._refuse(job, vault, eligible, figures) from None
                if isinstance(reply, w.IndexStale):
                    return  # the cache was evicted or rebuilt meanwhile: the caller asks again and starts over
            if have is None or changed or deletes:
                self.snapshots.changed(vault, job.epoch)
            self.over.within(vault)
            self._resend.get(vault.id, set()).difference_update(resend)

    async def _still_over(self, job: VaultJob, vault: VaultRow) -> None:
        """A vault found over its limits at an earlier epoch (before a lock, an edit): refuse it without the index
        worker (restarted by a lock, it would first load its analyser) when its sealed figures still match the
        records and are still over the limits."""
        async with self._locks.setdefault(vault.id, trio.Lock()):
            self.over.check(job, vault)
            figures = await self.snapshots.sealed_over(vault)
            if figures is not None and self.over.limits.over(figures):
                raise self.over.refuse(vault, job.epoch, figures)

    async def _restore(self, job: VaultJob, vault: VaultRow) -> dict[str, int] | None:
        """:meth:`IndexSnapshots.restore`, refusing a vault whose snapshot is over the limits: sealed figures still
        over them (no build), or a snapshot of a cache over limits lowered since (its figures are the records')."""
        try:
            restored = await self.snapshots.restore(job, vault, self.over.limits)
        except MemoriesError as exc:
            if exc.code != "vault_too_large":
                raise
            eligible = await self._store.eligible(vault)
            raise await self._refuse(job, vault, eligible, figures_of(exc.details)) from None
        if isinstance(restored, VaultFigures):
            if self.over.limits.over(restored):
                raise self.over.refuse(vault, job.epoch, restored)
            return None  # the limits were raised since: build from the records
        return restored

    async def _measure(
        self, job: VaultJob, vault: VaultRow, counted: VaultFigures, rest: list[list[str]]
    ) -> VaultFigures:
        """``counted`` plus what the records of ``rest`` (batches of ids) add up to, counted by the index worker
        without analysing or caching them."""
        chunks, text_bytes = counted.chunks, counted.text_bytes
        for batch in rest:
            upserts = [index_record(text) for text in await self._store.index_texts(vault, batch)]
            reply = await job.call(self._index, w.IndexMeasure(vault=vault.id, upserts=upserts))
            chunks += reply.figures.chunks
            text_bytes += reply.figures.text_bytes
        return VaultFigures(chunks, text_bytes)

    async def _refuse(
        self, job: VaultJob, vault: VaultRow, eligible: dict[str, int], figures: VaultFigures
    ) -> MemoriesError:
        """Keep the figures of a vault found over its limits (in memory at the job's epoch, sealed in the home for
        ``eligible``, the records they count); the error to raise."""
        self.over.measured += 1
        error = self.over.refuse(vault, job.epoch, figures)
        await self.snapshots.keep_over(vault, eligible, figures)
        return error
