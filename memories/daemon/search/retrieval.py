"""Search requests: the supervisor's half of the retrieval pipeline (R-06 … R-14); ``rag status`` is
:mod:`memories.daemon.index.status`.

A search is a job: it brings the vault's cache up to date (:mod:`memories.daemon.index.feed`), embeds what vector
and hybrid modes need and picks the default mode (:mod:`memories.daemon.search.embedding`), runs the query in the
index worker, keeps only hits of records that are eligible at that revision right now, reorders them with the
learned reranker when ``[rag.rerank]`` is configured (R-36), and labels them ``S1..Sn`` in rank order. ``rag ask``
(:mod:`memories.daemon.search.ask`) retrieves the same way, keeping only evidence chunks.

Device-only vaults (R-41): an explicit vector or hybrid search, and the learned reranker, are refused before any
request when their endpoint is not loopback; the default mode falls back to bm25 (and skips such a reranker) with a
warning.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import RagConfig, RerankConfig
from memories.daemon.core.context import Handlers, RequestContext
from memories.daemon.core.egress import check_current_policy, leaves_device, refuse_device_only
from memories.daemon.core.jobs import JobManager, VaultJob
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.core.workers import WorkerHandle
from memories.daemon.index.backends import EmbeddingBackend, request_budget
from memories.daemon.index.feed import IndexFeed
from memories.daemon.search.embedding import SearchEmbedding
from memories.daemon.search.spec import SearchSpec
from memories.vault.store import VaultRow

MEMORY_SEARCH_CHUNKS_PER_RECORD = 3
"""Chunks shown under each record of ``memory search``."""

RERANK_CANDIDATES = 30
"""Chunks sent to the learned reranker (at least the requested limit): the fused ranking's head, where a better
order matters; a deeper list costs the service more for little change at the top."""


WEAK_MATCHES = (
    "weak matches: no result holds the query's words or is close to it in meaning (none would count as "
    "evidence for rag ask); the notes may hold nothing about this"
)
"""The warning of a search whose results are weak matches (:func:`memories.rag.answers.weak_matches`)."""


@dataclass
class Retrieved:
    """What one retrieval found: the mode used, the hits in rank order (unlabelled), with ``explain`` each hit's
    explanation (the learned reranker's score filled in when it ran) and the worker's whole explanation, and
    whether the hits are weak matches (:class:`memories.protocol.SearchReport`)."""

    mode: p.SearchMode
    hits: list[w.WorkerHit]
    chunks: list[p.ExplainedChunk] | None = None
    explanation: w.Explanation | None = None
    weak_matches: bool = False


class Retrieval:
    """``rag search``, ``memory search`` and ``rag explain`` for the daemon.

    Args:
        store: the store gate; jobs: the job queue; index_feed: the index worker's caches; backend: the embedding
        backend; embedding: a search's embedding step and default mode; index: the index worker; remote: the remote
        worker (the learned reranker); rag: the ``[rag]`` settings (``rerank``, ``http``); default_budget: seconds a
        remote request of a job without a budget may take.
    """

    def __init__(
        self,
        store: StoreGate,
        jobs: JobManager,
        index_feed: IndexFeed,
        backend: EmbeddingBackend,
        embedding: SearchEmbedding,
        index: WorkerHandle,
        remote: WorkerHandle,
        rag: RagConfig,
        default_budget: float,
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._index_feed = index_feed
        self._backend = backend
        self._embedding = embedding
        self._index = index
        self._remote = remote
        self._rag = rag
        self._default_budget = default_budget

    def handlers(self) -> Handlers:
        """The requests this module answers."""
        return {p.MemorySearch: self.memory_search, p.RagSearch: self.search, p.RagExplain: self.explain}

    async def search(self, request: p.RagSearch, ctx: RequestContext) -> p.SearchReport:
        """``rag search``: :meth:`report` of the request's search.

        Raises:
            MemoriesError: ``limit_too_large`` and a malformed filter's ``invalid_argument`` (before any work), and
                what :meth:`report` raises.
        """
        spec = SearchSpec.of(request)
        return await self.report(await self._store.resolve_unlocked(request.vault), spec, ctx)

    async def report(self, vault: VaultRow, spec: SearchSpec, ctx: RequestContext) -> p.SearchReport:
        """Chunks in rank order with labels S1..Sn (R-07, R-10), and whether they are weak matches (a warning too).

        Raises:
            MemoriesError: ``query_too_long``, ``too_many_terms``, ``vault_too_large``, ``model_not_installed``,
                ``model_invalid``, ``budget_exceeded`` and the workers' failures.
        """
        found = await self.searched(vault, spec, ctx)
        if found.weak_matches:
            ctx.warn(WEAK_MATCHES)
        return p.SearchReport(
            mode=found.mode,
            match_mode=spec.match_mode,
            results=_labelled(found.hits),
            weak_matches=found.weak_matches,
        )

    async def explain(self, request: p.RagExplain, ctx: RequestContext) -> p.ExplainReport:
        """``rag explain``: the search ``rag search`` would run, with each result's trace through every stage and
        the named chunk's (:mod:`memories.rag.explain`). It embeds no chunk, only the query, and calls the learned
        reranker only with ``rerank``.

        Raises:
            MemoriesError: what :meth:`search` raises, and for ``chunk`` ``record_not_found`` or ``invalid_argument``.
        """
        search = SearchSpec.of(request)  # a malformed filter fails before any work
        vault = await self._store.resolve_unlocked(request.vault)
        job = self._jobs.new_job("explain", vault.id, vault.name, epoch_checked=True)
        ctx.attach(job)

        async def work(job: VaultJob) -> p.ExplainReport:
            retrieved = await self._retrieve(
                job, vault, ctx, search, learned=request.rerank, explain=w.Explain(chunk=request.chunk)
            )
            mode, chunks, found = retrieved.mode, retrieved.chunks, retrieved.explanation
            assert chunks is not None and found is not None
            for rank, chunk in enumerate(chunks, start=1):
                chunk.rank, chunk.label = rank, f"S{rank}"
            named = found.chunk
            if named is not None:  # its final rank: after the eligibility check and the learned reranker
                place = {(chunk.asset_id, chunk.byte_start): chunk for chunk in chunks}
                unplaced = msgspec.structs.replace(named, rank=None, label=None)
                named = place.get((named.asset_id, named.byte_start), unplaced)
            return p.ExplainReport(
                mode=mode,
                match_mode=request.match_mode,
                query=found.query,
                results=chunks,
                chunk=named,
                missing_vectors=found.missing_vectors if mode != "bm25" else 0,
                notes=_explain_notes(mode, request.no_rerank, request.rerank, found.missing_vectors, self._rag.rerank),
                weak_matches=retrieved.weak_matches,
            )

        return await self._jobs.run(job, work)

    async def searched(
        self,
        vault: VaultRow,
        spec: SearchSpec,
        ctx: RequestContext,
        *,
        learned: bool = True,
        progress: tuple[int, int, str] | None = None,
    ) -> Retrieved:
        """One search as its own job (its own budget, attached to the client): what :meth:`retrieve` finds, and
        whether it is weak matches. ``learned=False`` skips the learned reranker; ``progress`` (done, total, unit)
        is reported as the job's.
        """
        job = self._jobs.new_job("search", vault.id, vault.name, epoch_checked=True)
        ctx.attach(job)
        if progress is not None:
            job.progress(*progress)
        return await self._jobs.run(job, lambda job: self._retrieve(job, vault, ctx, spec, learned=learned))

    async def retrieve(
        self,
        job: VaultJob,
        vault: VaultRow,
        ctx: RequestContext,
        spec: SearchSpec,
        *,
        evidence: bool = False,
        learned: bool = True,
    ) -> tuple[p.SearchMode, list[w.WorkerHit]]:
        """The mode used and the hits of ``request`` in rank order (unlabelled); with ``evidence``, only chunks that
        are evidence for ``rag ask`` (:func:`memories.rag.answers.is_evidence`); ``learned=False`` skips the
        learned reranker ``[rag.rerank]`` (``rag bench`` without ``--rerank``).

        Raises:
            MemoriesError: ``device_only_vault`` (before any request leaves), the search's limits, the embedding
                backend's and the reranker's failures.
        """
        found = await self._retrieve(job, vault, ctx, spec, evidence=evidence, learned=learned)
        return found.mode, found.hits

    async def _retrieve(
        self,
        job: VaultJob,
        vault: VaultRow,
        ctx: RequestContext,
        spec: SearchSpec,
        *,
        evidence: bool = False,
        learned: bool = True,
        explain: w.Explain | None = None,
    ) -> Retrieved:
        """:meth:`retrieve`, with the explanations when ``explain`` asks (it embeds no chunk) and the worker's
        ``weak_matches``: judged on the hits it returned, so with the learned reranker on the
        :data:`RERANK_CANDIDATES` handed to it rather than the ``limit`` it keeps."""
        self._index_feed.over.check(job, vault)  # a vault found over its limits: refused before any other step
        backend = self._backend
        mode = spec.mode
        if mode is None:
            mode = await self._embedding.default_mode(job, vault, ctx)
        elif mode != "bm25":
            refuse_device_only(vault, backend.egress_url, "rag.embedding")
        rerank = None if spec.no_rerank or not learned else self._rag.rerank
        if rerank is not None and vault.device_only and leaves_device(rerank.url):
            if spec.mode is None:
                ctx.warn(f"not reranking: vault {vault.name} is device-only and [rag.rerank] is not loopback")
                rerank = None
            else:
                refuse_device_only(vault, rerank.url, "rag.rerank")
        space, vector = None, None
        if mode != "bm25":
            # Check the query before the costly steps: a query over the limits, or one that finds nothing.
            checked = await job.call(self._index, w.IndexCheckQuery(query=spec.query))
            if checked.terms == 0 and explain is None:
                return Retrieved(mode, [])
            if checked.terms:
                space = await backend.space()
                if explain is None:
                    await self._embedding.prepare(job, vault, space, ctx)
                await check_current_policy(self._store, vault, backend.egress_url, "rag.embedding")
                vector = await backend.embed_query(job, spec.query)
        query = w.IndexQuery(
            vault=vault.id,
            epoch=job.epoch,
            query=spec.query,
            mode=mode,
            match_mode=spec.match_mode,
            limit=max(spec.limit, RERANK_CANDIDATES) if rerank is not None else spec.limit,
            cards_only=spec.cards_only,
            no_rerank=spec.no_rerank,
            highlight=spec.highlight,
            space=space,
            query_vector=vector,
            evidence=w.Evidence(backend.min_similarity if mode != "bm25" else None) if evidence else None,
            explain=explain,
            filter=spec.filter,
            min_similarity=backend.min_similarity if mode != "bm25" else None,
        )
        reply = await self._query(job, vault, query, ctx)
        hits, explanation = reply.hits, reply.explanation
        explained = None if explanation is None else dict(zip(map(id, hits), explanation.results, strict=True))
        if rerank is not None and len(hits) > 1:
            await check_current_policy(self._store, vault, rerank.url, "rag.rerank")
            budget = request_budget(job, self._default_budget)
            ranked = await _learned_rerank(job, self._remote, self._rag, rerank, spec.query, hits, spec.limit, budget)
            if explained is not None:
                for hit in ranked[: spec.limit]:
                    explained[id(hit)].learned = hit.score
            hits = ranked
        hits = hits[: spec.limit]
        chunks = None if explained is None else [explained[id(hit)] for hit in hits]
        return Retrieved(mode, hits, chunks, explanation, reply.weak_matches)

    async def memory_search(self, request: p.MemorySearch, ctx: RequestContext) -> p.MemorySearchReport:
        """``memory search``: :meth:`record_search` of the request (its limit and filters checked first)."""
        spec = SearchSpec.of(request)
        return await self.record_search(await self._store.resolve_unlocked(request.vault), spec, ctx)

    async def record_search(self, vault: VaultRow, spec: SearchSpec, ctx: RequestContext) -> p.MemorySearchReport:
        """Lexical (BM25, match mode ``any``), grouped by record, best record first (R-06, R-11): at most
        ``spec.limit`` records. Chunks are fetched ``limit`` × 12 at a time, deeper until ``limit`` records are
        found or no more match.

        Raises:
            MemoriesError: ``query_too_long``, ``too_many_terms``, ``vault_too_large``, ``budget_exceeded`` and the
                index worker's failures.
        """
        job = self._jobs.new_job("search", vault.id, vault.name, epoch_checked=True)
        ctx.attach(job)

        async def work(job: VaultJob) -> p.MemorySearchReport:
            depth = spec.limit * MEMORY_SEARCH_CHUNKS_PER_RECORD * 4
            while True:
                query = w.IndexQuery(
                    vault=vault.id,
                    epoch=job.epoch,
                    query=spec.query,
                    mode="bm25",
                    match_mode="any",
                    limit=depth,
                    cards_only=False,
                    no_rerank=True,
                    filter=spec.filter,
                )
                hits = (await self._query(job, vault, query, ctx)).hits
                records = _group(hits, spec.limit)
                if len(records) == spec.limit or len(hits) < depth or depth >= self._index_feed.over.limits.chunks:
                    return p.MemorySearchReport(results=records)
                depth *= 4

        return await self._jobs.run(job, work)

    async def _query(self, job: VaultJob, vault: VaultRow, query: w.IndexQuery, ctx: RequestContext) -> w.IndexHits:
        """Run one query at the job's epoch in the index worker (cache synced first); keep hits of eligible records,
        and their explanations when asked. Damaged records (failed authentication) are left out, with a warning
        naming each."""
        reply = await self._index_feed.call(job, vault, msgspec.structs.replace(query, epoch=job.epoch))
        await self._embedding.searched(vault)  # its cache is warmed at the next unlock
        if self._jobs.active_jobs("ingest", vault.id):
            ctx.warn(f"an ingest into {vault.name} is in progress: these results are from the notes stored so far")
        # Defence in depth: the worker only ever held eligible records, but check against the catalog right now.
        eligible = await self._store.eligible(vault)
        damaged = await self._store.damaged(vault)
        for record_id, revision in sorted(damaged.items()):
            warning = (
                f"record {record_id} revision {revision} failed authentication and is left out of the results "
                f"(`memory delete {vault.name} {record_id}` removes it)"
            )
            ctx.warn(warning)
        kept = [eligible.get(hit.asset_id) == hit.revision for hit in reply.hits]
        explanation = reply.explanation
        if explanation is not None:
            explanation.results = [chunk for chunk, keep in zip(explanation.results, kept, strict=True) if keep]
        hits = [hit for hit, keep in zip(reply.hits, kept, strict=True) if keep]
        return w.IndexHits(hits=hits, explanation=explanation, weak_matches=reply.weak_matches and bool(hits))


async def _learned_rerank(
    job: VaultJob,
    remote: WorkerHandle,
    rag: RagConfig,
    config: RerankConfig,
    query: str,
    hits: list[w.WorkerHit],
    limit: int,
    budget: float,
) -> list[w.WorkerHit]:
    """``hits`` in the learned reranker's order (the remote worker, ``budget`` seconds): ranked chunks by its score
    (their ``score`` becomes the service's ``relevance_score``), then the others in fused order with their fused
    score. The service ranks the best ``limit`` of them."""
    body = w.Rerank(
        service=config,
        http=rag.http,
        query=query,
        documents=[hit.text or hit.title for hit in hits],
        top_n=min(limit, len(hits)),
        budget_seconds=budget,
    )
    remote.handed_vault_text()
    reply = await job.call(remote, body)
    ordered = []
    for index, score in reply.order:
        hit = hits[index]
        if score is not None:
            hit.score = score
        ordered.append(hit)
    return ordered


def _explain_notes(
    mode: p.SearchMode, no_rerank: bool, learned: bool, missing: int, rerank: RerankConfig | None
) -> list[str]:
    """What ``rag explain`` did not run, and why (``no_rerank``, ``learned``: its ``--no-rerank`` and ``--rerank``;
    ``missing``: chunks without a vector; ``rerank``: the learned reranker configured, if any)."""
    notes = []
    if mode == "bm25":
        notes.append("bm25 mode: no vector ranking, fusion or reranker")
    elif no_rerank:
        notes.append("--no-rerank: neither the lightweight nor the learned reranker ran")
    if mode != "bm25" and missing:
        notes.append(
            f"{missing} chunks have no vector and are not in the vector ranking; `rag index` embeds them "
            "(explain never does, a search embeds up to 64 first)"
        )
    if rerank is not None and not no_rerank and not learned:
        notes.append("stopped before the learned reranker [rag.rerank]: --rerank calls it (it costs money)")
    return notes


def _labelled(hits: list[w.WorkerHit]) -> list[p.SearchHit]:
    """The worker's hits as citations, labelled S1..Sn in rank order."""
    return [p.SearchHit(label=f"S{number}", **msgspec.structs.asdict(hit)) for number, hit in enumerate(hits, 1)]


def _group(hits: list[w.WorkerHit], limit: int) -> list[p.RecordHit]:
    """Chunk hits grouped by record in rank order: at most ``limit`` records, each with its best chunks."""
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
    number = 0
    for record in records.values():
        for chunk in record.chunks:
            number += 1
            chunk.label = f"S{number}"
    return list(records.values())
