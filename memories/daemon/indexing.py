"""Embedding a vault's chunks, batch by batch (R-26, R-27): ``rag index``, its background rounds, and the
on-demand embedding of vector and hybrid searches.

The index worker names the model inputs that have no vector in the current vector space (shortest first), the
embedding worker embeds one batch, the index worker stores it. Vectors are keyed by the hash of the exact model
input, so finished batches survive a budget stop, a cancel, a crash of the embedding worker and edits elsewhere in
the vault (the job then adopts the new epoch and goes on); a retry embeds only what is still missing. Evicting
the vault from the worker's cache (R-21: two vaults) drops its vectors with it; the next round rebuilds.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from memories import protocol as p
from memories import worker_protocol as w
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
            MemoriesError: ``model_not_installed``, ``model_invalid``, ``budget_exceeded`` (details
                ``embedded_now``, ``reused``, ``missing``) and the workers' failures.
        """
        daemon = self._daemon
        vault = await daemon.resolve_unlocked(request.vault)
        space_key = await daemon.models.space_key()
        conn.warnings.extend(daemon.models.load_warnings())
        job = daemon.jobs.new_job("index", vault.id)

        async def work(job: VaultJob) -> p.IndexReport:
            return await self.embed_missing(job, vault, space_key)

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

    async def embed_missing(self, job: VaultJob, vault: VaultRow, space_key: str) -> p.IndexReport:
        """Embed every chunk of ``vault`` without a vector in ``space_key``, one batch per step.

        ``embedded_now`` counts the vectors the index worker stored new during this call; ``reused`` those it
        already held when the call began; ``missing`` those still to embed.

        Raises:
            MemoriesError: ``budget_exceeded`` (details as above) and the failures of the workers.
        """
        daemon = self._daemon
        cut_after = daemon.hooks.cut_after_batches if daemon.hooks else None
        batch_size = daemon.config.rag.embed_batch_size
        counts = {"embedded_now": 0, "reused": 0, "missing": 0}
        batches = 0
        try:
            while True:
                ask = w.IndexMissing(vault=vault.id, epoch=job.epoch, space_key=space_key, limit=batch_size)
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
                    return p.IndexReport(**counts)
                if cut_after is not None and batches >= cut_after:
                    raise MemoriesError("budget_exceeded", "cut by the cut_after_batches test hook")
                job.check_budget()
                vectors = await daemon.models.embed_documents(job, missing.inputs)
                store = w.IndexStoreVectors(
                    vault=vault.id,
                    space_key=space_key,
                    keys=missing.keys,
                    vectors=vectors.vectors,
                    dimension=vectors.dimension,
                )
                stored = await job.call(daemon.workers["index"], store, budget=False, epoch=False)
                batches += 1
                if isinstance(stored, w.VectorsStored):  # else the vault left the cache: the next ask rebuilds
                    counts["embedded_now"] += stored.stored
        except MemoriesError as exc:
            if exc.code == "budget_exceeded":
                raise _over_budget(job, counts) from None
            raise


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
