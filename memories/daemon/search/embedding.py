"""What a search embeds and which mode it runs in when none is asked for (R-26, issue 19).

- *Default mode*: ``hybrid`` when the embedding backend is usable, may see the vault, and the vault is (nearly)
  embedded (at most :data:`ON_DEMAND_DEFAULT` chunks missing, embedded on demand; none while its background index
  job runs); else ``bm25``, with a warning saying why. A search never embeds a whole vault through a paid API. While
  the job runs the default stays bm25, not hybrid over the embedded part: measured with the real model
  (``ops/bench/partial.py``, ``docs/search-quality.md``, nDCG@10), hybrid over a part fell far below bm25 where
  queries share the notes' words (``cmrc-sent-zh``: 0.41 against 0.872 at half embedded, 0.783 at nine tenths),
  though it gained where they do not (``tatoeba-cmn-eng``: 0.493 against 0.009); an explicit ``--mode hybrid``
  still searches the embedded part.
- *While a background index job runs*, a vector or hybrid search does not embed the missing inputs itself (the job
  does): it searches what is embedded and says how much that is. This departs from R-26 ("vector and hybrid
  retrieval also embed missing chunks on demand") for that case only: the job is already embedding them, and a
  search that did too would wait behind minutes of batches.
"""

from __future__ import annotations

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.core.context import RequestContext
from memories.daemon.core.egress import leaves_device
from memories.daemon.core.jobs import Job, VaultJob
from memories.daemon.index.backends import EmbeddingBackend
from memories.daemon.index.feed import IndexFeed
from memories.daemon.index.indexing import Indexing
from memories.daemon.index.warm_up import RecentVaults
from memories.durations import about
from memories.errors import MemoriesError
from memories.vault.store import VaultRow

ON_DEMAND_DEFAULT = 64
"""When no mode is asked for and no background index job runs, hybrid is chosen only if at most this many chunks
still need embedding on demand; otherwise bm25 with a warning to run ``rag index`` (a real model embeds a few
chunks per second on a laptop, R-26)."""


class SearchEmbedding:
    """The embedding step of searches.

    Args:
        backend: the embedding backend; index_feed: the index worker's caches; indexing: on-demand embedding and the
        vaults' background index jobs; recent: the vaults searched most recently (warmed at unlock).
    """

    def __init__(
        self, backend: EmbeddingBackend, index_feed: IndexFeed, indexing: Indexing, recent: RecentVaults
    ) -> None:
        self._backend = backend
        self._index_feed = index_feed
        self._indexing = indexing
        self._recent = recent

    async def searched(self, vault: VaultRow) -> None:
        """Remember that ``vault`` was searched (its cache is warmed at the next unlock)."""
        await self._recent.searched(vault)

    async def default_mode(self, job: VaultJob, vault: VaultRow, ctx: RequestContext) -> p.SearchMode:
        """The mode of a search that asked for none (see the module's docstring), with a warning when a model is
        usable but hybrid was not possible."""
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
        missing = await self._missing(job, vault, space)
        running = self._indexing.background_job(vault)
        if running is None:
            if missing.total_missing <= ON_DEMAND_DEFAULT:
                return "hybrid"
            ctx.warnings.append(
                f"searching with bm25: {missing.total_missing} chunks have no vector yet; run "
                f"`memories rag index {vault.name} --background` for hybrid search"
            )
            return "bm25"
        if not missing.total_missing:
            return "hybrid"
        inputs = missing.embedded + missing.total_missing
        ctx.warnings.append(
            f"searching with bm25: {missing.embedded:,} of {inputs:,} chunks have a vector so far; "
            f"{_pace(running)} embeds the rest"
        )
        return "bm25"

    async def _missing(self, job: VaultJob, vault: VaultRow, space: w.VectorSpace) -> w.MissingInputs:
        """How many of the vault's inputs have a vector in ``space`` and how many are missing (the cache brought
        to the job's epoch, its kept vectors loaded)."""
        return await self._index_feed.call(
            job, vault, w.IndexMissing(vault=vault.id, epoch=job.epoch, space=space, limit=0)
        )

    async def prepare(self, job: VaultJob, vault: VaultRow, space: w.VectorSpace, ctx: RequestContext) -> None:
        """Before a vector or hybrid query: embed the vault's missing inputs on demand (R-26), unless its background
        index job runs; then say how much of the vault the search covers."""
        running = self._indexing.background_job(vault)
        if running is None:
            report = await self._indexing.embed_missing(job, vault, space)
            failure = self._indexing.background_failure(vault.id)
            if failure is not None and report.embedded_now:  # the work of a background job that gave up
                ctx.warn(
                    f"this search embedded {report.embedded_now:,} chunks itself: background index job "
                    f"{failure.job_id} failed ({failure.error.message}) and is not retried after {failure.attempt} "
                    f"attempts; run `memories rag index {vault.name} --background` to embed the rest in the background"
                )
            return
        missing = await self._missing(job, vault, space)
        if missing.total_missing:
            inputs = missing.embedded + missing.total_missing
            ctx.warn(
                f"searched the {missing.embedded:,} of {inputs:,} chunks that have a vector; {_pace(running)} embeds "
                f"the other {missing.total_missing:,}"
            )


def _pace(job: Job) -> str:
    """``background job 12 (about 3 min left)``, as far as it is known."""
    left = job.seconds_left()
    if left is None:
        return f"background job {job.id}"
    return f"background job {job.id} (about {about(left)} left)"
