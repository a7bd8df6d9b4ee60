"""What a search embeds and which mode it runs in when none is asked for (R-26).

- *Default mode*: ``hybrid`` when the embedding backend is usable, may see the vault, and the vault is (nearly)
  embedded (at most :data:`ON_DEMAND_DEFAULT` chunks missing, chunks the service refused not counted), else
  ``bm25`` with a warning saying why: a search never embeds a whole vault through a paid API.
- *Before a vector or hybrid query*, the vault's missing inputs are embedded on demand.

Kept apart from :mod:`memories.daemon.retrieval` (which runs the query and its rerankers): this is the part that
changes with how and when vectors are made.
"""

from __future__ import annotations

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.backends import EmbeddingBackend
from memories.daemon.context import RequestContext
from memories.daemon.egress import leaves_device
from memories.daemon.index_feed import IndexFeed
from memories.daemon.indexing import Indexing
from memories.daemon.jobs import VaultJob
from memories.errors import MemoriesError
from memories.vault.store import VaultRow

ON_DEMAND_DEFAULT = 64
"""When no mode is asked for, hybrid is chosen only if at most this many chunks still need embedding on demand;
otherwise the search runs in bm25 mode with a warning to run ``rag index`` (a real model embeds a few chunks per
second on a laptop, R-26)."""


class SearchEmbedding:
    """The embedding step of searches.

    Args:
        backend: the embedding backend; index_feed: the index worker's caches; indexing: on-demand embedding.
    """

    def __init__(self, backend: EmbeddingBackend, index_feed: IndexFeed, indexing: Indexing) -> None:
        self._backend = backend
        self._index_feed = index_feed
        self._indexing = indexing

    async def default_mode(self, job: VaultJob, vault: VaultRow, ctx: RequestContext) -> p.SearchMode:
        """The mode of a search that asked for none (see the module's docstring), with a warning when a model is
        usable but hybrid was not possible.

        Raises:
            MemoriesError: the index worker's failures (the model's own failure to load is a warning, not raised).
        """
        backend = self._backend
        if not await backend.available():
            return "bm25"
        if vault.device_only and leaves_device(backend.egress_url):
            ctx.warn(f"searching with bm25: vault {vault.name} is device-only and [rag.embedding] url is not loopback")
            return "bm25"
        try:
            space = await backend.space()
        except MemoriesError as exc:
            ctx.warnings.append(f"searching with bm25: the embedding model does not load ({exc.message})")
            return "bm25"
        ask = w.IndexMissing(vault=vault.id, epoch=job.epoch, space=space, limit=0)
        missing = await self._index_feed.call(job, vault, ask)
        if missing.total_missing > ON_DEMAND_DEFAULT:
            ctx.warnings.append(
                f"searching with bm25: {missing.total_missing} chunks have no vector yet; run "
                f"`memories rag index {vault.name} --background` for hybrid search"
            )
            return "bm25"
        return "hybrid"

    async def prepare(self, job: VaultJob, vault: VaultRow, space: w.VectorSpace) -> None:
        """Before a vector or hybrid query: embed the vault's missing inputs in ``space`` on demand (R-26).

        Raises:
            MemoriesError: the embedding backend's failures, ``budget_exceeded``.
        """
        await self._indexing.embed_missing(job, vault, space)
