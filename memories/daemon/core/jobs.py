"""Jobs: the one gate every piece of work that needs workers passes (R-27, R-44, R-45).

::

    queued ──(a running slot frees)──▶ running ──(acceptance check)──▶ done
                                          │
                                          └──▶ failed(code) | cancelled      (the result, if any, is dropped)

- **One cancel scope per job, for its whole budget.** A job's deadline is set once, when it starts running:
  ``job_budget_seconds`` for the whole job, whatever reruns it needs. Only a ``--background`` job asks for fresh
  rounds, explicitly (:meth:`Job.fresh_round`). Before every worker step the budget is checked, so no step starts
  after the deadline; a step already in flight may finish and store its batch within :data:`GRACE`, the only grace
  there is, after which the scope cuts it (and the stuck worker is restarted).
- **Cuts.** ``jobs cancel``, lock, a client hanging up, a change of the vault's device-only policy
  (``policy_changed``, :meth:`JobManager.cut_vault`) and (with grants) revoke and expiry call :meth:`Job.cut` with
  the error the job ends with: the scope is cancelled at once, with no grace, and a worker reply still in flight is
  dropped.
- **Translation at the boundary.** :meth:`JobManager.run` is the one place where a cancelled scope becomes an
  error: the cut's error (``cancelled``, ``vault_locked``, ``vault_changed``, ``policy_changed``,
  ``grant_revoked``, ``grant_expired``), or ``budget_exceeded`` for the deadline; ``details`` say how far the job
  got and carry the job's own :attr:`Job.details` (the cards an ingest already stored).
- **One acceptance check.** Just before a result is accepted: no cut requested, the home not locked, the job's
  guards (a grant's auth epoch and expiry, added by the grant layer) and, for epoch-checked jobs (search, ask),
  the vault epoch. A result that fails it is dropped and counted (``dropped_results`` in ``daemon status``); a
  stale epoch runs the job again within its budget.
- **Epochs** are captured when a job is created and re-captured only through :meth:`VaultJob.adopt_current_epoch`:
  by a rerun after a stale epoch, by a job adopting its own writes (ingest), and by content-addressed work that
  stays valid across unrelated edits (embedding).
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
from memories.daemon.core.workers import WorkerHandle
from memories.errors import MemoriesError

log = logging.getLogger("memories.jobs")

T = TypeVar("T")
R = TypeVar("R")
J = TypeVar("J", bound="Job")

GRACE = 30.0
"""Seconds a step in flight at the budget deadline may still run (and store its batch) before the cancel scope cuts
it. A step running that far past the budget means a stuck worker; it is restarted."""

PROGRESS_INTERVAL = 0.1
"""Seconds between progress events sent to a client."""

RATE_WINDOW = 60.0
"""Seconds of progress a job's rate is measured over (``memories jobs``, ``rag status``): long enough to span
several embedding batches, short enough to follow a change of pace (a search taking the cores)."""

MAX_RUNNING = 4
HISTORY = 50

Guard = Callable[[], MemoriesError | None]
"""A condition checked when a job's result is about to be accepted: the error the job ends with instead, or
``None``. The grant layer adds one per job run for an AI client (auth epoch and expiry)."""


class StaleEpoch(Exception):
    """The vault changed since the job captured its epoch: the run's work is from an older state."""


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
    vault (model install); ``budget`` ``None`` for jobs bounded otherwise (model install: per file).

    Attributes:
        details: facts the job's work records as it goes (the cards an ingest stored), added to the ``details``
            of the error the job ends with.
        guards: conditions of the acceptance check besides cut, lock and epoch (see :data:`Guard`).
        finished: set once the job is done, failed or cancelled.
        recorded: ``False``: once done, the job is left out of the history (``memories jobs``): a watched folder's
            background scan that found nothing to do (one every 5 minutes while idle) would push out every other.
    """

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
        self.finished = trio.Event()
        self.listeners: list[Callable[[p.Progress], None]] = []
        self.details: dict[str, Any] = {}
        self.guards: list[Guard] = []
        self.interrupted_step: WorkerHandle | None = None
        self.background = False
        self.recorded = True
        self._cut: MemoriesError | None = None
        self._last_event = -math.inf
        self._samples: deque[tuple[float, int]] = deque()

    def info(self) -> p.JobInfo:
        """The job as ``memories jobs`` shows it: ``cancelling`` once it is cut while a step that cannot be
        abandoned (a store call) is still ending."""
        return p.JobInfo(
            id=self.id,
            kind=self.kind,
            vault=self.vault_id,
            vault_name=self.vault_name,
            state="cancelling" if self._cut is not None and self.active else self.state,
            done=self.done,
            total=self.total,
            error=self.error,
            unit=self.unit,
            background=self.background,
            rate=self.rate(),
            seconds_left=self.seconds_left(),
        )

    def rate(self) -> float | None:
        """``unit`` per second over the last :data:`RATE_WINDOW` seconds of progress (``None`` until two reports
        a second or more apart, or while the job is not running)."""
        if self.state != "running" or len(self._samples) < 2:
            return None
        (first, start), (last, end) = self._samples[0], self._samples[-1]
        return (end - start) / (last - first) if last - first >= 1.0 else None

    def seconds_left(self) -> float | None:
        """Seconds until ``done`` reaches ``total`` at :meth:`rate` (``None`` when either is not known)."""
        rate = self.rate()
        if not rate or self.total is None:
            return None
        return max(self.total - self.done, 0) / rate

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")

    def fresh_round(self) -> None:
        """Start a fresh budget (the job's first, when it starts running; later only a ``--background`` job asks for
        another, explicitly)."""
        if self.budget is not None:
            self.deadline = trio.current_time() + self.budget
            self.scope.deadline = self.deadline + GRACE

    def cut(self, error: MemoriesError) -> None:
        """Stop the job now, with no grace: its scope is cancelled and it ends with ``error`` (the first cut wins).
        For ``jobs cancel``, lock, a client hanging up, the daemon stopping, and a grant's revocation or expiry.
        Idempotent."""
        if self.active:
            if self._cut is None:
                self._cut = error
            self.scope.cancel()

    def cancel(self, code: str = "cancelled", reason: str | None = None) -> None:
        """:meth:`cut` with the stable message of ``code`` (``cancelled``, ``vault_locked``, ``vault_changed``);
        ``reason`` (``"the daemon is stopping"``) starts the message when given."""
        message = _CUT_MESSAGES.get(code, f"job {self.id} was stopped")
        self.cut(MemoriesError(code, f"{reason}; {message}" if reason else message))

    def progress(self, done: int, total: int | None, unit: str, note: str | None = None) -> None:
        """Record progress; tell listeners at most every :data:`PROGRESS_INTERVAL` seconds, at the end, and
        whenever there is a ``note`` (a retry: never dropped)."""
        if unit != self.unit or done < self.done:  # another kind of progress, or a count started again
            self._samples.clear()
        self.done, self.total, self.unit = done, total, unit
        now = time.monotonic()
        if not self._samples or now - self._samples[-1][0] >= 0.5:  # a few samples a second are plenty
            self._samples.append((now, done))
        while now - self._samples[0][0] > RATE_WINDOW:
            self._samples.popleft()
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
        """Raises ``budget_exceeded`` once the deadline has passed: no step starts after it."""
        if self.deadline is not None and trio.current_time() >= self.deadline:
            raise MemoriesError(
                "budget_exceeded",
                f"the job ran past its budget of {self.budget:g} s; run it again to continue where it stopped",
                {**self.details, **(details or {})},
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
            budget: check the budget first (off for storing results that are already paid for: that is the grace).
            epoch: drop the reply if the vault changed meanwhile (off for content-addressed results).

        Raises:
            MemoriesError: ``budget_exceeded`` or the worker's failure; StaleEpoch: the vault changed.
        """
        if budget:
            self.check_budget()
        try:
            reply = await worker.call(body, on_progress)
        except trio.Cancelled:
            self.interrupted_step = worker  # if the deadline cut it, that worker is stuck
            raise
        if epoch and self.stale():
            raise StaleEpoch
        return reply

    def stopped(self) -> MemoriesError:
        """The error of a job whose scope was cancelled: the cut's, or ``budget_exceeded`` for the deadline, with
        how far the job got (work done so far is kept) and the job's :attr:`details`."""
        details = {"done": self.done, "total": self.total, "unit": self.unit, **self.details}
        of_total = f" of {self.total}" if self.total is not None else ""
        progress = f" after {self.done}{of_total} {self.unit}" if self.unit else ""
        if self._cut is not None:
            return MemoriesError(self._cut.code, self._cut.message + progress, {**details, **self._cut.details})
        if self.interrupted_step is not None:
            stuck = self.interrupted_step
            log.warning("job %s: the %s worker is stuck in a step; restarting it", self.id, stuck.name)
            stuck.kill()
        message = f"a step ran far past the job's budget of {self.budget:g} s{progress}"
        return MemoriesError("budget_exceeded", message, details)


_CUT_MESSAGES = {
    "cancelled": "the job was cancelled",
    "vault_locked": "the home was locked while the job ran",
    "vault_changed": "the vault changed while the job ran; try again",
    "policy_changed": "the vault's device-only policy changed while the job ran; run it again",
    "grant_revoked": "the grant was revoked while the call ran",
}


class VaultJob(Job):
    """A budgeted job on one vault, at the vault epoch captured when it was created.

    ``epoch_checked`` jobs (search, ask) deliver a result only from the epoch current at acceptance; the others
    (ingest, index) are checked for cut and lock only, since their work stays valid across edits.
    """

    def __init__(
        self,
        job_id: int,
        kind: str,
        vault_id: str,
        vault_name: str,
        epochs: Epochs,
        budget: float,
        *,
        epoch_checked: bool,
    ) -> None:
        super().__init__(job_id, kind, vault_id, budget, vault_name)
        self.vault_id: str = vault_id
        self.epoch_checked = epoch_checked
        self._epochs = epochs
        self.epoch = epochs.get(vault_id)

    def adopt_current_epoch(self) -> None:
        """The one way to re-capture the epoch: a rerun after a stale epoch, a job adopting its own writes
        (ingest), or content-addressed work that stays valid across unrelated edits (embedding)."""
        self.epoch = self._epochs.get(self.vault_id)

    def fresh_round(self) -> None:
        """A fresh budget, at the vault's current epoch."""
        self.adopt_current_epoch()
        super().fresh_round()

    def stale(self) -> bool:
        return self.epoch != self._epochs.get(self.vault_id)


class JobManager:
    """The queue and the gate: at most :data:`MAX_RUNNING` jobs run at once, the others wait in ``queued``.

    Args:
        epochs: the vault epochs.
        budget: the current ``job_budget_seconds``.
        locked: whether the home is locked now (the acceptance check of vault jobs).

    Attributes:
        dropped_results: results computed but not delivered: the job was cut, the home locked, a guard failed or
            the vault changed at acceptance (``dropped_results`` of ``daemon status``).
    """

    def __init__(self, epochs: Epochs, budget: Callable[[], float], locked: Callable[[], bool]) -> None:
        self._epochs = epochs
        self._budget = budget
        self._locked = locked
        self._ids = itertools.count(1)
        self._slots = trio.CapacityLimiter(MAX_RUNNING)
        self._active: dict[int, Job] = {}
        self._history: deque[Job] = deque(maxlen=HISTORY)
        self.dropped_results = 0

    def new_job(self, kind: str, vault_id: str, vault_name: str, *, epoch_checked: bool) -> VaultJob:
        """A job on one vault with the job budget; its epoch is captured now (its name is kept for
        ``memories jobs``)."""
        job = VaultJob(
            next(self._ids), kind, vault_id, vault_name, self._epochs, self._budget(), epoch_checked=epoch_checked
        )
        self._active[job.id] = job
        return job

    def new_unbudgeted_job(self, kind: str) -> Job:
        """A job that touches no vault and has no job budget (model install: each file has its own timeout)."""
        job = Job(next(self._ids), kind, None, None)
        self._active[job.id] = job
        return job

    async def run(self, job: J, work: Callable[[J], Awaitable[T]]) -> T:
        """Run ``work`` as ``job`` to its end: its result once accepted, or the job's error raised as MemoriesError.

        A run whose result meets a stale epoch (on a worker reply, or at acceptance) is run again within the same
        budget.
        """
        try:
            with job.scope:
                async with self._slots:
                    job.state = "running"
                    job.fresh_round()
                    while True:
                        try:
                            result = await work(job)
                            self._accept(job)
                        except StaleEpoch:
                            job.check_budget()
                            log.info("job %s: the vault changed during the run; running again", job.id)
                            if isinstance(job, VaultJob):
                                job.adopt_current_epoch()
                            continue
                        self._finish(job, "done", None)
                        return result
            raise job.stopped()  # the scope swallowed the cancellation of a cut or of the deadline
        except MemoriesError as exc:
            if job._cut is not None and exc.code != job._cut.code:
                # A failure that followed a cut is its consequence (a step sent to the worker lock killed): the job
                # ends with the cut's error, as it would had the step been cancelled.
                exc = job.stopped()
            self._finish(job, "cancelled" if exc.code == "cancelled" else "failed", exc)
            raise exc from None
        except BaseException:
            self._finish(job, "failed", MemoriesError("internal_error", "the job failed unexpectedly"))
            raise

    def _accept(self, job: Job) -> None:
        """The acceptance check, just before a result is delivered.

        Raises:
            MemoriesError: the cut's error (cancel, lock), ``vault_locked``, or a guard's error; StaleEpoch: an
                epoch-checked job's vault changed.
        """
        problem: MemoriesError | None = None
        if job.scope.cancel_called:
            problem = job.stopped()
        elif job.vault_id is not None and self._locked():
            problem = MemoriesError("vault_locked", "the home was locked while the job ran")
        else:
            problem = next((error for guard in job.guards if (error := guard()) is not None), None)
        if problem is None and isinstance(job, VaultJob) and job.epoch_checked and job.stale():
            self.dropped_results += 1
            raise StaleEpoch
        if problem is not None:
            self.dropped_results += 1
            log.info("job %s: result dropped at acceptance (%s)", job.id, problem.code)
            raise problem

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
        """Cut every active vault job (of one vault when ``vault_id`` is given) with ``code``."""
        for job in list(self._active.values()):
            if job.vault_id is not None and vault_id in (None, job.vault_id):
                job.cancel(code)

    async def cut_vault(self, vault_id: str, code: str) -> None:
        """Cut every active job of the vault with ``code`` (``policy_changed``: what a job was allowed to do when it
        started no longer holds) and wait until each has ended, so no step of them runs once this returns (a store
        call in its thread finishes first; a worker step in flight is abandoned and its reply dropped)."""
        cut = [job for job in self._active.values() if job.vault_id == vault_id]
        for job in cut:
            job.cancel(code)
        for job in cut:
            await job.finished.wait()

    def active_jobs(self, kind: str, vault_id: str) -> list[Job]:
        """The queued and running jobs of ``kind`` on the vault."""
        return [j for j in self._active.values() if j.kind == kind and j.vault_id == vault_id]

    def listing(self) -> list[p.JobInfo]:
        return [j.info() for j in self._history] + [j.info() for j in self._active.values()]

    def counts(self) -> tuple[int, int]:
        """``(queued, running)``."""
        states = [j.state for j in self._active.values()]
        return states.count("queued"), states.count("running")

    def running(self) -> bool:
        """Whether a job someone waits for is queued or running. The daemon's own background jobs do not count:
        they must never keep the home from its idle auto-lock (they are cut by it, and their work is kept)."""
        return any(not job.background for job in self._active.values())

    def _finish(self, job: Job, state: p.JobState, error: MemoriesError | None) -> None:
        if job.id not in self._active:
            return
        job.state = state
        job.error = p.ErrorInfo(code=error.code, message=error.message) if error else None
        del self._active[job.id]
        if job.recorded or state != "done":
            self._history.append(job)
        job.finished.set()
