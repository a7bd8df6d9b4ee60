"""How the daemon's own index work stays below a person's: background index jobs one at a time, one per vault, and
embedding batches that give way to foreground ones (issue 19).

- :class:`BackgroundQueue`: every background index job (after a change, at unlock, ``rag index --background``)
  goes through it. At most one runs at a time, the others wait as ``queued`` in ``memories jobs`` without holding
  one of the job manager's four running slots; a vault has at most one such job, and a change while it is queued
  or running joins it (the job runs its work once more, the latest work asked for).
  A job that fails because a worker crashed (``worker_crashed``: the embedding worker killed, out of memory, a
  ``kill -9``) is not the end of the vault's background work (issue 29, item 4): the queue logs it, keeps it as the
  vault's :class:`~memories.protocol.BackgroundFailure` (``rag status``), and queues the same work again as a new
  job at once, which waits :data:`RETRY_FIRST_SECONDS` doubling to :data:`RETRY_MAX_SECONDS` before it starts, at
  most :data:`RETRY_ATTEMPTS` retries in a row; the worker restarts meanwhile (its own backoff,
  :mod:`memories.daemon.core.workers`). The retry is the vault's background job while it waits, so a search searches
  what is embedded and says so instead of embedding the rest itself. A job that ends well clears the failure; a
  new change (:meth:`BackgroundQueue.submit`) gives the vault its attempts again.
- :class:`EmbeddingTurns`: a background batch starts only when no foreground embedding (``rag index``, the
  on-demand embedding of a search) is running, and only one background batch is in flight at a time: the
  embedding worker serves requests in order, so a search's query embedding waits behind at most that one batch,
  which is kept small (:data:`memories.daemon.index.backends.BACKGROUND_BATCH_TOKENS`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import trio

from memories import protocol as p
from memories.daemon.core.context import StartSoon
from memories.daemon.core.jobs import JobManager, VaultJob
from memories.errors import MemoriesError
from memories.logs import log_failure
from memories.vault.store import VaultRow

log = logging.getLogger("memories.indexing")

Work = Callable[[VaultJob], Awaitable[Any]]

RETRY_FIRST_SECONDS = 1.0
"""The wait before the first retry of a background job a worker crash ended; it doubles with each crash in a row."""
RETRY_MAX_SECONDS = 30.0
"""The longest wait before a retry."""
RETRY_ATTEMPTS = 5
"""Retries in a row of a vault's background job; a crash after them is not retried until the next change (or
``rag index --background``)."""


class BackgroundQueue:
    """Background index jobs, one at a time, one per vault.

    Args:
        jobs: the job manager (the jobs are its jobs: cut by lock, cancel, a policy change); start_soon: starts a task
        in the daemon's nursery.
    """

    def __init__(self, jobs: JobManager, start_soon: StartSoon) -> None:
        self._jobs = jobs
        self._start_soon = start_soon
        self._by_vault: dict[str, VaultJob] = {}
        self._again: dict[str, Work] = {}
        self._turn = trio.Lock()
        self._failures: dict[str, p.BackgroundFailure] = {}
        self._crashes: dict[str, int] = {}

    def submit(self, vault: VaultRow, work: Work) -> VaultJob:
        """Run ``work`` as the vault's background index job; when one is queued or running already, it runs
        ``work`` once more after its current work, and is returned."""
        job = self._by_vault.get(vault.id)
        if job is not None and job.active:
            self._again[vault.id] = work
            return job
        self._crashes.pop(vault.id, None)  # a change: the vault has its retries again
        return self._queue(vault, work, 0.0)

    def failure(self, vault_id: str) -> p.BackgroundFailure | None:
        """The last background job of the vault that a crash ended, until one ends well (``rag status``)."""
        return self._failures.get(vault_id)

    def _queue(self, vault: VaultRow, work: Work, delay: float) -> VaultJob:
        job = self._jobs.new_job("index", vault.id, vault.name, epoch_checked=False)
        job.background = True
        self._by_vault[vault.id] = job
        self._start_soon(self._run, job, vault, work, delay)
        return job

    def running(self, vault_id: str) -> VaultJob | None:
        """The vault's background index job if it is queued or running."""
        job = self._by_vault.get(vault_id)
        return job if job is not None and job.active else None

    async def _run(self, job: VaultJob, vault: VaultRow, work: Work, delay: float) -> None:
        vault_id = vault.id

        async def rounds(job: VaultJob) -> Any:
            result, current = None, work
            while True:
                result = await current(job)
                following = self._again.pop(vault_id, None)
                if following is None:
                    return result
                current = following

        if delay:
            await trio.sleep(delay)  # queued meanwhile: a cut (lock, jobs cancel) ends it at once in jobs.run
        async with self._turn:  # a job cut while queued (lock, jobs cancel) ends at once in jobs.run
            try:
                await self._jobs.run(job, rounds)
                self._failures.pop(vault_id, None)
                self._crashes.pop(vault_id, None)
            except MemoriesError as exc:
                if exc.code == "worker_crashed":  # not a cut: lock and cancel end a job with their own code
                    self._crashed(job, vault, self._again.get(vault_id) or work, exc)
                else:
                    log.info("background job %s ended: %s", job.id, exc.code)
            except Exception as exc:  # recorded as internal_error by the job manager; the daemon must keep serving
                log_failure(log, f"background job {job.id} failed", exc)
            finally:
                self._again.pop(vault_id, None)

    def _crashed(self, job: VaultJob, vault: VaultRow, work: Work, exc: MemoriesError) -> None:
        """A worker crash ended ``job``: queue ``work`` again after the backoff, or give up after
        :data:`RETRY_ATTEMPTS` crashes in a row; either way logged and kept for ``rag status``."""
        crashes = self._crashes.get(vault.id, 0) + 1
        self._crashes[vault.id] = crashes
        error = p.ErrorInfo(code=exc.code, message=exc.message)
        if crashes > RETRY_ATTEMPTS:
            log.warning(
                "background index job %s of vault %s failed (%s); not retried after %d crashes in a row: "
                "run `memories rag index %s --background`",
                job.id, vault.id, exc.message, RETRY_ATTEMPTS, vault.name,
            )  # fmt: skip
            self._failures[vault.id] = p.BackgroundFailure(job.id, error, crashes - 1, None, RETRY_ATTEMPTS)
            return
        delay = min(RETRY_FIRST_SECONDS * 2 ** (crashes - 1), RETRY_MAX_SECONDS)
        retry = self._queue(vault, work, delay)
        log.warning(
            "background index job %s of vault %s failed (%s); job %s retries it in %g s (attempt %d of %d)",
            job.id, vault.id, exc.message, retry.id, delay, crashes, RETRY_ATTEMPTS,
        )  # fmt: skip
        self._failures[vault.id] = p.BackgroundFailure(job.id, error, crashes, retry.id, RETRY_ATTEMPTS)


class EmbeddingTurns:
    """Foreground embedding first; background batches one at a time, each once no foreground run is left."""

    def __init__(self) -> None:
        self._foreground = 0
        self._idle = trio.Event()
        self._idle.set()
        self._background = trio.Lock()

    @contextmanager
    def foreground(self) -> Iterator[None]:
        """While a foreground run (``rag index``, a search's on-demand embedding) is inside, no background batch
        starts."""
        self._foreground += 1
        self._idle = trio.Event() if self._foreground == 1 else self._idle
        try:
            yield
        finally:
            self._foreground -= 1
            if not self._foreground:
                self._idle.set()

    @asynccontextmanager
    async def background(self) -> AsyncIterator[bool]:
        """The turn of one background step; yields whether it had to wait for a foreground run (which may have
        embedded some of the step's inputs: the caller plans again)."""
        async with self._background:
            waited = False
            while self._foreground:
                waited = True
                await self._idle.wait()
            yield waited
