"""The embedding model at unlock (issue 28, item 3) in the daemon's middle: an unlock, a lock's restart of the
embedding worker, a crash of it and a model install load the model in the background, so the first query does not
pay the load; the unlock's answer and a bm25 search never wait for it; ``rag status`` and ``daemon status`` say
whether it is loaded. The embedding worker runs ``workers.embedding``'s own load handler on the tiny model (in a
thread, as the worker process would, off the daemon's event loop)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import EmbeddingConfig, RagConfig
from tests.fixtures.middle import PASSPHRASE, Middle, running_middle
from tests.fixtures.tiny_model import TinyModel
from workers import embedding


async def _load(request: w.EmbedLoad) -> w.ModelLoaded:
    return await trio.to_thread.run_sync(embedding.load, request, None)


@asynccontextmanager
async def _tiny(tmp_path: Path, tiny_model: TinyModel) -> AsyncIterator[Middle]:
    """A middle whose ``[rag] local_model_dir`` is the tiny model, with the real load handler."""
    rag = RagConfig(local_model_dir=str(tiny_model.model_dir), local_threads=1)
    async with running_middle(tmp_path, rag=rag) as middle:
        middle.fakes["embedding"].handlers[w.EmbedLoad] = _load
        yield middle


async def _model_loaded(middle: Middle) -> p.RagStatusReport:
    """``rag status`` once it says the model is loaded (30 s for a hang; no timing assertion)."""
    with trio.fail_after(30):
        while True:
            status = await middle.ok(p.RagStatus(vault="notes"))
            if status.model.loaded:
                return status
            await trio.sleep(0.01)


def _embedding_requests(middle: Middle) -> list[str]:
    return [type(request).__name__ for request in middle.fakes["embedding"].requests]


async def test_an_unlock_loads_the_model_before_any_query(tmp_path: Path, tiny_model: TinyModel) -> None:
    async with _tiny(tmp_path, tiny_model) as middle:
        await middle.add("alpha")
        assert not (await middle.ok(p.RagStatus(vault="notes"))).model.loaded  # init loads nothing
        await middle.ok(p.Lock())
        await middle.ok(p.Unlock(passphrase=PASSPHRASE))
        status = await _model_loaded(middle)
        assert status.model.space_key is not None and status.model.loaded is True
        assert _embedding_requests(middle) == ["EmbedLoad"]  # no query, no batch: the unlock loaded it
        assert (await middle.ok(p.Status())).model_loaded is True


async def test_a_lock_restart_and_a_crash_load_the_model_again(tmp_path: Path, tiny_model: TinyModel) -> None:
    async with _tiny(tmp_path, tiny_model) as middle:
        await middle.ok(p.Lock())
        await middle.ok(p.Unlock(passphrase=PASSPHRASE))
        await _model_loaded(middle)
        generation = middle.daemon.workers.embedding.generation
        await middle.ok(p.Lock())  # restarts the embedding worker: the new process loads the model by itself
        status = await _model_loaded(middle)
        assert status.locked and middle.daemon.workers.embedding.generation > generation
        middle.fakes["embedding"].crash()
        with trio.fail_after(30):
            while middle.daemon.workers.embedding.generation <= generation + 1:
                await trio.sleep(0.01)
        await _model_loaded(middle)
        await middle.ok(p.Unlock(passphrase=PASSPHRASE))
        await _model_loaded(middle)
        assert _embedding_requests(middle) == ["EmbedLoad"] * 3  # unlock, lock's restart, crash; not again


async def test_the_unlock_and_a_bm25_search_do_not_wait_for_the_load(tmp_path: Path, tiny_model: TinyModel) -> None:
    async with _tiny(tmp_path, tiny_model) as middle:
        await middle.add("alpha")
        await middle.ok(p.Lock())
        release = trio.Event()

        async def held(request: w.EmbedLoad) -> w.ModelLoaded:
            await release.wait()
            return await _load(request)

        middle.fakes["embedding"].handlers[w.EmbedLoad] = held
        await middle.ok(p.Unlock(passphrase=PASSPHRASE))  # answered while the load is held
        with trio.fail_after(30):
            while "EmbedLoad" not in _embedding_requests(middle):
                await trio.sleep(0.01)
        found = await middle.ok(p.RagSearch(vault="notes", query="alpha", mode="bm25"))
        assert [hit.title for hit in found.results] == ["note"]
        assert (await middle.ok(p.RagStatus(vault="notes"))).model.loaded is False
        assert (await middle.ok(p.Status())).model_loaded is False
        release.set()
        await _model_loaded(middle)


async def test_a_model_install_loads_the_model(tmp_path: Path, tiny_model: TinyModel) -> None:
    async with running_middle(tmp_path, rag=RagConfig(local_threads=1)) as middle:
        middle.fakes["embedding"].handlers[w.EmbedLoad] = _load
        models = middle.daemon.models
        models.manifest = tiny_model.manifest

        def download(request: w.DownloadModel) -> w.ModelInstalled:
            for file in request.manifest.files:
                target = Path(request.dest_dir) / file.path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes((tiny_model.model_dir / file.path).read_bytes())
            return w.ModelInstalled(files=[])

        middle.fakes["remote"].handlers[w.DownloadModel] = download
        assert (await middle.ok(p.RagStatus(vault="notes"))).model.installed is False
        await middle.ok(p.RagModelInstall(from_dir=None))
        status = await _model_loaded(middle)
        assert status.model.verified and _embedding_requests(middle) == ["EmbedLoad"]


async def test_a_remote_backend_has_no_model_to_load(tmp_path: Path) -> None:
    service = EmbeddingConfig(protocol="compatible", url="http://127.0.0.1:9/v1/embeddings", model="m")
    async with running_middle(tmp_path, rag=RagConfig(embedding=service)) as middle:
        await middle.ok(p.Lock())
        await middle.ok(p.Unlock(passphrase=PASSPHRASE))
        assert (await middle.ok(p.RagStatus(vault="notes"))).model.loaded is None
        assert (await middle.ok(p.Status())).model_loaded is None
        assert _embedding_requests(middle) == []
