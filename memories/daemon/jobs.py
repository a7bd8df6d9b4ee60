"""Jobs: the unit of work that needs workers, with a budget, a cancel scope and the epochs it started from.

::

    queued ──(a running slot frees)──▶ running ──▶ done | failed(code) | cancelled

- **Budget** (R-27): each run gets ``job_budget_seconds``; :meth:`Job.call` checks it before every worker step,
  so a step in flight finishes (its result, such as an embedding batch, is kept) and the job then ends with
  ``budget_exceeded``. The job's cancel scope also carries a hard deadline ``budget + STEP_GRACE`` for a step that
  never returns.
- **Cancellation**: ``jobs cancel``, lock and a client that hangs up cancel the job's scope; the pending worker
  call is abandoned and its late reply dropped (:mod:`memories.daemon.workers`).
- **Epochs** (R-44): each vault has a state epoch, bumped by every change of its content or policy and by lock. A
  job captures its vault's epoch when a run starts and re-checks it on every worker reply; a stale reply raises
  :class:`StaleEpoch`, the run's result is dropped and the run starts again from the new state (at most
  ``MAX_RERUNS`` times, then ``vault_changed``).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.workers import WorkerHandle
from memories.errors import MemoriesError

log = logging.getLogger("memories.jobs")

T = TypeVar("T")
R = TypeVar("R")
J = TypeVar("J", bound="Job")

STEP_GRACE = 30.0
"""Seconds a step already in flight may run past the budget before the cancel scope cuts it."""

PROGRESS_INTERVAL = 0.1
"""Seconds between progress events sent to a client."""

MAX_RERUNS = 3
MAX_RUNNING = 4
HISTORY = 50


class StaleEpoch(Exception):
    """A worker reply belongs to an older state of the vault than the current one."""


class Epochs:
    """State epochs per vault, from one counter so an epoch value is never reused within a daemon's life."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)
        self._by_vault: dict[str, int] = {}

    def get(self, vault_id: str) -> int:
        """The vault's current epoch (a fresh one the first time it is asked)."""
        epoch = self._by_vault.get(vault_id)
        if epoch is None:
            epoch = self._by_vault[vault_id] = next(self._counter)
        return epoch

    def bump(self, vault_id: str) -> None:
        """The vault changed: give it a new epoch."""
        self._by_vault[vault_id] = next(self._counter)

    def bump_all(self) -> None:
        """Every vault changed (lock)."""
        for vault_id in list(self._by_vault):
            self.bump(vault_id)


class Job:
    """One job. ``vault_id`` (and ``vault_name``, as it was when the job started) is ``None`` for jobs that touch no
    vault (model install)."""

    def __init__(
        self, job_id: int, kind: str, vault_id: str | None, budget: float | None, vault_name: str | None = None
    ) -> None:
        self.id = job_id
        self.kind = kind
        self.vault_id = vault_id
        self.vault_name = vault_name
        self.state: p.JobState = "queued"
        self.done = 0
        self.total: int | None = None
        self.unit: str | None = None
        self.error: p.ErrorInfo | None = None
        self.budget = budget
        self.deadline: float | None = None
        self.scope = trio.CancelScope()
        self.cancel_code: str | None = None
        self.cancel_reason: str | None = None
        self.finished = trio.Event()
        """Set once the job is done, failed or cancelled."""
        self.listeners: list[Callable[[p.Progress], None]] = []
        self.interrupted_step: WorkerHandle | None = None
        self._last_event = -math.inf

    def info(self) -> p.JobInfo:
        """The job as ``memories jobs`` shows it."""
        return p.JobInfo(
            id=self.id,
            kind=self.kind,
            vault=self.vault_id,
            vault_name=self.vault_name,
            state=self.state,
            done=self.done,
            total=self.total,
            error=self.error,
            unit=self.unit,
        )

    def start_round(self) -> None:
        """A fresh budget (a background job runs several rounds)."""
        if self.budget is not None:
            self.deadline = trio.current_time() + self.budget
            self.scope.deadline = self.deadline + STEP_GRACE

    def cancel(self, code: str, reason: str | None = None) -> None:
        """Cancel the job's scope; ``code`` (``cancelled``, ``vault_locked``) becomes its error, and ``reason``
        (``"the daemon is stopping"``) starts its message when given. Idempotent: the first cancel wins."""
        if self.state in ("queued", "running"):
            if self.cancel_code is None:
                self.cancel_code = code
                self.cancel_reason = reason
            self.scope.cancel()

    def progress(self, done: int, total: int | None, unit: str, note: str | None = None) -> None:
        """Record progress; tell listeners at most every :data:`PROGRESS_INTERVAL` seconds, at the end, and
        whenever there is a ``note`` (a retry: never dropped)."""
        self.done, self.total, self.unit = done, total, unit
        now = time.monotonic()
        if note is None and done != total and now - self._last_event < PROGRESS_INTERVAL:
            return
        self._last_event = now
        event = p.Progress(job_id=self.id, done=done, total=total, unit=unit, note=note)
        for listener in self.listeners:
            listener(event)

    def stale(self) -> bool:
        """The job's vault has changed since the job captured its epoch (never, for a job without a vault)."""
        return False

    def check_budget(self, details: dict[str, Any] | None = None) -> None:
        """Raises ``budget_exceeded`` once the round's deadline has passed."""
        if self.deadline is not None and trio.current_time() >= self.deadline:
            raise MemoriesError(
                "budget_exceeded",
                f"the job ran past its budget of {self.budget:g} s; run it again to continue where it stopped",
                details,
            )

    async def call(
        self,
        worker: WorkerHandle,
        body: w.WorkerRequest[R],
        *,
        budget: bool = True,
        epoch: bool = True,
        on_progress: Callable[[w.WorkerProgress], None] | None = None,
    ) -> R:
        """One worker step: budget check before it, epoch check on its reply.

        Args:
            budget: check the budget first (off for storing results that are already paid for).
            epoch: drop the reply if the vault changed meanwhile (off for content-addressed results).

        Raises:
            MemoriesError: ``budget_exceeded`` or the worker's failure; StaleEpoch: the vault changed.
        """
        if budget:
            self.check_budget()
        try:
            reply = await worker.call(body, on_progress)
        except trio.Cancelled:
            self.interrupted_step = worker  # if the hard deadline cut it, that worker is stuck
            raise
        if epoch and self.stale():
            raise StaleEpoch
        return reply


class VaultJob(Job):
    """A job on one vault: it works at the vault's epoch captured when a round starts."""

    def __init__(
        self, job_id: int, kind: str, vault_id: str, vault_name: str, epochs: Epochs, budget: float | None
    ) -> None:
        super().__init__(job_id, kind, vault_id, budget, vault_name)
        self.vault_id: str = vault_id
        self._epochs = epochs
        self.epoch = epochs.get(vault_id)

    def start_round(self) -> None:
        """Capture the vault epoch and a fresh budget."""
        self.epoch = self._epochs.get(self.vault_id)
        super().start_round()

    def adopt_current_epoch(self) -> None:
        """Take the vault's current epoch as the job's own (after the job's own writes, such as an ingest's)."""
        self.epoch = self._epochs.get(self.vault_id)

    def stale(self) -> bool:
        return self.epoch != self._epochs.get(self.vault_id)


class JobManager:
    """The queue: at most :data:`MAX_RUNNING` jobs run at once, the others wait in ``queued``."""

    def __init__(self, epochs: Epochs, budget: Callable[[], float]) -> None:
        self._epochs = epochs
        self._budget = budget
        self._ids = itertools.count(1)
        self._slots = trio.CapacityLimiter(MAX_RUNNING)
        self._active: dict[int, Job] = {}
        self._history: deque[Job] = deque(maxlen=HISTORY)

    def new_job(self, kind: str, vault_id: str, vault_name: str) -> VaultJob:
        """A budgeted job on one vault (its name is kept for ``memories jobs``)."""
        job = VaultJob(next(self._ids), kind, vault_id, vault_name, self._epochs, self._budget())
        self._active[job.id] = job
        return job

    def new_unbudgeted_job(self, kind: str) -> Job:
        """A job that touches no vault and has no job budget (model install: each file has its own timeout)."""
        job = Job(next(self._ids), kind, None, None)
        self._active[job.id] = job
        return job

    async def run(self, job: J, work: Callable[[J], Awaitable[T]]) -> T:
        """Run ``work`` as ``job`` to its end; its result, or the job's error raised as MemoriesError."""
        try:
            with job.scope:
                async with self._slots:
                    job.state = "running"
                    for _ in range(MAX_RERUNS + 1):
                        job.start_round()
                        try:
                            result = await work(job)
                        except StaleEpoch:
                            log.info("job %s: vault changed during the run; running again", job.id)
                            continue
                        self._finish(job, "done", None)
                        return result
                    raise MemoriesError("vault_changed", "the vault kept changing while the job ran; try again")
            raise self._cancelled(job)
        except MemoriesError as exc:
            self._finish(job, "cancelled" if exc.code == "cancelled" else "failed", exc)
            raise
        except BaseException:
            self._finish(job, "failed", MemoriesError("internal_error", "the job failed unexpectedly"))
            raise

    def cancel(self, job_id: int, code: str = "cancelled") -> Job:
        """Cancel an active job; raises ``job_not_found`` for an unknown or finished job."""
        job = self._active.get(job_id)
        if job is None:
            raise MemoriesError("job_not_found", f"no queued or running job has the id {job_id}")
        job.cancel(code)
        return job

    def cancel_all(self, code: str, reason: str) -> None:
        """Cancel every active job, vault or not (the daemon is stopping), with ``reason`` in its message."""
        for job in list(self._active.values()):
            job.cancel(code, reason)

    async def wait_idle(self) -> None:
        """Wait until every job active now has finished (each has its own event; new jobs are not waited for)."""
        for job in list(self._active.values()):
            await job.finished.wait()

    def cancel_where(self, code: str, vault_id: str | None = None) -> None:
        """Cancel every active job (of one vault when ``vault_id`` is given, else of every vault)."""
        for job in list(self._active.values()):
            if job.vault_id is not None and vault_id in (None, job.vault_id):
                job.cancel(code)

    def listing(self) -> list[p.JobInfo]:
        return [j.info() for j in self._history] + [j.info() for j in self._active.values()]

    def counts(self) -> tuple[int, int]:
        """``(queued, running)``."""
        states = [j.state for j in self._active.values()]
        return states.count("queued"), states.count("running")

    def running(self) -> bool:
        return bool(self._active)

    @staticmethod
    def _cancelled(job: Job) -> MemoriesError:
        """The error of a job whose scope was cancelled, saying how far it got (work done so far is kept)."""
        details = {"done": job.done, "total": job.total, "unit": job.unit}
        progress = f" after {job.done} of {job.total} {job.unit}" if job.unit else ""
        if job.cancel_code == "vault_locked":
            return MemoriesError("vault_locked", f"the home was locked while the job ran{progress}", details)
        if job.cancel_code is None:  # the hard deadline of the cancel scope: a step that never returned
            if job.interrupted_step is not None:
                stuck = job.interrupted_step
                log.warning("job %s: the %s worker is stuck in a step; restarting it", job.id, stuck.name)
                stuck.kill()
            message = f"a step ran far past the job's budget of {job.budget:g} s{progress}"
            return MemoriesError("budget_exceeded", message, details)
        reason = f"{job.cancel_reason}; " if job.cancel_reason else ""
        return MemoriesError(job.cancel_code, f"{reason}job {job.id} was cancelled{progress}", details)

    def _finish(self, job: Job, state: p.JobState, error: MemoriesError | None) -> None:
        if job.id not in self._active:
            return
        job.state = state
        job.error = p.ErrorInfo(code=error.code, message=error.message) if error else None
        del self._active[job.id]
        self._history.append(job)
        job.finished.set()
