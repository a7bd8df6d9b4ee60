"""Search, status and indexing jobs: the supervisor's half of the retrieval pipeline.

The index worker keeps one cache per vault, stamped with the vault's epoch. Every query names the epoch its job
started from; a cache at another epoch answers :class:`~memories.protocol.IndexStale` with the record revisions
it holds, and the supervisor sends only the difference (records added or revised, records deleted or no longer
eligible), decrypted in batches — the supervisor alone decides eligibility (R-01, R-02), so private records,
credentials and files never reach a worker. Then the query runs again.

Embedding (R-26, R-27) goes batch by batch: the index worker names the model inputs that have no vector in the
current vector space, the embedding worker embeds them, the index worker stores them. Vectors are keyed by the
hash of the exact model input, so finished batches survive a budget stop, a cancel, a crash of the embedding
worker and an edit elsewhere in the vault; a retry embeds only what is still missing.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

import trio

from memories import protocol as p
from memories.daemon.jobs import Job, StaleEpoch
from memories.daemon.server import Connection
from memories.errors import MemoriesError
from memories.limits import MAX_QUERY_BYTES, MAX_RESULTS
from memories.store import VaultRow

if TYPE_CHECKING:
    from memories.daemon.supervisor import Daemon

log = logging.getLogger("memories.retrieval")

SYNC_BATCH = 64
"""Records per sync step: a budget check between steps, and frames far below the worker frame limit."""

ON_DEMAND_DEFAULT = 64
"""When no mode is asked for, hybrid is chosen only if at most this many chunks still need embedding on demand;
otherwise the search runs in bm25 mode with a warning to run ``rag index`` (a real model embeds a few chunks per
second on a laptop, R-26)."""

MEMORY_SEARCH_CHUNKS_PER_RECORD = 3
LIMITS = {"chunks": 10_000, "text_bytes": 16 * 1024 * 1024, "vector_bytes": 32 * 1024 * 1024, "cached_vaults": 2}


class Retrieval:
    """Search, memory search, status and index for the daemon."""

    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon
        self._sync_locks: dict[str, trio.Lock] = {}
        self._too_large: dict[str, str] = {}  # vault id -> why its last sync failed with vault_too_large

    @property
    def _index(self):  # type: ignore[no-untyped-def]
        return self._daemon.workers["index"]

    # -- requests ------------------------------------------------------------------------------------------

    async def search(self, request: p.RagSearch, conn: Connection) -> p.SearchReport:
        """``rag search``: chunks in rank order with labels S1..Sn (R-07, R-10)."""
        _check_query(request.query, request.limit)
        daemon = self._daemon
        vault = await daemon.resolve_unlocked(request.vault)
        job = daemon.jobs.new_job("search", vault.id)
        conn.attach(job)

        async def work(job: Job) -> p.SearchReport:
            mode = request.mode
            if mode is None:
                mode = await self._default_mode(job, vault, conn)
            space_key, vector = None, None
            if mode != "bm25":
                space_key = await daemon.models.space_key()
                await self.embed_missing(job, vault, space_key)
                vector = await daemon.models.embed_query(job, request.query)
            query = p.IndexQuery(
                vault=vault.id,
                epoch=job.epoch or 0,
                query=request.query,
                mode=mode,
                match_mode=request.match_mode,
                limit=request.limit,
                cards_only=request.cards_only,
                no_rerank=request.no_rerank,
                highlight=request.highlight,
                space_key=space_key,
                query_vector=vector,
            )
            reply = await self.synced_call(job, vault, query)
            assert isinstance(reply, p.IndexHits)
            return p.SearchReport(
                mode=mode, match_mode=request.match_mode, results=await self._eligible(vault, reply.hits)
            )

        return await daemon.jobs.run(job, work)

    async def memory_search(self, request: p.MemorySearch, conn: Connection) -> p.MemorySearchReport:
        """``memory search``: lexical (BM25), grouped by record, best record first (R-06, R-11)."""
        _check_query(request.query, request.limit)
        daemon = self._daemon
        vault = await daemon.resolve_unlocked(request.vault)
        job = daemon.jobs.new_job("search", vault.id)
        conn.attach(job)

        async def work(job: Job) -> p.MemorySearchReport:
            query = p.IndexQuery(
                vault=vault.id,
                epoch=job.epoch or 0,
                query=request.query,
                mode="bm25",
                match_mode="any",
                limit=min(request.limit * MEMORY_SEARCH_CHUNKS_PER_RECORD * 4, 1000),
                cards_only=False,
                no_rerank=True,
            )
            reply = await self.synced_call(job, vault, query)
            assert isinstance(reply, p.IndexHits)
            return p.MemorySearchReport(results=_group(await self._eligible(vault, reply.hits), request.limit))

        return await daemon.jobs.run(job, work)

    async def status(self, request: p.RagStatus, conn: Connection) -> p.RagStatusReport:
        """``rag status``: works while locked (then nothing is cached, since lock restarts the index worker).

        The model's load warnings (such as ``local_threads`` above the machine's cores) come along.
        """
        daemon = self._daemon
        vault = await daemon.resolve(request.vault)
        locked = daemon.keyring.locked
        records = None if locked else len(await daemon.db(daemon.vaults.eligible, vault))
        model = await daemon.models.state()
        conn.warnings.extend(daemon.models.load_warnings())
        if vault.id in self._too_large:
            conn.warnings.append(f"searches fail until records are removed: {self._too_large[vault.id]}")
        reply = await self._index.call(p.IndexStatus(vault=vault.id, space_key=model.space_key))
        assert isinstance(reply, p.IndexState)
        return p.RagStatusReport(
            vault=vault.id,
            locked=locked,
            records=records,
            chunks=reply.chunks,
            cache="warm" if reply.cached else "cold",
            text_bytes=reply.text_bytes,
            limits=LIMITS,
            last_build=reply.last_build,
            model=model,
            embedded=reply.embedded,
            missing=reply.missing,
            vector_bytes=reply.vector_bytes,
        )

    async def index(self, request: p.RagIndex, conn: Connection) -> p.IndexReport | p.JobStarted:
        """``rag index``: embed every missing chunk; ``--background`` keeps going in budgeted rounds."""
        daemon = self._daemon
        vault = await daemon.resolve_unlocked(request.vault)
        space_key = await daemon.models.space_key()
        conn.warnings.extend(daemon.models.load_warnings())
        job = daemon.jobs.new_job("index", vault.id)

        async def work(job: Job) -> p.IndexReport:
            return await self.embed_missing(job, vault, space_key)

        if not request.background:
            conn.attach(job)
            return await daemon.jobs.run(job, work)

        async def rounds(job: Job) -> p.IndexReport:
            while True:
                try:
                    report = await work(job)
                except MemoriesError as exc:
                    if exc.code != "budget_exceeded":
                        raise
                    log.info("background index job %s: round over budget; starting another", job.id)
                    job.start_round()
                    continue
                if report.missing == 0:
                    return report

        daemon.spawn(_run_quietly, daemon, job, rounds)
        return p.JobStarted(job_id=job.id)

    # -- steps ---------------------------------------------------------------------------------------------

    async def embed_missing(self, job: Job, vault: VaultRow, space_key: str) -> p.IndexReport:
        """Embed every chunk of ``vault`` without a vector in ``space_key``, one batch per step.

        Raises:
            MemoriesError: ``budget_exceeded`` (details: ``embedded_now``, ``reused``, ``missing``) and the
                failures of the workers.
        """
        daemon = self._daemon
        cut_after = daemon.hooks.cut_after_batches if daemon.hooks else None
        ask = p.IndexMissing(
            vault=vault.id, epoch=job.epoch or 0, space_key=space_key, limit=daemon.config.rag.embed_batch_size
        )
        counts = {"embedded_now": 0, "reused": 0, "missing": 0}
        batches = 0
        try:
            while True:
                missing = await self.synced_call(job, vault, ask)
                assert isinstance(missing, p.MissingInputs)
                if batches == 0:
                    counts["reused"] = missing.embedded
                counts["missing"] = missing.total_missing
                done = counts["reused"] + counts["embedded_now"]
                job.progress(done, done + missing.total_missing, "chunks")
                if not missing.keys:
                    return p.IndexReport(**counts)
                if cut_after is not None and batches >= cut_after:
                    raise MemoriesError("budget_exceeded", "cut by the cut_after_batches test hook")
                job.check_budget()
                vectors = await daemon.models.embed_documents(job, missing.inputs)
                store = p.IndexStoreVectors(
                    vault=vault.id,
                    space_key=space_key,
                    keys=missing.keys,
                    vectors=vectors.vectors,
                    dimension=vectors.dimension,
                )
                await job.call(self._index, store, budget=False, epoch=False)
                counts["embedded_now"] += len(missing.keys)
                counts["missing"] -= len(missing.keys)
                batches += 1
        except MemoriesError as exc:
            if exc.code == "budget_exceeded":
                raise _over_budget(job, counts) from None
            raise

    async def refresh(self, job: Job, vault: VaultRow) -> None:
        """Bring the vault's cache up to date now (after an ingest), so the next search is fast and a vault over
        the R-21 limits is reported at once. The job adopts the vault's current epoch first (its own writes);
        a change by someone else meanwhile is left to the next search.

        Raises:
            MemoriesError: ``vault_too_large``, ``budget_exceeded`` and the index worker's failures.
        """
        job.adopt_current_epoch()
        with contextlib.suppress(StaleEpoch):
            await self.synced_call(job, vault, p.IndexStatus(vault=vault.id, epoch=job.epoch))

    async def synced_call(
        self, job: Job, vault: VaultRow, body: p.IndexQuery | p.IndexMissing | p.IndexStatus
    ) -> p.WorkerReplyBody:
        """Ask the index worker; when its cache is stale, bring it to the job's epoch and ask again."""
        for _ in range(3):
            reply = await job.call(self._index, body)
            if not isinstance(reply, p.IndexStale):
                return reply
            await self._sync(job, vault, reply.have)
        raise MemoriesError("vault_changed", "the index kept falling behind the vault; try again")

    async def _sync(self, job: Job, vault: VaultRow, have: dict[str, int] | None) -> None:
        daemon = self._daemon
        lock = self._sync_locks.setdefault(vault.id, trio.Lock())
        async with lock:
            eligible = await daemon.db(daemon.vaults.eligible, vault)
            held = have or {}
            deletes = [record_id for record_id in held if record_id not in eligible]
            changed = [record_id for record_id, revision in eligible.items() if held.get(record_id) != revision]
            batches = [changed[i : i + SYNC_BATCH] for i in range(0, len(changed), SYNC_BATCH)] or [[]]
            self._index.holds_plaintext = True
            for number, batch in enumerate(batches):
                upserts = await daemon.db(daemon.vaults.index_records, vault, batch)
                sync = p.IndexSync(
                    vault=vault.id,
                    epoch=job.epoch or 0,
                    upserts=upserts,
                    deletes=deletes if number == 0 else [],
                    final=number == len(batches) - 1,
                    fresh=have is None and number == 0,
                )
                try:
                    reply = await job.call(self._index, sync)
                except MemoriesError as exc:
                    if exc.code == "vault_too_large":
                        self._too_large[vault.id] = exc.message
                    raise
                if isinstance(reply, p.IndexStale):
                    return  # the cache was evicted mid-sync; the caller asks again and starts over
            self._too_large.pop(vault.id, None)

    async def _default_mode(self, job: Job, vault: VaultRow, conn: Connection) -> p.SearchMode:
        """Hybrid when an embedding backend is available and the vault is (nearly) embedded, else bm25."""
        models = self._daemon.models
        if not models.installed():
            return "bm25"
        try:
            space_key = await models.space_key()
        except MemoriesError as exc:
            conn.warnings.append(f"searching with bm25: the embedding model does not load ({exc.message})")
            return "bm25"
        ask = p.IndexMissing(vault=vault.id, epoch=job.epoch or 0, space_key=space_key, limit=0)
        missing = await self.synced_call(job, vault, ask)
        assert isinstance(missing, p.MissingInputs)
        if missing.total_missing > ON_DEMAND_DEFAULT:
            conn.warnings.append(
                f"searching with bm25: {missing.total_missing} chunks have no vector yet; run "
                f"`memories rag index {vault.name} --background` for hybrid search"
            )
            return "bm25"
        return "hybrid"

    async def _eligible(self, vault: VaultRow, hits: list[p.SearchHit]) -> list[p.SearchHit]:
        """Defence in depth: keep only hits of records that are eligible at that revision right now."""
        eligible = await self._daemon.db(self._daemon.vaults.eligible, vault)
        kept = [hit for hit in hits if eligible.get(hit.asset_id) == hit.revision]
        for number, hit in enumerate(kept, 1):
            hit.label = f"S{number}"
        return kept


def _check_query(query: str, limit: int) -> None:
    if limit > MAX_RESULTS:
        raise MemoriesError(
            "limit_too_large", f"at most {MAX_RESULTS} results can be requested, not {limit}", {"max": MAX_RESULTS}
        )
    if limit < 1:
        raise MemoriesError("invalid_argument", "--limit must be at least 1")
    size = len(query.encode("utf-8", "surrogatepass"))
    if size > MAX_QUERY_BYTES:
        raise MemoriesError(
            "query_too_long",
            f"the query has {size} bytes; at most {MAX_QUERY_BYTES} are accepted",
            {"bytes": size, "max": MAX_QUERY_BYTES},
        )


def _group(hits: list[p.SearchHit], limit: int) -> list[p.RecordHit]:
    records: dict[str, p.RecordHit] = {}
    for hit in hits:
        record = records.get(hit.asset_id)
        if record is None:
            if len(records) == limit:
                continue
            record = records[hit.asset_id] = p.RecordHit(
                id=hit.asset_id, revision=hit.revision, title=hit.title, score=hit.score, chunks=[]
            )
        if len(record.chunks) < MEMORY_SEARCH_CHUNKS_PER_RECORD:
            record.chunks.append(p.ChunkHit(label="", byte_start=hit.byte_start, byte_end=hit.byte_end, text=hit.text))
    labelled = list(records.values())
    number = 0
    for record in labelled:
        for chunk in record.chunks:
            number += 1
            chunk.label = f"S{number}"
    return labelled


def _over_budget(job: Job, counts: dict[str, int]) -> MemoriesError:
    return MemoriesError(
        "budget_exceeded",
        f"stopped at the budget of {job.budget:g} s with {counts['reused'] + counts['embedded_now']} chunks "
        f"embedded and {counts['missing']} missing; run it again to continue (finished batches are kept)",
        counts,
    )


async def _run_quietly(daemon: Daemon, job: Job, work) -> None:  # type: ignore[no-untyped-def]
    """Run a background job; its outcome is visible in ``memories jobs``, not raised into the daemon."""
    try:
        await daemon.jobs.run(job, work)
    except MemoriesError as exc:
        log.info("background job %s ended: %s", job.id, exc.code)
