"""``rag bench``: search quality on a person's own questions (nDCG@10, Recall@10, MRR@10 per mode).

The client reads the fixture (one JSON question a line) and sends the questions with their line numbers; here:

1. **Names.** Each relevant entry names the cached, searchable records it is the id, ``source`` path or title of
   (:meth:`memories.rag.vault_index.VaultIndex.named`, in one job that first brings the index up to date). An
   entry that names none, or a title or path that names several, is ``invalid_fixture`` naming its line.
2. **Vectors.** Vector and hybrid modes need every chunk embedded (chunks the service refused aside), or the
   figures would measure on-demand embedding within a budget: ``vectors_missing`` with the count otherwise.
3. **Searches.** Each question in each mode is one search, as ``rag search --limit 100`` runs it, as its own job
   with its own budget (:meth:`memories.daemon.search.retrieval.Retrieval.searched`), reporting ``searches`` done as
   progress. The learned reranker runs only when asked (it costs money).
4. **Scores** over the ranked list of distinct records (each record at its best chunk), each relevant record
   gaining 1 (:mod:`memories.rag.metrics`); a question whose top 10 holds no relevant record is *missed*.
"""

from __future__ import annotations

import statistics

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.core.context import Handlers, RequestContext
from memories.daemon.core.egress import leaves_device
from memories.daemon.core.jobs import JobManager, VaultJob
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.index.backends import EmbeddingBackend
from memories.daemon.index.feed import IndexFeed
from memories.daemon.search.retrieval import Retrieval
from memories.daemon.search.spec import SearchSpec
from memories.errors import MemoriesError
from memories.limits import MAX_RESULTS
from memories.rag.metrics import mrr_at, ndcg_at, recall_at
from memories.vault.store import VaultRow

ALL_MODES: tuple[p.SearchMode, ...] = ("bm25", "vector", "hybrid")


class Bench:
    """``rag bench`` for the daemon.

    Args:
        store: the store gate; jobs: the job queue; index_feed: the index worker's caches; backend: the embedding
        backend; retrieval: the search path each question runs through.
    """

    def __init__(
        self,
        store: StoreGate,
        jobs: JobManager,
        index_feed: IndexFeed,
        backend: EmbeddingBackend,
        retrieval: Retrieval,
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._index_feed = index_feed
        self._backend = backend
        self._retrieval = retrieval

    def handlers(self) -> Handlers:
        """The requests this module answers."""
        return {p.RagBench: self.bench}

    async def bench(self, request: p.RagBench, ctx: RequestContext) -> p.BenchReport:
        """Score every mode over the fixture's questions (module docstring).

        Raises:
            MemoriesError: ``invalid_argument`` (no question), ``invalid_fixture``, ``vectors_missing``, and what a
                search raises (``model_not_installed``, ``device_only_vault``, ``budget_exceeded``, ...).
        """
        if not request.questions:
            raise MemoriesError("invalid_fixture", "the fixture holds no question", {"line": None})
        vault = await self._store.resolve_unlocked(request.vault)
        modes = list(dict.fromkeys(request.modes)) or await self._default_modes(vault, ctx)
        job = self._jobs.new_job("bench", vault.id, vault.name, epoch_checked=False)
        ctx.attach(job)
        relevant = await self._jobs.run(job, lambda job: self._prepare(job, vault, request, modes))
        total = len(request.questions) * len(modes)
        figures: dict[str, p.BenchFigures] = {}
        for position, mode in enumerate(modes):
            ndcg, recall, mrr, missed = [], [], [], []
            for number, question in enumerate(request.questions):
                search = SearchSpec(query=question.query, mode=mode, limit=MAX_RESULTS)
                done = position * len(request.questions) + number
                found = await self._retrieval.searched(
                    vault, search, ctx, learned=request.rerank, progress=(done, total, "searches")
                )
                ranked = list(dict.fromkeys(hit.asset_id for hit in found.hits))
                gains = dict.fromkeys(relevant[number], 1)
                ndcg.append(ndcg_at(ranked, gains))
                recall.append(recall_at(ranked, gains))
                mrr.append(mrr_at(ranked, gains))
                if mrr[-1] == 0:
                    missed.append(question.query)
            figures[mode] = p.BenchFigures(
                ndcg=statistics.fmean(ndcg), recall=statistics.fmean(recall), mrr=statistics.fmean(mrr), missed=missed
            )
        return p.BenchReport(modes=figures, questions=len(request.questions), learned_rerank=request.rerank)

    async def _default_modes(self, vault: VaultRow, ctx: RequestContext) -> list[p.SearchMode]:
        """Every mode when the embedding backend is usable for this vault, else bm25 with a warning."""
        backend = self._backend
        if not await backend.available():
            ctx.warn("benchmarking bm25 only: no embedding model is installed or configured")
            return ["bm25"]
        if vault.device_only and leaves_device(backend.egress_url):
            ctx.warn(
                f"benchmarking bm25 only: vault {vault.name} is device-only and [rag.embedding] url is not loopback"
            )
            return ["bm25"]
        return list(ALL_MODES)

    async def _prepare(
        self, job: VaultJob, vault: VaultRow, request: p.RagBench, modes: list[p.SearchMode]
    ) -> list[set[str]]:
        """Each question's relevant record ids; refuses a fixture entry naming no record or several, and vector
        modes while chunks lack a vector."""
        names = list(dict.fromkeys(name for question in request.questions for name in question.relevant))
        reply = await self._index_feed.call(job, vault, w.IndexResolve(vault=vault.id, epoch=job.epoch, names=names))
        named = dict(zip(names, reply.records, strict=True))
        relevant = []
        for question in request.questions:
            for name in question.relevant:
                found = named[name]
                if not found:
                    raise MemoriesError(
                        "invalid_fixture",
                        f"line {question.line}: {name!r} names no searchable record of vault {vault.name} "
                        "(give a record id, a title or a source path)",
                        {"line": question.line, "entry": name},
                    )
                if len(found) > 1:
                    raise MemoriesError(
                        "invalid_fixture",
                        f"line {question.line}: {name!r} names {len(found)} records of vault {vault.name}; name one "
                        f"by its id ({', '.join(found[:5])}{', ...' if len(found) > 5 else ''})",
                        {"line": question.line, "entry": name, "records": found},
                    )
            relevant.append({named[name][0] for name in question.relevant})
        if any(mode != "bm25" for mode in modes):
            space = await self._backend.space()
            missing = await self._index_feed.call(
                job, vault, w.IndexMissing(vault=vault.id, epoch=job.epoch, space=space, limit=0)
            )
            if missing.total_missing:
                raise MemoriesError(
                    "vectors_missing",
                    f"{missing.total_missing:,} chunks of vault {vault.name} have no vector yet; run `memories rag "
                    f"index {vault.name}` first, or bench with --modes bm25",
                    {"vault": vault.name, "missing": missing.total_missing},
                )
        return relevant
