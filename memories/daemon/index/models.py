"""The embedding model as the supervisor sees it: where it lives, whether it is installed, loaded and unchanged.

The folder is ``[rag] local_model_dir`` when set (used as found: it need not match the pinned hashes, but it
must pass the load checks, and its file digests go into the vector space key), else
``<home>/models/embeddinggemma`` (installed by ``rag model-install`` from the pinned manifest). The model loads
in ``workers.embedding`` on first use; every embedding request carries the load request too, so a worker
restarted since (crash, lock) loads it again by itself. When the
files on disk change after they were loaded, every reply says a restart is needed (R-24).
"""

from __future__ import annotations

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
from memories.models.manifest import Manifest, pinned_manifest, read_manifest

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

    async def state(self) -> p.ModelState:
        """For ``rag status``."""
        installed = await self.installed()
        return p.ModelState(
            installed=installed,
            verified=installed and await self._verified(),
            space_key=self._loaded.space_key if self._loaded else None,
            path=str(self.path),
        )

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
            reply = await self._worker.call(request)
            self._request, self._loaded, self._fingerprint = request, reply, fingerprint
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
        reply = await job.call(self._worker, w.EmbedQuery(query=query, model=self._model()), epoch=False)
        return reply.vectors

    async def embed_documents(self, job: Job, inputs: list[str]) -> w.Vectors:
        """One batch; the caller checked the budget, and the vectors are content-addressed (no epoch check)."""
        body = w.EmbedBatch(inputs=inputs, model=self._model())
        return await job.call(self._worker, body, budget=False, epoch=False)

    async def token_counts(self, job: Job, inputs: list[str]) -> list[int]:
        """How many tokens the model is fed for each of ``inputs`` (exact model inputs), in order."""
        body = w.EmbedCount(inputs=inputs, model=self._model())
        reply = await job.call(self._worker, body, budget=False, epoch=False)
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
