"""The embedding model as the supervisor sees it: where it lives, whether it is installed, loaded and unchanged.

The folder is ``[rag] local_model_dir`` when set (used as found: it need not match the pinned hashes, but it
must pass the load checks, and its file digests go into the vector space key), else
``<home>/models/embeddinggemma`` (installed by ``rag model-install`` from the pinned manifest).

The model loads in ``workers.embedding`` in the background (issue 28, item 3): :meth:`Models.preload` runs as a task
after an unlock and a model install, and whenever the embedding worker comes back (a lock restarts it, or a crash)
once the model was loaded before, so the first query's embedding does not pay the load. The unlock's answer never
waits for it, and it runs in the embedding worker alone (a bm25 search, the index worker, the store are not held);
a query embedding that comes meanwhile waits for the load it would have needed anyway. Every embedding request
carries the load request too, so a worker restarted since loads it again by itself. :attr:`Models.loaded` says
whether the current worker process holds the model (``rag status`` ``model.loaded``, ``daemon status``
``model_loaded``). When the files on disk change after they were loaded, every reply says a restart is needed (R-24).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import msgspec
import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import RagConfig
from memories.daemon.core.context import Handlers, RequestContext
from memories.daemon.core.jobs import Job, JobManager
from memories.daemon.core.workers import WorkerHandle
from memories.errors import MemoriesError
from memories.logs import log_failure
from memories.models.manifest import Manifest, pinned_manifest, read_manifest

log = logging.getLogger("memories.models")

Fingerprint = tuple[tuple[str, int, int], ...]
"""``(path, size, mtime_ns)`` of every model file (``-1`` for a missing one)."""


class Models:
    """Install, load and use the local embedding model through the workers.

    Args:
        rag: the ``[rag]`` settings.
        default_dir: the model folder when ``local_model_dir`` is not set.
        manifest: the pinned manifest (:func:`model_manifest`).
        embedding: the embedding worker; remote: the remote worker (downloads).
        jobs: the job queue (``rag model-install`` is a job).
    """

    def __init__(
        self,
        rag: RagConfig,
        default_dir: str,
        manifest: Manifest,
        embedding: WorkerHandle,
        remote: WorkerHandle,
        jobs: JobManager,
    ) -> None:
        self.manifest = manifest
        self._rag = rag
        self._worker = embedding
        self._remote = remote
        self._jobs = jobs
        self.user_supplied = rag.local_model_dir is not None
        self.path = Path(rag.local_model_dir or default_dir)
        self._request: w.EmbedLoad | None = None
        self._loaded: w.ModelLoaded | None = None
        self._fingerprint: Fingerprint | None = None
        self._unverified = False
        self._load_lock = trio.Lock()
        self._loaded_in: int | None = None
        """The embedding worker's generation known to hold the model (it loaded it, or embedded with it)."""
        self.active = rag.embedding is None
        """The local model is the embedding backend (else nothing is preloaded)."""
        self.start_soon: Callable[..., None] | None = None
        """Starts a task in the daemon's nursery (set by the daemon when it starts): the preload after an install or
        a restart of the embedding worker."""
        embedding.on_ready = self._worker_ready
        self.on_installed: Callable[[], None] = lambda: None
        """Called when ``rag model-install`` has finished well (the daemon then starts the background index of the
        vaults that miss vectors, ``[rag] auto_index``)."""

    def handlers(self) -> Handlers:
        """The requests this module answers."""
        return {p.RagModelInstall: self.install}

    def _required(self) -> list[Path]:
        graph = self.path / self.manifest.graph
        return [graph, graph.with_name(graph.name + "_data"), self.path / "tokenizer.json"]

    def _files(self) -> list[Path]:
        """Every file of the model layout (the manifest's paths), whose changes need a restart (R-24)."""
        return [self.path / file.path for file in self.manifest.files]

    def _missing(self) -> list[str]:
        """The required files that are not there, relative to the folder (blocking: ``stat`` of each)."""
        return [str(path.relative_to(self.path)) for path in self._required() if not path.is_file()]

    async def installed(self) -> bool:
        """The graph, its external data and the tokenizer are present (checked in a thread)."""
        return not await trio.to_thread.run_sync(self._missing)

    def fingerprint_now(self) -> Fingerprint:
        """The model files as they are on disk now (blocking: ``stat`` of each)."""
        stamps = []
        for path in self._files():
            try:
                info = path.stat()
                stamps.append((str(path), info.st_size, info.st_mtime_ns))
            except OSError:
                stamps.append((str(path), -1, -1))
        return tuple(stamps)

    async def _verified(self) -> bool:
        """Every file matches the manifest (hashes cached per file identity, so this is cheap after once)."""
        from memories.models.verify import verify_installed

        status = await trio.to_thread.run_sync(verify_installed, self.manifest, self.path)
        return status.verified

    @property
    def loaded(self) -> bool:
        """The current embedding worker process holds the model (loaded by :meth:`preload`, a search or an index
        job); false while it starts or restarts, and after a restart until it loads the model again."""
        worker = self._worker
        return self._loaded_in is not None and self._loaded_in == worker.generation and worker.state == "ready"

    async def state(self) -> p.ModelState:
        """For ``rag status``."""
        installed = await self.installed()
        return p.ModelState(
            installed=installed,
            verified=installed and await self._verified(),
            space_key=self._loaded.space_key if self._loaded else None,
            path=str(self.path),
            loaded=self.loaded,
        )

    async def preload(self) -> None:
        """Load the model in the embedding worker now unless its current process holds it already (a task: after
        an unlock, a model install, a restart of the worker). Never raises: a model not installed is no load, and
        a failure (``model_invalid``, a crash, a lock) is logged; the next query loads it as before."""
        if not self.active or self.loaded:
            return
        try:
            if not await self.installed():
                return
            started = trio.current_time()
            async with self._load_lock:
                if self.loaded:
                    return
                await self._load()
            log.info("loaded the embedding model in the background (%.1f s)", trio.current_time() - started)
        except MemoriesError as exc:
            log.info("the embedding model was not loaded in the background: %s", exc.code)
        except Exception as exc:  # the daemon must keep serving
            log_failure(log, "loading the embedding model in the background failed", exc)

    def _worker_ready(self) -> None:
        """A new embedding worker process said hello: load the model again when it was loaded before (a lock or
        a crash restarted the worker), so the next query does not pay the load."""
        if self.active and self._request is not None and self.start_soon is not None:
            self.start_soon(self.preload)

    async def _load(self) -> None:
        """Send the load request (made on first use: the manifest checked, the files' fingerprint taken) and note
        the worker generation that holds the model.

        Raises:
            MemoriesError: ``model_invalid``, ``worker_crashed``, ``restart_needed``.
        """
        request, fingerprint = self._request, self._fingerprint
        if request is None:
            verified = not self.user_supplied and await self._verified()
            self._unverified = not self.user_supplied and not verified
            request = w.EmbedLoad(
                model_dir=str(self.path),
                threads=self._rag.local_threads,
                max_tokens=self._rag.max_tokens,
                batch_size=self._rag.embed_batch_size,
                manifest=self.manifest if verified else None,
            )
            fingerprint = await trio.to_thread.run_sync(self.fingerprint_now)
        generation = await self._worker.ready()
        reply = await self._worker.call(request)
        self._request, self._loaded, self._fingerprint = request, reply, fingerprint
        self._held_by(generation)

    def _held_by(self, generation: int) -> None:
        """A call sent to worker ``generation`` was answered with the model loaded: it holds the model, unless the
        worker restarted since."""
        if generation == self._worker.generation:
            self._loaded_in = generation

    async def space_key(self) -> str:
        """Load the model in the embedding worker if needed and return its vector space key.

        Raises:
            MemoriesError: ``model_not_installed`` (with the command that fixes it), ``model_invalid``.
        """
        missing = await trio.to_thread.run_sync(self._missing)
        if missing:
            where = f"[rag] local_model_dir ({self.path})" if self.user_supplied else str(self.path)
            raise MemoriesError(
                "model_not_installed",
                f"no embedding model in {where} ({', '.join(missing)} missing); run `memories rag model-install`, "
                "or search in bm25 mode (`--mode bm25`)",
                {"directory": str(self.path), "missing": missing},
            )
        if self._loaded is None:
            async with self._load_lock:  # one load at a time: a preload in flight is waited for, not repeated
                if self._loaded is None:
                    await self._load()
        assert self._loaded is not None  # set by _load
        return self._loaded.space_key

    def _model(self) -> w.EmbedLoad:
        """The load request every embedding call carries, so a restarted worker loads the model by itself.

        Raises:
            RuntimeError: :meth:`space_key` has not loaded the model yet (a bug in the caller).
        """
        if self._request is None:
            raise RuntimeError("space_key() loads the model before any embedding call")
        return self._request

    async def embed_query(self, job: Job, query: str) -> bytes:
        """float32[768] bytes of the query vector."""
        generation = self._worker.generation
        reply = await job.call(self._worker, w.EmbedQuery(query=query, model=self._model()), epoch=False)
        self._held_by(generation)
        return reply.vectors

    async def embed_documents(self, job: Job, inputs: list[str]) -> w.Vectors:
        """One batch; the caller checked the budget, and the vectors are content-addressed (no epoch check)."""
        body = w.EmbedBatch(inputs=inputs, model=self._model())
        generation = self._worker.generation
        reply = await job.call(self._worker, body, budget=False, epoch=False)
        self._held_by(generation)
        return reply

    async def token_counts(self, job: Job, inputs: list[str]) -> list[int]:
        """How many tokens the model is fed for each of ``inputs`` (exact model inputs), in order."""
        body = w.EmbedCount(inputs=inputs, model=self._model())
        generation = self._worker.generation
        reply = await job.call(self._worker, body, budget=False, epoch=False)
        self._held_by(generation)
        return reply.counts

    async def install(self, request: p.RagModelInstall, ctx: RequestContext) -> p.InstallReport:
        """``rag model-install``: a job in ``workers.remote``, bounded per file, not by the job budget."""
        from_dir = request.from_dir
        if from_dir is not None and not await trio.to_thread.run_sync(os.path.isdir, from_dir):
            raise MemoriesError("invalid_argument", f"{from_dir} is not a folder")
        job = self._jobs.new_unbudgeted_job("model-install")
        ctx.attach(job)
        download = w.DownloadModel(
            manifest=self.manifest,
            dest_dir=str(self.path),
            base_url=self._rag.model_download_base_url,
            from_dir=from_dir,
            http=self._rag.http,
        )

        async def work(job: Job) -> p.InstallReport:
            def on_progress(event: w.WorkerProgress) -> None:
                job.progress(event.done, event.total, event.unit, event.note)

            while True:
                restarts = self._remote.lock_restarts
                try:
                    reply = await job.call(self._remote, download, on_progress=on_progress)
                    break
                except MemoriesError as exc:
                    # Lock restarts workers.remote when it has seen vault text: the download resumes from its parts.
                    if exc.code != "worker_crashed" or self._remote.lock_restarts == restarts:
                        raise
            return p.InstallReport(path=str(self.path), files=reply.files)

        report = await self._jobs.run(job, work)
        if self.start_soon is not None:
            self.start_soon(self.preload)  # the model, in the background, before the first query needs it
        self.on_installed()
        return report

    def load_warnings(self) -> list[str]:
        """What the embedder said when it loaded (threads above the machine's cores, telemetry switches), and
        whether the installed files differ from the pinned manifest (they are then used as found, hashed into the
        vector space key, like a ``local_model_dir``)."""
        notes = list(self._loaded.warnings) if self._loaded else []
        if self._unverified:
            notes.append(
                f"the model files in {self.path} do not match the pinned manifest; they are used as found "
                "(to use the pinned model, move them away and run `memories rag model-install`)"
            )
        return notes

    def warnings(self, now: Fingerprint | None) -> list[str]:
        """R-24: the model files changed on disk since they were loaded (``now``: as last seen on disk, by the
        daemon's file watch; never read here)."""
        if self._fingerprint is None or now is None or self._fingerprint == now:
            return []
        return [f"the model files in {self.path} changed since they were loaded; restart the daemon to use them"]


def model_manifest(test_manifest: str | None) -> Manifest:
    """The pinned manifest, or (test hooks only) the one at ``test_manifest``; raises ``invalid_argument``."""
    if test_manifest is None:
        return pinned_manifest()
    try:
        return read_manifest(Path(test_manifest))
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MemoriesError("invalid_argument", f"the test hooks' model manifest is unusable: {exc}") from None
