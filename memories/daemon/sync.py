"""``sync init|join|push|pull|status`` in the daemon, and its pulls and pushes on a timer (``[sync]
interval_seconds``).

Push and pull are jobs (shown in ``memories jobs``); their file and store work runs in the store's thread
(:class:`memories.sync.engine.Sync`). A pull that changed a vault bumps its epoch, which invalidates its cached
index and makes the late results of jobs that started before it stale (they are dropped and run again; R-19,
R-45), then starts a background index job with no client that brings the index up to date, and the embeddings
when the daemon embeds the vault by itself (:meth:`Indexing.start_reindex`, ``[rag] auto_index``; otherwise the
BM25 index alone). A pull that changed nothing bumps nothing and starts nothing.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

import trio

from memories import protocol as p
from memories.config import Config, weak_kdf_warning
from memories.daemon.core.context import Handlers, RequestContext
from memories.daemon.core.jobs import Epochs, JobManager, VaultJob
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.index.feed import IndexFeed
from memories.daemon.index.indexing import Indexing
from memories.errors import MemoriesError
from memories.logs import log_failure
from memories.sync.engine import Sync, SyncState
from memories.vault.store import VaultRow

log = logging.getLogger("memories.sync")


class SyncRequests:
    """The sync requests of the daemon; every one needs the home unlocked.

    Args:
        store: the store gate; jobs: the job queue; epochs: bumped by a pull that changed a vault;
        index_feed: told which records such a pull changed (a chosen head may change at the same depth);
        indexing: starts the background index job after such a pull;
        config: ``[crypto]`` (the sync passphrase's cost) and ``[sync]``; home: the home folder;
        engine: the sync of the home's vaults (blocking: run in the store's thread).
    """

    def __init__(
        self,
        store: StoreGate,
        jobs: JobManager,
        epochs: Epochs,
        index_feed: IndexFeed,
        indexing: Indexing,
        config: Config,
        engine: Sync,
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._epochs = epochs
        self._index_feed = index_feed
        self._indexing = indexing
        self._config = config
        self.engine = engine

    def handlers(self) -> Handlers:
        """The requests this module answers."""
        return {
            p.SyncInit: self._init,
            p.SyncJoin: self._join,
            p.SyncPush: self._push,
            p.SyncPull: self._pull,
            p.SyncStatus: self._status,
        }

    async def _init(self, request: p.SyncInit, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve_unlocked(request.vault)
        init = self.engine.init
        ctx.warnings.extend(
            await self._store.run(init, vault, Path(request.folder), request.passphrase, self._config.crypto)
        )
        weak = weak_kdf_warning(self._config.crypto, "the daemon's config")
        if weak:
            ctx.warn(weak)
        return _report(vault, await self._store.run(self.engine.state, vault))

    async def _join(self, request: p.SyncJoin, ctx: RequestContext) -> p.Result:
        self._store.check_unlocked()
        join = self.engine.join
        vault, warnings = await self._store.run(join, Path(request.folder), request.name, request.passphrase)
        ctx.warnings.extend(warnings)
        return p.SyncJoined(id=vault.id, name=vault.name)

    async def _push(self, request: p.SyncPush, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve_unlocked(request.vault)
        return _report(vault, await self.push(vault, ctx))

    async def _pull(self, request: p.SyncPull, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve_unlocked(request.vault)
        return _report(vault, await self.pull(vault, ctx))

    async def _status(self, request: p.SyncStatus, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve_unlocked(request.vault)
        return _report(vault, await self._store.run(self.engine.state, vault))

    async def push(self, vault: VaultRow, ctx: RequestContext) -> SyncState:
        """Push as a job (the timer's context is attached to nothing)."""
        job = self._jobs.new_job("sync push", vault.id, vault.name, epoch_checked=False)
        job.background = ctx.detached
        ctx.attach(job)

        async def work(job: VaultJob) -> SyncState:
            return await self._store.run(self.engine.push, vault)

        return await self._jobs.run(job, work)

    async def pull(self, vault: VaultRow, ctx: RequestContext) -> SyncState:
        """Pull as a job; when it changed the vault, bump its epoch and start a background index job."""
        job = self._jobs.new_job("sync pull", vault.id, vault.name, epoch_checked=False)
        job.background = ctx.detached
        ctx.attach(job)

        async def work(job: VaultJob) -> tuple[SyncState, list[str]]:
            return await self._store.run(self.engine.pull, vault)

        state, changed = await self._jobs.run(job, work)
        if changed:
            self._index_feed.resend(vault, changed)
            self._epochs.bump(vault.id)
            await self._indexing.start_reindex(vault, refresh=True)
        return state

    async def folders(self) -> list[str]:
        """The sync folder of every synced vault (resolved paths)."""

        def folders() -> list[str]:
            return [os.path.realpath(self.engine.state(vault).folder) for vault in self.engine.synced()]

        return await self._store.run(folders)

    async def every_interval(self) -> None:
        """While unlocked, pull then push every synced vault each ``[sync] interval_seconds`` (off when unset).
        Nothing a round meets stops the timer (nor the daemon): see :meth:`timed_round`."""
        seconds = self._config.sync.interval_seconds
        if seconds is None:
            return
        while True:
            await trio.sleep(seconds)
            if not self._store.locked:
                await self.timed_round()

    async def timed_round(self) -> None:
        """Pull then push every synced vault. A vault's failure (its folder's file system, a store error, a bug) is
        logged and kept in its sync state for ``sync status``; the other vaults go on."""
        try:
            vaults = await self._store.run(self.engine.synced)
        except Exception as exc:
            log_failure(log, "the timed sync could not list the synced vaults", exc)
            return
        for vault in vaults:
            try:
                await self.pull(vault, RequestContext())
                await self.push(vault, RequestContext())
            except MemoriesError as exc:
                log.warning("the timed sync of vault %s failed: %s: %s", vault.id, exc.code, exc.message)
                if exc.code not in ("vault_locked", "cancelled"):  # a lock or a stop cut it: nothing to show
                    await self._record(vault, exc)
            except Exception as exc:
                log_failure(log, f"the timed sync of vault {vault.id} failed unexpectedly", exc)
                await self._record(vault, MemoriesError("internal_error", f"{type(exc).__name__}; see the daemon log"))

    async def _record(self, vault: VaultRow, error: MemoriesError) -> None:
        try:
            await self._store.run(self.engine.record_timer_error, vault, error)
        except Exception as exc:
            log_failure(log, f"the failure of the timed sync of vault {vault.id} could not be kept", exc)


def crash_after(payloads: int | None) -> Callable[[], None] | None:
    """Test hooks only (``kill_after_payloads``): a hook for the sync engine that kills the daemon (SIGKILL) after
    it wrote this many payloads, a crash between two payloads of a push; ``None`` without the hook."""
    if payloads is None:
        return None
    written = 0

    def count_write() -> None:
        nonlocal written
        written += 1
        if written >= payloads:
            os.kill(os.getpid(), signal.SIGKILL)

    return count_write


def _report(vault: VaultRow, state: SyncState) -> p.SyncReport:
    return p.SyncReport(
        vault=vault.name,
        folder=state.folder,
        device=state.device,
        last_push=state.last_push,
        last_pull=state.last_pull,
        imported=state.imported,
        pushed=state.pushed,
        conflicts=state.conflicts,
        bad=[p.SyncBadFile(file=b.file, reason=b.reason, pending=b.pending) for b in state.bad],
        skipped=[p.SyncSkipped(file=name, why=why) for name, why in state.skipped],
        not_local=state.not_local,
        waiting=state.waiting,
        timer_error=(
            None
            if state.timer_error is None
            else p.SyncTimerError(
                code=state.timer_error.code, message=state.timer_error.message, at=state.timer_error.at
            )
        ),
    )
