"""Embedding a vault's chunks, batch by batch (R-26, R-27): ``rag index``, its background rounds, and the
on-demand embedding of vector and hybrid searches.

The index worker names the model inputs that have no vector in the current vector space (shortest first), the
embedding backend embeds them (:mod:`memories.daemon.backends`: the local model one batch at a time, a remote
service up to ``concurrency`` batches at once), the index worker stores each batch as it comes. Inputs the service
refused as too long are stored as failed for that space and never offered again; ``rag index`` reports them.
Vectors are keyed by the hash of the exact model
input, so finished batches survive a budget stop, a cancel, a crash of the embedding worker and edits elsewhere in
the vault (the job then adopts the new epoch and goes on); a retry embeds only what is still missing. Evicting
the vault from the worker's cache (R-21: two vaults) drops its vectors with it; the next round rebuilds.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.egress import refuse_device_only
from memories.daemon.jobs import StaleEpoch, VaultJob
from memories.daemon.server import Connection
from memories.errors import MemoriesError
from memories.store import VaultRow

if TYPE_CHECKING:
    from memories.daemon.supervisor import Daemon

log = logging.getLogger("memories.indexing")


class Indexing:
    """``rag index`` and the embedding step of searches."""

    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon

    async def index(self, request: p.RagIndex, conn: Connection) -> p.IndexReport | p.JobStarted:
        """``rag index``: embed every missing chunk; ``--background`` keeps going in budgeted rounds until the
        vault is embedded, the job is cancelled or the home is locked.

        Raises:
            MemoriesError: ``device_only_vault``, ``model_not_installed``, ``model_invalid``, ``budget_exceeded``
                (details ``embedded_now``, ``reused``, ``missing``) and the workers' failures.
        """
        daemon = self._daemon
        vault = await daemon.resolve_unlocked(request.vault)
        backend = daemon.embedding
        refuse_device_only(vault, backend.egress_url, "rag.embedding")
        space = await backend.space()
        conn.warnings.extend(backend.load_warnings())
        job = daemon.jobs.new_job("index", vault.id, vault.name)

        async def work(job: VaultJob) -> p.IndexReport:
            return await self.embed_missing(job, vault, space)

        if not request.background:
            conn.attach(job)
            return await daemon.jobs.run(job, work)

        async def rounds(job: VaultJob) -> p.IndexReport:
            while True:
                try:
                    return await work(job)
                except MemoriesError as exc:
                    if exc.code != "budget_exceeded":
                        raise
                    log.info("background index job %s: round over budget; starting another", job.id)
                    job.start_round()

        daemon.spawn(_run_in_background, daemon, job, rounds)
        return p.JobStarted(job_id=job.id)

    async def embed_missing(self, job: VaultJob, vault: VaultRow, space: w.VectorSpace) -> p.IndexReport:
        """Embed every chunk of ``vault`` without a vector in ``space``: per step up to ``concurrency`` batches of
        ``batch_size`` at once (the local model: one batch).

        ``embedded_now`` counts the vectors the index worker stored new during this call; ``reused`` those it
        already held when the call began; ``missing`` those still to embed; ``failed`` the chunks the service
        refused (never resent in this space). The caller checked the device-only policy.

        Raises:
            MemoriesError: ``budget_exceeded`` (details as above) and the failures of the workers.
        """
        daemon = self._daemon
        backend = daemon.embedding
        cut_after = daemon.hooks.cut_after_batches if daemon.hooks else None
        counts = {"embedded_now": 0, "reused": 0, "missing": 0}
        batches = 0
        try:
            while True:
                limit = backend.batch_size * backend.concurrency
                ask = w.IndexMissing(vault=vault.id, epoch=job.epoch, space=space, limit=limit)
                try:
                    missing = await daemon.cache_sync.call(job, vault, ask)
                except StaleEpoch:  # an edit during a long run: vectors are content-addressed, so go on
                    job.adopt_current_epoch()
                    continue
                if batches == 0:
                    counts["reused"] = missing.embedded
                counts["missing"] = missing.total_missing
                done = counts["reused"] + counts["embedded_now"]
                job.progress(done, done + missing.total_missing, "chunks")
                if not missing.keys:
                    return p.IndexReport(**counts, failed=missing.failures)
                if cut_after is not None and batches >= cut_after:
                    raise MemoriesError("budget_exceeded", "cut by the cut_after_batches test hook")
                job.check_budget()
                starts = range(0, len(missing.keys), backend.batch_size)
                batches += len(starts)
                await _all(
                    [self._embed_batch(job, vault, space, missing, start, counts) for start in starts],
                )
        except MemoriesError as exc:
            if exc.code == "budget_exceeded":
                raise _over_budget(job, counts) from None
            raise

    async def _embed_batch(
        self,
        job: VaultJob,
        vault: VaultRow,
        space: w.VectorSpace,
        plan: w.MissingInputs,
        start: int,
        counts: dict[str, int],
    ) -> None:
        """Embed and store one batch of ``plan`` (inputs ``start .. start + batch_size``)."""
        daemon = self._daemon
        keys = plan.keys[start : start + daemon.embedding.batch_size]
        inputs = plan.inputs[start : start + daemon.embedding.batch_size]
        embedded = await daemon.embedding.embed(job, inputs)
        store = w.IndexStoreVectors(
            vault=vault.id,
            space_key=space.key,
            keys=[keys[index] for index in embedded.ok],
            vectors=embedded.vectors,
            dimension=embedded.dimension,
            failed={keys[index]: reason for index, reason in embedded.failed.items()},
        )
        stored = await job.call(daemon.workers["index"], store, budget=False, epoch=False)
        if isinstance(stored, w.VectorsStored):  # else the vault left the cache: the next ask rebuilds
            counts["embedded_now"] += stored.stored


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


def _over_budget(job: VaultJob, counts: dict[str, int]) -> MemoriesError:
    return MemoriesError(
        "budget_exceeded",
        f"stopped at the budget of {job.budget:g} s with {counts['reused'] + counts['embedded_now']} chunks "
        f"embedded and {counts['missing']} missing; run it again to continue (finished batches are kept)",
        counts,
    )


async def _run_in_background(
    daemon: Daemon, job: VaultJob, work: Callable[[VaultJob], Awaitable[p.IndexReport]]
) -> None:
    """Run a background job; its outcome is visible in ``memories jobs`` and never raised into the daemon."""
    try:
        await daemon.jobs.run(job, work)
    except MemoriesError as exc:
        log.info("background job %s ended: %s", job.id, exc.code)
    except Exception as exc:  # recorded as internal_error by the job manager; the daemon must keep serving
        log.error("background job %s failed: %s", job.id, type(exc).__name__)
