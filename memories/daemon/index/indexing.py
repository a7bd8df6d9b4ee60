"""Embedding a vault's chunks, batch by batch (R-26, R-27): ``rag index``, its background rounds, and the
on-demand embedding of vector and hybrid searches.

The index worker names a plan of model inputs that have no vector in the current vector space (shortest first by
its estimate), the embedding backend orders and embeds them (:mod:`memories.daemon.index.backends`: the local model
plans several batches, has their tokens counted and embeds them one batch at a time, equal token counts
together; a remote service gets up to ``concurrency`` batches at once), the index worker stores each batch as it
comes. Inputs the service refused as too long are stored as failed for that space and never offered again;
``rag index`` reports them. Vectors are keyed by the hash of the exact model input, so finished batches survive a
budget stop, a cancel, a crash of the embedding worker and edits elsewhere in the vault (the job then adopts the
new epoch and goes on); a retry embeds only what is still missing. The records a batch touched are sealed in the
home (:class:`memories.daemon.index.kept_vectors.KeptVectors`) at most every ``SEAL_SECONDS``, at a budget stop and at
the end of the run, where the rows a load found stale are rewritten too: a lock, a restart or an eviction from
the worker's cache (R-21: two vaults) then costs a load, not an embedding.

*An index that keeps itself up to date* (``[rag] auto_index``): :meth:`Indexing.start_reindex` is the one entry
point for "a vault changed, keep it embedded" (ingest, ``memory add|update``, a sync pull, unlock, a watched
folder). It runs a background job (:class:`memories.daemon.index.background.BackgroundQueue`: one at a time, one per
vault, later changes join it) that brings the cache up to date, loads the kept vectors and embeds what is missing
in budgeted rounds, below foreground work (:class:`~memories.daemon.index.background.EmbeddingTurns`: smaller batches,
each after every foreground embedding run). While it runs, a search does not embed on demand: it searches what is
embedded and says how much that is.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable

import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import RagConfig
from memories.daemon.core.context import Handlers, RequestContext, StartSoon
from memories.daemon.core.egress import check_current_policy, leaves_device, refuse_device_only
from memories.daemon.core.jobs import JobManager, StaleEpoch, VaultJob
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.core.workers import WorkerHandle
from memories.daemon.index.backends import EmbeddingBackend, RemoteBackend
from memories.daemon.index.background import BackgroundQueue, EmbeddingTurns, Work
from memories.daemon.index.feed import IndexFeed
from memories.daemon.index.kept_vectors import KeptVectors, SealClock
from memories.errors import MemoriesError
from memories.vault.store import VaultRow

log = logging.getLogger("memories.indexing")


class Indexing:
    """``rag index`` and the embedding step of searches.

    Args:
        store: the store gate; jobs: the job queue; index_feed: the index worker's caches.
        backend: the embedding backend (local model or remote service; its batch size and concurrency).
        index: the index worker (it names missing inputs and stores vectors).
        kept: the vectors kept in the home (what a run embeds is sealed there).
        rag: ``[rag]`` (``auto_index``).
        cut_after_batches: test hooks only: an embedding round ends with ``budget_exceeded`` after this many
            batches, as if its budget ran out there (``None`` without hooks).
        start_soon: starts background jobs in the daemon's nursery.
    """

    def __init__(
        self,
        store: StoreGate,
        jobs: JobManager,
        index_feed: IndexFeed,
        backend: EmbeddingBackend,
        index: WorkerHandle,
        kept: KeptVectors,
        rag: RagConfig,
        cut_after_batches: int | None,
        start_soon: StartSoon,
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._index_feed = index_feed
        self._backend = backend
        self._index = index
        self._kept = kept
        self._auto = rag.auto_index
        self._cut_after = cut_after_batches
        self._queue = BackgroundQueue(jobs, start_soon)
        self._turns = EmbeddingTurns()
        self.batches = 0
        """Embedding batches stored since the daemon started (``daemon status``)."""

    def handlers(self) -> Handlers:
        """The requests this module answers."""
        return {p.RagIndex: self.index}

    async def index(self, request: p.RagIndex, ctx: RequestContext) -> p.IndexReport | p.JobStarted:
        """``rag index``: embed every missing chunk; ``--background`` keeps going in budgeted rounds until the
        vault is embedded, the job is cancelled or the home is locked.

        Raises:
            MemoriesError: ``device_only_vault``, ``model_not_installed``, ``model_invalid``, ``budget_exceeded``
                (details ``embedded_now``, ``reused``, ``missing``) and the workers' failures.
        """
        vault = await self._store.resolve_unlocked(request.vault)
        backend = self._backend
        refuse_device_only(vault, backend.egress_url, "rag.embedding")
        space = await backend.space()
        ctx.warnings.extend(backend.load_warnings())
        if request.background:
            return p.JobStarted(job_id=self.start_background(vault, space).id)
        job = self._jobs.new_job("index", vault.id, vault.name, epoch_checked=False)
        ctx.attach(job)
        return await self._jobs.run(job, lambda job: self.embed_missing(job, vault, space))

    def start_background(self, vault: VaultRow, space: w.VectorSpace) -> VaultJob:
        """Embed the vault in the daemon's nursery, in budgeted rounds, with no client (``rag index
        --background``): the vault's background index job, which it joins when one is queued or running. Its
        outcome is visible in ``memories jobs``. The caller checked the device-only policy; each batch checks it
        again, and a change cuts the job."""
        return self._queue.submit(vault, lambda job: self._rounds(job, vault, space))

    async def start_reindex(self, vault: VaultRow, *, refresh: bool = False) -> VaultJob | None:
        """A vault changed (ingest, ``memory add|update``, a sync pull, an unlock, a watched folder): keep its index
        and embeddings up to date in the background. When the daemon embeds this vault by itself
        (:meth:`embeds_by_itself`), the vault's background index job (joined when one is queued or running)
        brings the index worker's cache up to date, loads the kept vectors and embeds what is missing in budgeted
        rounds; otherwise, with ``refresh`` (a pull: docs/guide/sync.md promises it), it brings the cache (and the kept
        vectors, when a model is usable) up to date alone. Returns the job, or ``None`` when nothing is to do. Its
        outcome (also ``model_invalid``, ``vault_too_large``) is visible in ``memories jobs``."""
        embeds = await self.embeds_by_itself(vault)
        if not (embeds or refresh):
            return None
        return self._queue.submit(vault, self._keep_up(vault, embeds))

    async def embeds_by_itself(self, vault: VaultRow) -> bool:
        """Whether the daemon embeds this vault's missing inputs by itself (``[rag] auto_index``): ``local`` with
        the installed in-process model, ``always`` also with ``[rag.embedding]``; never a vault over the R-21
        limits, and never a device-only vault whose embedding URL is not loopback."""
        backend = self._backend
        if self._auto == "off" or (isinstance(backend, RemoteBackend) and self._auto != "always"):
            return False
        if vault.device_only and leaves_device(backend.egress_url):
            return False
        return self._index_feed.too_large(vault) is None and await backend.available()

    def background_job(self, vault: VaultRow) -> VaultJob | None:
        """The vault's background index job, while it is queued or running."""
        return self._queue.running(vault.id)

    def background_failure(self, vault_id: str) -> p.BackgroundFailure | None:
        """The vault's last background index job a worker crash ended, and its retry (issue 29, item 4)."""
        return self._queue.failure(vault_id)

    def _keep_up(self, vault: VaultRow, embeds: bool) -> Work:
        async def work(job: VaultJob) -> p.IndexReport | None:
            await self._index_feed.refresh(job, vault)
            if not await self._backend.available() or (vault.device_only and leaves_device(self._backend.egress_url)):
                return None
            space = await self._backend.space()
            if embeds:
                return await self._rounds(job, vault, space, background=True)
            ask = w.IndexMissing(vault=vault.id, epoch=job.epoch, space=space, limit=0)
            with contextlib.suppress(StaleEpoch):  # loads the kept vectors; a change meanwhile is the next search's
                await self._index_feed.call(job, vault, ask)
            return None

        return work

    async def _rounds(
        self, job: VaultJob, vault: VaultRow, space: w.VectorSpace, *, background: bool = True
    ) -> p.IndexReport:
        """:meth:`embed_missing` in budgeted rounds: each round that runs out of budget asks for a fresh one,
        explicitly, until the vault is embedded, the job is cut or it fails otherwise."""
        while True:
            try:
                return await self.embed_missing(job, vault, space, background=background)
            except MemoriesError as exc:
                if exc.code != "budget_exceeded":
                    raise
                log.info("background index job %s: round over budget; starting another", job.id)
                job.fresh_round()

    async def embed_missing(
        self, job: VaultJob, vault: VaultRow, space: w.VectorSpace, *, background: bool = False
    ) -> p.IndexReport:
        """Embed every chunk of ``vault`` without a vector in ``space``, plan by plan (``backend.plan_size``
        inputs), per step up to ``concurrency`` batches of ``batch_size`` at once (the local model: one batch),
        the budget checked before every step. A ``background`` run's steps take turns below foreground runs
        (:class:`~memories.daemon.index.background.EmbeddingTurns`), with smaller batches.

        ``embedded_now`` counts the vectors the index worker stored new during this call; ``reused`` those it
        already held when the call began; ``missing`` those still to embed; ``failed`` the chunks the service
        refused (never resent in this space). The caller checked the device-only policy; each batch checks the
        vault's current policy again before it is sent.

        Raises:
            MemoriesError: ``budget_exceeded`` (details as above) and the failures of the workers.
        """
        counts = {"embedded_now": 0, "reused": 0, "missing": 0}
        seals = SealClock()
        try:
            with contextlib.nullcontext() if background else self._turns.foreground():
                failed = await self._plans(job, vault, space, background, counts, seals)
            return p.IndexReport(**counts, failed=failed)
        except MemoriesError as exc:
            if exc.code == "budget_exceeded":
                with contextlib.suppress(MemoriesError):  # what was embedded is kept for the next run
                    await self._seal(job, vault, space, seals)
                raise _over_budget(job, counts) from None
            raise

    async def _plans(
        self,
        job: VaultJob,
        vault: VaultRow,
        space: w.VectorSpace,
        background: bool,
        counts: dict[str, int],
        seals: SealClock,
    ) -> list[p.EmbedFailure]:
        """:meth:`embed_missing`'s loop: plan after plan until nothing is missing; the refused chunks."""
        backend = self._backend
        batches = 0
        while True:
            ask = w.IndexMissing(vault=vault.id, epoch=job.epoch, space=space, limit=backend.plan_size)
            try:
                missing = await self._index_feed.call(job, vault, ask)
            except StaleEpoch:  # an edit during a long run: vectors are content-addressed, so go on
                job.adopt_current_epoch()
                continue
            if batches == 0:
                counts["reused"] = missing.embedded
            counts["missing"] = missing.total_missing
            self._progress(job, counts)
            if not missing.keys:
                seals.touched |= self._kept.pending(vault)  # rows a load found stale or incomplete
                await self._seal(job, vault, space, seals)
                return missing.failures
            plan = await backend.batches(job, missing.inputs, background)
            while plan:
                if self._cut_after is not None and batches >= self._cut_after:
                    raise MemoriesError("budget_exceeded", "cut by the cut_after_batches test hook")
                job.check_budget()
                step, plan = plan[: backend.concurrency], plan[backend.concurrency :]
                async with self._turns.background() if background else _foreground() as waited:
                    if waited:  # a foreground run embedded meanwhile, perhaps some of this plan: plan again
                        break
                    await _all([self._embed_batch(job, vault, space, missing, at, counts, seals) for at in step])
                batches += len(step)
                self._progress(job, counts)
                if seals.due():
                    await self._seal(job, vault, space, seals)

    async def _seal(self, job: VaultJob, vault: VaultRow, space: w.VectorSpace, seals: SealClock) -> None:
        """Seal the sets of the records touched since the last seal (kept for later when the cache went away)."""
        if await self._kept.seal(job, vault, space, seals.touched):
            seals.sealed()

    @staticmethod
    def _progress(job: VaultJob, counts: dict[str, int]) -> None:
        done = counts["reused"] + counts["embedded_now"]
        job.progress(done, done + counts["missing"], "chunks")

    async def _embed_batch(
        self,
        job: VaultJob,
        vault: VaultRow,
        space: w.VectorSpace,
        plan: w.MissingInputs,
        positions: list[int],
        counts: dict[str, int],
        seals: SealClock,
    ) -> None:
        """Embed and store one batch: the inputs of ``plan`` at ``positions``; the records it touched join
        ``seals``."""
        keys = [plan.keys[position] for position in positions]
        inputs = [plan.inputs[position] for position in positions]
        await check_current_policy(self._store, vault, self._backend.egress_url, "rag.embedding")
        embedded = await self._backend.embed(job, inputs)
        store = w.IndexStoreVectors(
            vault=vault.id,
            space_key=space.key,
            keys=[keys[index] for index in embedded.ok],
            vectors=embedded.vectors,
            dimension=embedded.dimension,
            failed={keys[index]: reason for index, reason in embedded.failed.items()},
        )
        stored = await job.call(self._index, store, budget=False, epoch=False)
        self.batches += 1
        if isinstance(stored, w.VectorsStored):  # else the vault left the cache: the next ask rebuilds
            seals.touched.update(stored.records)
            counts["embedded_now"] += stored.stored
            # so a budget stop before the next ask reports it right (a refused input is not missing either)
            counts["missing"] = max(counts["missing"] - stored.stored - len(store.failed), 0)


async def _all(steps: list[Awaitable[None]]) -> None:
    """Run ``steps`` at once; the first failure cancels the others and is raised as itself (not as a group).
    Batches that finished before it are stored and kept (R-27)."""
    if len(steps) == 1:
        await steps[0]
        return
    failures: list[BaseException] = []

    async def run(step: Awaitable[None], scope: trio.CancelScope) -> None:
        try:
            await step
        except Exception as exc:
            failures.append(exc)
            scope.cancel()

    async with trio.open_nursery() as nursery:
        for step in steps:
            nursery.start_soon(run, step, nursery.cancel_scope)
    if failures:
        raise failures[0]


@contextlib.asynccontextmanager
async def _foreground() -> AsyncIterator[bool]:
    """A foreground step's turn: at once, never waiting (:meth:`EmbeddingTurns.background`'s twin)."""
    yield False


def _over_budget(job: VaultJob, counts: dict[str, int]) -> MemoriesError:
    return MemoriesError(
        "budget_exceeded",
        f"stopped at the budget of {job.budget:g} s with {counts['reused'] + counts['embedded_now']} chunks "
        f"embedded and {counts['missing']} missing; run it again to continue (finished batches are kept)",
        counts,
    )
