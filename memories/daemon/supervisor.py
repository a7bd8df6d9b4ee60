"""The supervisor: the one process that holds keys, owns the store and the job queue, and routes work to workers.

``Daemon.serve`` runs, in one trio nursery: the client socket, the three worker processes (each supervised and
restarted on a crash), the idle auto-lock timer and the signal handler. Requests that only touch the store (keys,
vaults, records) run here, with SQLite calls in a thread one at a time; requests that need workers run as jobs
(:mod:`memories.daemon.jobs`).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import trio

from memories import protocol as p
from memories.config import Config, config_digest
from memories.daemon.ask import Asking
from memories.daemon.backends import embedding_backend
from memories.daemon.cache_sync import CacheSync
from memories.daemon.grants import Grants
from memories.daemon.indexing import Indexing
from memories.daemon.ingest import Ingest
from memories.daemon.jobs import Epochs, JobManager
from memories.daemon.keyring import Keyring
from memories.daemon.models import Models
from memories.daemon.records import Records
from memories.daemon.retrieval import Retrieval
from memories.daemon.server import Answering, Connection, serve_socket
from memories.daemon.tools import Tools
from memories.daemon.vaults import Vaults
from memories.daemon.workers import WorkerHandle, process_spawner
from memories.errors import MemoriesError
from memories.hardening import dumpable
from memories.models.telemetry import TELEMETRY_ENVIRONMENT
from memories.paths import Home, ensure_private_dir
from memories.store import Store, VaultRow
from memories.testing import TestHooks, grant_clock

log = logging.getLogger("memories.daemon")

T = TypeVar("T")

WORKER_NAMES = ("index", "embedding", "remote")
PLAINTEXT_WORKERS = ("index", "embedding")
"""Workers that are always handed record text, and restarted on lock. ``remote`` joins them once it has been handed
vault text (remote embedding, rerank, generation): :meth:`Daemon.remote_saw_vault_text`."""

_ALWAYS_ALLOWED = (p.Status, p.Stop)

STOP_GRACE_SECONDS = 5.0
"""How long a stopping daemon waits for its cancelled jobs' answers to reach their clients."""

CANCEL_WAIT_SECONDS = 5.0
"""How long ``jobs cancel`` waits for the job to end before it answers with the job's state."""

Handler = Callable[[Any, Connection], Awaitable[p.Result]]
"""A request handler: the typed request and its connection (for progress, warnings and hang-ups)."""


class Daemon:
    """Everything the supervisor holds. Create it, then ``trio.run(daemon.serve)``."""

    def __init__(self, home: Home, config: Config, hooks: TestHooks | None, log_file: Any) -> None:
        self.home = home
        self.config = config
        self.hooks = hooks
        self.config_digest = config_digest(Path(home.config_path))
        self.started = time.time()
        self.dropped_replies = 0
        self.store = Store(Path(home.db_path))
        self.keyring = Keyring(self.store)
        self.vaults = Vaults(self.store, self.keyring)
        self.grants = Grants(self.store, self.keyring, grant_clock(hooks))
        self.epochs = Epochs()
        self.jobs = JobManager(self.epochs, lambda: self.config.daemon.job_budget_seconds)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        environments = {"index": env, "embedding": {**env, **TELEMETRY_ENVIRONMENT}, "remote": env}
        spawn = process_spawner(environments, log_file, home.root)
        self.workers = {name: WorkerHandle(name, spawn, self._count_drop) for name in WORKER_NAMES}
        self.models = Models(self)
        self.embedding = embedding_backend(self)
        self.cache_sync = CacheSync(self)
        self.indexing = Indexing(self)
        self.retrieval = Retrieval(self)
        self.ingest = Ingest(self)
        self.records = Records(self)
        self.tools = Tools(self)
        self.asking = Asking(self)
        self.remote_has_vault_text = False
        self.remote_lock_restarts = 0
        """Times lock restarted ``workers.remote``; a model download it cut resumes (:meth:`Models.install`)."""
        self._handlers: dict[type, Handler] = {
            p.Status: self._status,
            p.Stop: self._stop,
            p.Init: self._init,
            p.Unlock: self._unlock,
            p.Lock: self._lock,
            p.Jobs: self._jobs,
            p.JobCancel: self._job_cancel,
            **self.records.handlers(),
            p.MemorySearch: self.retrieval.memory_search,
            p.RagSearch: self.retrieval.search,
            p.RagStatus: self.retrieval.status,
            p.RagAsk: self.asking.ask,
            p.RagIngest: self.ingest.run,
            p.RagIndex: self.indexing.index,
            p.RagModelInstall: self.models.install,
            p.GrantCreate: self._grant_create,
            p.GrantList: self._grant_list,
            p.GrantRevoke: self._grant_revoke,
            p.Granted: self.tools.call,
        }
        self._db_limiter = trio.CapacityLimiter(1)
        self._answering = Answering()
        self._last_activity = 0.0  # trio clock, set when serving starts
        self._nursery: trio.Nursery | None = None

    # -- running -------------------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Run until ``daemon stop``, SIGTERM or SIGINT."""
        ensure_private_dir(os.path.dirname(self.home.socket_path))
        self._last_activity = trio.current_time()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for worker in self.workers.values():
                    nursery.start_soon(worker.supervise)
                nursery.start_soon(self._auto_lock)
                nursery.start_soon(self._on_signals)
                await nursery.start(
                    serve_socket, Path(self.home.socket_path), self._handle, self.warnings, self._answering
                )
                log.info("daemon %s serving %s", os.getpid(), self.home.root)
        finally:
            for worker in self.workers.values():
                worker.stop()
            self.store.close()
            log.info("daemon stopped")

    async def stop(self) -> None:
        """Stop serving: cancel every job, telling its client the daemon is stopping, let those answers go out
        (at most :data:`STOP_GRACE_SECONDS`), then end the workers and the nursery."""
        self.jobs.cancel_all("cancelled", "the daemon is stopping")
        with trio.move_on_after(STOP_GRACE_SECONDS):
            await self.jobs.wait_idle()
            await self._answering.wait_answered()
        for worker in self.workers.values():
            worker.stop()
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        """Start a background task in the daemon's nursery (background jobs outlive their client)."""
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    async def db(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking store call in a thread, one at a time (SQLite connection shared across threads)."""
        return await trio.to_thread.run_sync(fn, *args, limiter=self._db_limiter)

    def warnings(self) -> list[str]:
        """What every reply tells the client about the daemon itself (R-09, R-24). Never raises."""
        notes = []
        if config_digest(Path(self.home.config_path)) != self.config_digest:
            notes.append(
                f"{self.home.config_path} changed since the daemon started; restart it to apply the change "
                "(memories daemon stop && memories daemon start)"
            )
        notes.extend(self.models.warnings())
        notes.extend(
            f"the {worker.name} worker comes from another install ({worker.refusal}); restart the daemon"
            for worker in self.workers.values()
            if worker.refusal is not None
        )
        return notes

    def _count_drop(self) -> None:
        self.dropped_replies += 1

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
            if not minutes or self.keyring.locked or self.jobs.running():
                continue
            if trio.current_time() - self._last_activity >= minutes * 60:
                log.info("idle for %g minutes: locking", minutes)
                await self.lock()

    async def lock(self) -> None:
        """Drop keys and decrypted headers, cancel every vault job, restart the workers that are handed plaintext
        (index and embedding, and remote once it has seen vault text; R-44).

        Taken under the store's limiter, so it never interleaves with a store call in its thread: an add is
        either committed and acknowledged before the lock, or refused after it, and an unlock that is deriving
        its key finishes before the lock drops it.
        """
        async with self._db_limiter:
            self.keyring.lock()
            self.vaults.forget()
            self.epochs.bump_all()
            self.jobs.cancel_where("vault_locked")
            for name in PLAINTEXT_WORKERS:
                self.workers[name].kill()
            if self.remote_has_vault_text:
                self.remote_has_vault_text = False
                self.remote_lock_restarts += 1
                self.workers["remote"].kill()

    def remote_saw_vault_text(self) -> None:
        """Called before vault text goes to ``workers.remote``: from now on lock restarts it too (R-44)."""
        self.remote_has_vault_text = True

    def content_changed(self, vault: VaultRow) -> None:
        """A vault's content or policy changed: its caches are stale from now on (R-19)."""
        self.epochs.bump(vault.id)

    async def resolve(self, ref: str) -> VaultRow:
        """The vault named by id or name (works while locked); raises ``not_initialized``, ``vault_not_found``."""

        def resolve() -> VaultRow:
            if not self.keyring.initialized:
                raise MemoriesError("not_initialized", "this home has no key hierarchy yet; run `memories init`")
            return self.vaults.resolve(ref)

        return await self.db(resolve)

    async def resolve_unlocked(self, ref: str) -> VaultRow:
        """The vault, with its device-only policy proven by its sealed key (R-41); raises ``vault_locked``,
        ``integrity_error`` (a policy changed outside Memories) and what :meth:`resolve` raises."""
        self.keyring.master()
        vault = await self.resolve(ref)
        await self.db(self.keyring.vault_key, vault)
        return vault

    # -- requests ------------------------------------------------------------------------------------------

    async def _handle(self, envelope: p.Envelope, conn: Connection) -> p.Result:
        request = envelope.request
        self._check_envelope(envelope, request)
        if not isinstance(request, p.Status):  # polling the status must not keep the home unlocked
            self._last_activity = trio.current_time()
        handler = self._handlers.get(type(request))
        if handler is None:
            raise MemoriesError("protocol_error", f"unknown request {type(request).__name__}")
        return await handler(request, conn)

    def _check_envelope(self, envelope: p.Envelope, request: p.Request) -> None:
        if envelope.protocol != p.PROTOCOL_VERSION:
            raise MemoriesError(
                "protocol_mismatch",
                f"the client speaks protocol {envelope.protocol}, the daemon {p.PROTOCOL_VERSION}; restart it",
            )
        home = os.path.realpath(envelope.home)
        if home != self.home.root:
            raise MemoriesError(
                "home_mismatch",
                f"the daemon serves the home {self.home.root}, not {home}",
                {"daemon_home": self.home.root, "client_home": home},
            )
        config = os.path.realpath(envelope.config)
        if config != self.home.config_path and not isinstance(request, _ALWAYS_ALLOWED):
            raise MemoriesError(
                "home_mismatch",
                f"the daemon of this home runs with the config {self.home.config_path}, not {config}; "
                "restart it with that config or use the same --config",
                {"daemon_config": self.home.config_path, "client_config": config},
            )

    async def _status(self, request: p.Status, conn: Connection) -> p.Result:
        queued, running = self.jobs.counts()
        return p.DaemonStatus(
            pid=os.getpid(),
            uptime=round(time.time() - self.started, 3),
            home=self.home.root,
            config=self.home.config_path,
            config_digest=self.config_digest,
            restart_needed=bool(self.warnings()),
            initialized=await self.db(lambda: self.keyring.initialized),
            locked=self.keyring.locked,
            workers=[w.info() for w in self.workers.values()],
            queued_jobs=queued,
            running_jobs=running,
            dropped_replies=self.dropped_replies,
            test_hooks=self.hooks is not None,
            dumpable=dumpable(),
        )

    async def _stop(self, request: p.Stop, conn: Connection) -> p.Result:
        # Let this reply go out first; the nursery is cancelled right after.
        self.spawn(self._stop_soon)
        return p.Done(ok=True)

    async def _stop_soon(self) -> None:
        await trio.sleep(0.05)
        await self.stop()

    async def _init(self, request: p.Init, conn: Connection) -> p.Result:
        init = functools.partial(self.keyring.init, allow_short=request.allow_short)
        await self.db(init, request.passphrase, self.config.crypto)
        return p.Done(ok=True, locked=False)

    async def _unlock(self, request: p.Unlock, conn: Connection) -> p.Result:
        if self.keyring.locked:
            backup = await self.db(self.vaults.unlock, request.passphrase)
            if backup is not None:
                log.info("upgraded the store to format 2")
                conn.warnings.append(
                    f"the store was upgraded to the format of this release; the previous file is kept at {backup} "
                    "(remove it once all is well: it still holds what you delete from now on)"
                )
        else:
            # Already unlocked: still prove the passphrase, so `unlock` never succeeds with a wrong one.
            await self.db(_verify_passphrase, self.store, request.passphrase)
        return p.Done(ok=True, locked=False)

    async def _lock(self, request: p.Lock, conn: Connection) -> p.Result:
        await self.lock()
        return p.Done(ok=True, locked=True)

    async def _jobs(self, request: p.Jobs, conn: Connection) -> p.Result:
        return p.JobListing(jobs=self.jobs.listing())

    async def _job_cancel(self, request: p.JobCancel, conn: Connection) -> p.Result:
        """Cancel the job and answer its new state: a cancellation takes effect at once (the step in flight is
        abandoned), so the wait is short; a job still ending after :data:`CANCEL_WAIT_SECONDS` is shown as it is."""
        job = self.jobs.cancel(request.job_id)
        with trio.move_on_after(CANCEL_WAIT_SECONDS):
            await job.finished.wait()
        return p.JobListing(jobs=[job.info()])

    async def _grant_create(self, request: p.GrantCreate, conn: Connection) -> p.Result:
        vault = await self.resolve_unlocked(request.vault)
        return await self.db(self.grants.create, vault, request.client, list(request.scope), request.expires)

    async def _grant_list(self, request: p.GrantList, conn: Connection) -> p.Result:
        vault = await self.resolve(request.vault) if request.vault is not None else None
        return p.GrantListing(grants=await self.db(self.grants.list, vault))

    async def _grant_revoke(self, request: p.GrantRevoke, conn: Connection) -> p.Result:
        if (request.id is None) == (request.token is None):
            raise MemoriesError("invalid_argument", "revoke a grant by its id or by its token, not both or neither")
        revoked = await self.db(self.grants.revoke, request.id, request.token)
        self.tools.revoked([revoked.id])
        return p.GrantListing(grants=[revoked])


def _verify_passphrase(store: Store, passphrase: str) -> None:
    Keyring(store).unlock(passphrase)
