"""How the daemon's own index work stays below a person's: background index jobs one at a time, one per vault, and
embedding batches that give way to foreground ones (issue 19).

- :class:`BackgroundQueue`: every background index job (after a change, at unlock, ``rag index --background``)
  goes through it. At most one runs at a time, the others wait as ``queued`` in ``memories jobs`` without holding
  one of the job manager's four running slots; a vault has at most one such job, and a change while it is queued
  or running joins it (the job runs its work once more, the latest work asked for).
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

from memories.daemon.core.context import StartSoon
from memories.daemon.core.jobs import JobManager, VaultJob
from memories.errors import MemoriesError
from memories.logs import log_failure
from memories.vault.store import VaultRow

log = logging.getLogger("memories.indexing")

Work = Callable[[VaultJob], Awaitable[Any]]


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

    def submit(self, vault: VaultRow, work: Work) -> VaultJob:
        """Run ``work`` as the vault's background index job; when one is queued or running already, it runs
        ``work`` once more after its current work, and is returned."""
        job = self._by_vault.get(vault.id)
        if job is not None and job.active:
            self._again[vault.id] = work
            return job
        job = self._jobs.new_job("index", vault.id, vault.name, epoch_checked=False)
        job.background = True
        self._by_vault[vault.id] = job
        self._start_soon(self._run, job, vault.id, work)
        return job

    def running(self, vault_id: str) -> VaultJob | None:
        """The vault's background index job if it is queued or running."""
        job = self._by_vault.get(vault_id)
        return job if job is not None and job.active else None

    async def _run(self, job: VaultJob, vault_id: str, work: Work) -> None:
        async def rounds(job: VaultJob) -> Any:
            result, current = None, work
            while True:
                result = await current(job)
                following = self._again.pop(vault_id, None)
                if following is None:
                    return result
                current = following

        async with self._turn:  # a job cut while queued (lock, jobs cancel) ends at once in jobs.run
            try:
                await self._jobs.run(job, rounds)
            except MemoriesError as exc:
                log.info("background job %s ended: %s", job.id, exc.code)
            except Exception as exc:  # recorded as internal_error by the job manager; the daemon must keep serving
                log_failure(log, f"background job {job.id} failed", exc)
            finally:
                self._again.pop(vault_id, None)


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
