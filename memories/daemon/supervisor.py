"""The supervisor: the one process that holds keys, owns the store and the job queue, and routes work to workers.

This module is the composition root: :class:`Daemon` builds every part from what it uses (no part imports this
module or reaches into another), runs their lifecycles, dispatches requests to the handler modules (each exports
the request types it answers) and locks the home::

    Daemon ─┬─ StoreGate(RecordStore)                     one store call at a time, in a thread
            ├─ JobManager(Epochs)                           the gate: budget, cuts, acceptance
            ├─ WorkerSet(spawn)                              index, embedding, remote
            ├─ FileWatch(config, Models)                     restart-needed warnings, off the event loop
            ├─ Models(rag, embedding, remote, jobs)          the local model: install, load
            ├─ EmbeddingBackend(Models | [rag.embedding], remote)
            ├─ KeptVectors(store, index)                     vectors sealed in the home
            ├─ IndexSnapshots(store, index, epochs)            lexical caches sealed in the home
            ├─ IndexFeed(store, index, kept, snapshots)
            ├─ Indexing(store, jobs, index_feed, backend, index, kept)
            ├─ RecentVaults(store), WarmUp(store, indexing, backend)   after unlock: warm caches, embed
            ├─ SearchEmbedding(backend, index_feed, indexing, recent)  default mode, embedding of searches
            ├─ Retrieval(store, jobs, index_feed, backend, search_embedding, index, remote)
            ├─ IndexStatus(store, jobs, index_feed, backend, index, kept, indexing)   rag status
            ├─ Asking(store, jobs, retrieval, remote)        rag ask
            ├─ Bench(store, jobs, index_feed, backend, retrieval)   rag bench
            ├─ Ingest(store, jobs, index_feed, epochs, index, indexing.start_reindex)   notes parsed in the index worker
            ├─ FolderWatches(store, jobs, epochs, ingest, index_feed, indexing)   rag watch; active while unlocked
            ├─ Records(store, epochs, jobs, grants, index, indexing.start_reindex)
            ├─ Tools(store, grants, retrieval, asking, index_status)   MCP calls through a grant
            ├─ GrantRequests(store, grants, tools)           grant create|list|revoke
            └─ SyncRequests(store, jobs, epochs, index_feed, indexing, Sync(RecordStore))   sync init|join|push|pull|
                                                             status, the sync timer

``Daemon.serve`` runs, in one trio nursery: the client socket, the three workers (each supervised and restarted on a
crash), the file watch, the idle auto-lock timer, the sync timer and the signal handler.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from memories import protocol as p
from memories.config import Config, weak_kdf_warning
from memories.daemon.core.context import Handlers, RequestContext
from memories.daemon.core.jobs import Epochs, JobManager
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.core.workers import Spawn, WorkerSet, process_spawner
from memories.daemon.grants.registry import Grants
from memories.daemon.grants.requests import GrantRequests
from memories.daemon.grants.tools import Tools
from memories.daemon.index.backends import embedding_backend
from memories.daemon.index.feed import IndexFeed
from memories.daemon.index.indexing import Indexing
from memories.daemon.index.kept_vectors import KeptVectors
from memories.daemon.index.models import Models, model_manifest
from memories.daemon.index.snapshots import IndexSnapshots
from memories.daemon.index.status import IndexStatus
from memories.daemon.index.warm_up import RecentVaults, WarmUp
from memories.daemon.ingest.folder_watch import FolderWatches
from memories.daemon.ingest.job import Ingest
from memories.daemon.records import Records
from memories.daemon.restart_watch import FileWatch
from memories.daemon.search.ask import Asking
from memories.daemon.search.bench import Bench
from memories.daemon.search.embedding import SearchEmbedding
from memories.daemon.search.retrieval import Retrieval
from memories.daemon.server import Answering, Connection, serve_socket
from memories.daemon.sync import SyncRequests, crash_after
from memories.errors import MemoriesError
from memories.hardening import dumpable
from memories.models.telemetry import TELEMETRY_ENVIRONMENT
from memories.paths import Home, ensure_socket_folder
from memories.sync.engine import Sync
from memories.testing import TestHooks, grant_clock
from memories.vault.record_store import RecordStore
from memories.vault.store import FORMAT

log = logging.getLogger("memories.daemon")

_ALWAYS_ALLOWED = (p.Status, p.Stop)

STOP_GRACE_SECONDS = 5.0
"""How long a stopping daemon waits for its cancelled jobs' answers to reach their clients."""

LOCK_FLUSH_SECONDS = 2.0
"""How long a lock may wait for the index snapshots that are due (:meth:`IndexSnapshots.flush`) before it drops
the keys: a write cut short leaves the older snapshot, which the next unlock discards and rebuilds."""

CANCEL_WAIT_SECONDS = 5.0
"""How long ``jobs cancel`` waits for the job to end before it answers with the job's state."""


PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
"""Where a proxy's credentials may be (``config.toml`` never holds them): for the remote worker only."""


def worker_environments(config: Config, environ: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """Each worker's environment: the daemon's (``environ``, default ``os.environ``), unbuffered; the embedding
    worker's with ONNX Runtime telemetry off. The variables that hold secrets — every ``api_key_env`` the config
    names and the proxy variables — reach only the remote worker, the one that calls providers: the index and
    embedding workers are handed note text and run parsers and a model on it, and need no key."""
    env = {**(os.environ if environ is None else environ), "PYTHONUNBUFFERED": "1"}
    rag = config.rag
    secrets = {e.api_key_env for e in (rag.embedding, rag.generation, rag.rerank) if e is not None and e.api_key_env}
    local = {name: value for name, value in env.items() if name not in secrets and name not in PROXY_VARIABLES}
    return {"index": local, "embedding": {**local, **TELEMETRY_ENVIRONMENT}, "remote": env}


def _as_declared(request: p.Request, result: p.Result) -> p.Result:
    """``result``, checked to be of the type ``request`` declares (a client decodes it as that type).

    Raises:
        MemoriesError: ``internal_error`` for a result of another type (a bug).
    """
    declared = isinstance(result, request.reply_type())
    if not declared:
        raise MemoriesError("internal_error", f"{type(request).__name__} was answered with a {type(result).__name__}")
    return result


class Daemon:
    """Everything the supervisor holds. Create it, then ``trio.run(daemon.serve)``.

    Args:
        home: the home it serves; config: its settings; hooks: the test hooks (``None`` outside the test suite).
        spawn: starts the workers (default: child processes logging to ``log_file``; tests pass a fake).
    """

    def __init__(
        self, home: Home, config: Config, hooks: TestHooks | None, log_file: Any, spawn: Spawn | None = None
    ) -> None:
        self.home = home
        self.config = config
        self.hooks = hooks
        self.started = time.time()
        self.record_store = records = RecordStore(Path(home.db_path))
        self.store = StoreGate(records)
        self.grants = Grants(records.store, records.keys, grant_clock(hooks))
        self.epochs = Epochs()
        self.jobs = JobManager(self.epochs, lambda: self.config.daemon.job_budget_seconds, lambda: self.store.locked)
        self.workers = WorkerSet(spawn or process_spawner(worker_environments(config), log_file, home.root))
        rag = config.rag
        manifest = model_manifest(hooks.model_manifest if hooks else None)
        self.models = Models(
            rag, home.default_model_dir, manifest, self.workers.embedding, self.workers.remote, self.jobs
        )
        budget = config.daemon.job_budget_seconds
        self.embedding = embedding_backend(rag, self.models, self.workers.remote, budget)
        self.watch = FileWatch(home.config_path, self.models)
        store, jobs, index, backend = self.store, self.jobs, self.workers.index, self.embedding
        self.kept = KeptVectors(store, index, rag.keep_vectors)
        self.snapshots = IndexSnapshots(store, index, self.epochs, rag.keep_index)
        self.index_feed = IndexFeed(store, index, self.kept, self.snapshots, rag.index_limits())
        cut_after = hooks.cut_after_batches if hooks else None
        start_soon = self.start_soon
        self.indexing = Indexing(store, jobs, self.index_feed, backend, index, self.kept, rag, cut_after, start_soon)
        self.recent = RecentVaults(store)
        self.warm_up = WarmUp(store, self.indexing, backend, rag.auto_index)
        self.models.on_installed = lambda: self.start_soon(self.warm_up.catch_up)
        search = SearchEmbedding(backend, self.index_feed, self.indexing, self.recent)
        self.retrieval = Retrieval(
            store, jobs, self.index_feed, backend, search, index, self.workers.remote, rag, budget
        )
        self.asking = Asking(self.store, self.jobs, self.retrieval, self.workers.remote, rag, home.config_path, budget)
        self.bench = Bench(self.store, self.jobs, self.index_feed, self.embedding, self.retrieval)
        changed = self.indexing.start_reindex
        self.ingest = Ingest(self.store, self.jobs, self.index_feed, self.epochs, self.workers.index, changed)
        self.records = Records(self.store, self.epochs, self.jobs, self.grants, self.workers.index, changed)
        self.index_status = IndexStatus(store, jobs, self.index_feed, backend, index, self.kept, self.indexing)
        self.tools = Tools(self.store, self.grants, self.retrieval, self.asking, self.index_status)
        between_writes = crash_after(hooks.kill_after_payloads if hooks else None)
        sync = Sync(records, Path(home.root), between_writes)
        self.sync = SyncRequests(self.store, self.jobs, self.epochs, self.index_feed, self.indexing, config, sync)
        parts = (self.store, self.jobs, self.epochs, self.ingest, self.index_feed, self.indexing, start_soon, home.root)
        self.folders = FolderWatches(*parts, self.sync.folders, hooks)
        self._handlers: Handlers = {
            p.Stop: self._stop,
            p.Init: self._init,
            p.Unlock: self._unlock,
            p.Lock: self._lock,
            p.Jobs: self._jobs,
            p.JobCancel: self._job_cancel,
            **self.records.handlers(),
            **self.retrieval.handlers(),
            **self.index_status.handlers(),
            **self.asking.handlers(),
            **self.bench.handlers(),
            **self.ingest.handlers(),
            **self.folders.handlers(self._status, self.index_status.status),  # the two statuses show the watches
            **self.indexing.handlers(),
            **self.models.handlers(),
            **self.tools.handlers(),
            **GrantRequests(self.store, self.grants, self.tools).handlers(),
            **self.sync.handlers(),
        }
        self._answering = Answering()
        self._last_activity = 0.0  # trio clock, set when serving starts
        self._nursery: trio.Nursery | None = None

    # -- running -------------------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Run until ``daemon stop``, SIGTERM or SIGINT."""
        ensure_socket_folder(self.home)
        try:
            async with trio.open_nursery() as nursery:
                await self.start(nursery)
                nursery.start_soon(self._on_signals)
                await nursery.start(
                    serve_socket, Path(self.home.socket_path), self.handle, self.warnings, self._answering
                )
                log.info("daemon %s serving %s", os.getpid(), self.home.root)
        finally:
            for worker in self.workers.all():
                worker.stop()
            self.store.close()
            log.info("daemon stopped")

    async def start(self, nursery: trio.Nursery) -> None:
        """Start every part in ``nursery`` (the workers, the file watch, auto-lock), ready for :meth:`dispatch`."""
        self._nursery = nursery
        self._last_activity = trio.current_time()
        await self.store.load()
        if not self.kept.keep:
            forgotten = await self.store.forget_vectors()  # [rag] keep_vectors = false: R-19 as written
            if forgotten:
                log.info("keep_vectors is off: deleted %d sealed vector rows", forgotten)
        if not self.snapshots.keep and await self.store.forget_snapshots():  # [rag] keep_index = false
            log.info("keep_index is off: deleted the sealed index snapshots")
        self.snapshots.start_soon = self.start_soon
        self.models.start_soon = self.start_soon  # the preload after a restart of the embedding worker
        await self.watch.look()
        for worker in self.workers.all():
            nursery.start_soon(worker.supervise)
        nursery.start_soon(self.watch.run)
        nursery.start_soon(self._auto_lock)
        nursery.start_soon(self.sync.every_interval)

    async def stop(self) -> None:
        """Stop serving: cancel every job, telling its client the daemon is stopping, let those answers go out
        (at most :data:`STOP_GRACE_SECONDS`), then end the workers and the nursery."""
        self.jobs.cancel_all("cancelled", "the daemon is stopping")
        with trio.move_on_after(STOP_GRACE_SECONDS):
            await self.jobs.wait_idle()
            await self._answering.wait_answered()
        with trio.move_on_after(STOP_GRACE_SECONDS):
            await self.snapshots.flush()  # the index snapshots a change made due, so the next start uses them
        for worker in self.workers.all():
            worker.stop()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def start_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Start ``fn(*args)`` in the daemon's nursery (:data:`~memories.daemon.core.context.StartSoon`: background jobs
        outlive their client). Raises ``RuntimeError`` before :meth:`start`."""
        if self._nursery is None:
            raise RuntimeError("the daemon is not started")
        self._nursery.start_soon(fn, *args)

    def warnings(self) -> list[str]:
        """What every reply tells the client about the daemon itself (R-09, R-24), from what the file watch last
        saw: no file is read here. Never raises."""
        notes = []
        if self.watch.config_changed():
            notes.append(
                f"{self.home.config_path} changed since the daemon started; restart it to apply the change "
                "(memories daemon stop && memories daemon start)"
            )
        notes.extend(self.models.warnings(self.watch.model_files))
        notes.extend(self.workers.refusals())
        return notes

    async def _on_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("received signal %s; stopping", signum)
                await self.stop()
                return

    async def _auto_lock(self) -> None:
        while True:
            await trio.sleep(1)
            minutes = self.config.daemon.auto_lock_minutes
            if not minutes or self.store.locked or self.jobs.running():
                continue
            if trio.current_time() - self._last_activity >= minutes * 60:
                log.info("idle for %g minutes: locking", minutes)
                await self.lock()

    async def lock(self) -> None:
        """Drop keys and decrypted headers, cut every vault job, restart the workers that are handed plaintext
        (index and embedding, and remote once it has seen vault text; R-44).

        Jobs are cut and epochs bumped at once, before waiting for the store: a job whose last step is a store
        call in flight ends ``vault_locked``, never with its result. The keys are dropped under the store's limiter,
        so lock never interleaves with a store call in its thread: an add is either committed and acknowledged
        before the lock, or refused after it, and an unlock that is deriving its key finishes before the lock drops
        it. The index snapshots that are due are written first (at most :data:`LOCK_FLUSH_SECONDS`), so the next
        unlock finds the cache as it was.
        """
        with trio.move_on_after(LOCK_FLUSH_SECONDS):
            await self.snapshots.flush()
        self.epochs.bump_all()
        self.jobs.cancel_where("vault_locked")
        self.folders.stop_all()
        async with self.store.exclusive():
            self.store.drop_keys()
            self.recent.forget()
            self.epochs.bump_all()  # again, for the jobs and caches of requests that came in meanwhile
            self.jobs.cancel_where("vault_locked")
            self.workers.kill_plaintext()

    # -- requests ------------------------------------------------------------------------------------------

    async def handle(self, envelope: p.Envelope, conn: Connection) -> p.Result:
        """Answer one client's envelope: check it (R-09), then :meth:`dispatch` its request."""
        await self._check_envelope(envelope, envelope.request)
        return await self.dispatch(envelope.request, conn.context)

    async def dispatch(self, request: p.Request, ctx: RequestContext) -> p.Result:
        """Answer one request (its envelope already checked) with a result of the type it declares
        (:func:`_as_declared`); an unknown request is ``protocol_error``."""
        if not isinstance(request, p.Status):  # polling the status must not keep the home unlocked
            self._last_activity = trio.current_time()
        handler = self._handlers.get(type(request))
        if handler is None:
            raise MemoriesError("protocol_error", f"unknown request {type(request).__name__}")
        return _as_declared(request, await handler(request, ctx))

    async def _check_envelope(self, envelope: p.Envelope, request: p.Request) -> None:
        if envelope.protocol != p.PROTOCOL_VERSION:
            raise MemoriesError(
                "protocol_mismatch",
                f"the client speaks protocol {envelope.protocol}, the daemon {p.PROTOCOL_VERSION}; restart it",
            )
        home, config = await trio.to_thread.run_sync(_real_paths, envelope.home, envelope.config)
        if home != self.home.root:
            raise MemoriesError(
                "home_mismatch",
                f"the daemon serves the home {self.home.root}, not {home}",
                {"daemon_home": self.home.root, "client_home": home},
            )
        if config != self.home.config_path and not isinstance(request, _ALWAYS_ALLOWED):
            raise MemoriesError(
                "home_mismatch",
                f"the daemon of this home runs with the config {self.home.config_path}, not {config}; "
                "restart it with that config or use the same --config",
                {"daemon_config": self.home.config_path, "client_config": config},
            )

    async def _status(self, request: p.Status, ctx: RequestContext) -> p.DaemonStatus:
        queued, running = self.jobs.counts()
        return p.DaemonStatus(
            pid=os.getpid(),
            uptime=round(time.time() - self.started, 3),
            home=self.home.root,
            config=self.home.config_path,
            config_digest=self.watch.loaded_digest,
            restart_needed=bool(self.warnings()),
            initialized=self.store.initialized,
            locked=self.store.locked,
            workers=[w.info() for w in self.workers.all()],
            queued_jobs=queued,
            running_jobs=running,
            dropped_replies=self.workers.dropped,
            dropped_results=self.jobs.dropped_results,
            test_hooks=self.hooks is not None,
            dumpable=dumpable(),
            embedding_batches=self.indexing.batches,
            model_loaded=self.models.loaded if self.models.active else None,
        )

    async def _stop(self, request: p.Stop, ctx: RequestContext) -> p.Result:
        # Let this reply go out first; the nursery is cancelled right after.
        self.start_soon(self._stop_soon)
        return p.Done(ok=True)

    async def _stop_soon(self) -> None:
        await trio.sleep(0.05)
        await self.stop()

    async def _init(self, request: p.Init, ctx: RequestContext) -> p.Result:
        await self.store.init(request.passphrase, self.config.crypto, request.allow_short)
        weak = weak_kdf_warning(self.config.crypto, self.home.config_path)
        if weak:
            ctx.warn(weak)
        return p.Done(ok=True, locked=False)

    async def _unlock(self, request: p.Unlock, ctx: RequestContext) -> p.Result:
        if self.store.locked:
            backup = await self.store.unlock(request.passphrase)
            if backup is not None:
                log.info("upgraded the store to format %d", FORMAT)
                ctx.warn(
                    f"the store was upgraded to the format of this release; the previous file is kept at {backup} "
                    "(remove it once all is well: it still holds what you delete from now on)"
                )
            await self.folders.start_all()  # each watch catches up with what changed while locked
            self.start_soon(self.models.preload)  # the embedding model, so the first query does not pay the load
            self.start_soon(self.warm_up.catch_up)  # warm recent caches, embed what is missing (auto_index)
        else:
            # Already unlocked: still prove the passphrase, so `unlock` never succeeds with a wrong one.
            await self.store.verify_passphrase(request.passphrase)
        return p.Done(ok=True, locked=False)

    async def _lock(self, request: p.Lock, ctx: RequestContext) -> p.Result:
        await self.lock()
        return p.Done(ok=True, locked=True)

    async def _jobs(self, request: p.Jobs, ctx: RequestContext) -> p.Result:
        return p.JobListing(jobs=self.jobs.listing())

    async def _job_cancel(self, request: p.JobCancel, ctx: RequestContext) -> p.Result:
        """Cancel the job and answer its new state: a cancellation takes effect at once (the step in flight is
        abandoned), so the wait is short; a job still ending after :data:`CANCEL_WAIT_SECONDS` is shown as it is."""
        job = self.jobs.cancel(request.job_id)
        with trio.move_on_after(CANCEL_WAIT_SECONDS):
            await job.finished.wait()
        return p.JobListing(jobs=[job.info()])


def _real_paths(home: str, config: str) -> tuple[str, str]:
    """The real paths of a client's home and config (in a thread: they touch the file system)."""
    return os.path.realpath(home), os.path.realpath(config)
