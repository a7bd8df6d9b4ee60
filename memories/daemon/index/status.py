"""``rag status``: what is cached and embedded for a vault, where its vectors are kept and how its index job goes.

It works while locked (then nothing is cached: lock restarts the index worker) and never builds, loads or embeds
anything to answer: the index worker reports its cache as it is (a cache built since unlock whose kept vectors are
not loaded yet says so, and ``missing`` is then unknown).
"""

from __future__ import annotations

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.core.context import Handlers, RequestContext
from memories.daemon.core.jobs import JobManager
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.core.workers import WorkerHandle
from memories.daemon.index.backends import EmbeddingBackend
from memories.daemon.index.feed import IndexFeed
from memories.daemon.index.indexing import Indexing
from memories.daemon.index.kept_vectors import KeptVectors
from memories.limits import MAX_CACHED_VAULTS, IndexLimits


def limits_reported(limits: IndexLimits) -> dict[str, int]:
    """The per-vault limits (``[rag] max_chunks`` …) and R-21's two cached vaults as ``rag status`` reports them."""
    return {
        "chunks": limits.chunks,
        "text_bytes": limits.text_bytes,
        "vector_bytes": limits.vector_bytes,
        "cached_vaults": MAX_CACHED_VAULTS,
    }


class IndexStatus:
    """``rag status`` for the daemon.

    Args:
        store: the store gate; jobs: the job queue (the vault's index job); index_feed: the index worker's caches (a
        vault over its limits); backend: the embedding backend; index: the index worker; kept: the vectors kept
        in the home (where, and rows found damaged); indexing: the background index jobs (one a crash ended).
    """

    def __init__(
        self,
        store: StoreGate,
        jobs: JobManager,
        index_feed: IndexFeed,
        backend: EmbeddingBackend,
        index: WorkerHandle,
        kept: KeptVectors,
        indexing: Indexing,
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._index_feed = index_feed
        self._backend = backend
        self._index = index
        self._kept = kept
        self._indexing = indexing

    def handlers(self) -> Handlers:
        """The requests this module answers."""
        return {p.RagStatus: self.status}

    async def status(self, request: p.RagStatus, ctx: RequestContext) -> p.RagStatusReport:
        """``rag status``. The model's load warnings, a vault over its limits (also as ``over_limit``: the figures
        and the setting to raise) and kept vector rows that failed authentication come along as warnings."""
        vault = await self._store.resolve(request.vault)
        locked = self._store.locked
        records = None if locked else len(await self._store.eligible(vault))
        backend = self._backend
        model = await backend.state()
        ctx.warnings.extend(backend.load_warnings())
        too_large = self._index_feed.too_large(vault)
        if too_large:
            ctx.warnings.append(too_large.message)
        discarded = self._index_feed.snapshots.warning(vault)
        if discarded:
            ctx.warnings.append(discarded)
        damaged = self._kept.damaged(vault)
        if damaged and not locked:
            ctx.warnings.append(
                f"{damaged} sealed vector rows of vault {vault.name} failed authentication or could not be read; "
                "they were skipped, and their chunks are embedded again"
            )
        space = await backend.space() if model.space_key is not None else None
        reply = await self._index.call(w.IndexStatus(vault=vault.id, space=space))
        sealed = self._kept.keep and space is not None and not (reply.cached and reply.loaded)
        return p.RagStatusReport(
            vault=vault.id,
            locked=locked,
            records=records,
            chunks=reply.chunks,
            cache="warm" if reply.cached else "cold",
            text_bytes=reply.text_bytes,
            limits=limits_reported(self._index_feed.over.limits),
            last_build=reply.last_build,
            model=model,
            embedded=None if sealed else reply.embedded,  # the worker counts only what it holds
            missing=reply.missing if reply.cached and reply.loaded else None,
            vector_bytes=reply.vector_bytes,
            failed=reply.failed,
            vectors="sealed in the home" if self._kept.keep else "memory only",
            indexing=self._running(vault.id),
            over_limit=None if too_large is None else p.ErrorInfo(too_large.code, too_large.message, too_large.details),
            background_failure=self._indexing.background_failure(vault.id),
        )

    def _running(self, vault_id: str) -> p.IndexingState | None:
        """The vault's running index job (the first, when several run), as ``rag status`` shows it."""
        for job in self._jobs.active_jobs("index", vault_id):
            if job.state == "running":
                return p.IndexingState(
                    job_id=job.id,
                    background=job.background,
                    done=job.done,
                    total=job.total,
                    rate=job.rate(),
                    seconds_left=job.seconds_left(),
                )
        return None
