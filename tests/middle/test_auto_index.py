"""An index that keeps itself up to date (issue 19) in the daemon's middle: ``[rag] auto_index`` starts one
background job per vault after a change or an unlock, below foreground work; searches meanwhile search what is
embedded; nothing leaves a device-only vault."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import DaemonConfig, EmbeddingConfig, RagConfig
from memories.daemon.core.context import RequestContext
from memories.daemon.index.background import EmbeddingTurns
from memories.errors import MemoriesError
from tests.fixtures.middle import PASSPHRASE, Middle, running_middle

FINISHED = ("done", "failed", "cancelled")


def _model(middle: Middle, gate: trio.Event | None = None) -> list[int]:
    """A fake local model whose batches wait for ``gate`` (when given); the list grows by each batch's size."""
    batches: list[int] = []

    async def embed(request: w.EmbedBatch) -> w.Vectors:
        if gate is not None:
            await gate.wait()
        batches.append(len(request.inputs))
        return w.Vectors(vectors=bytes(16 * len(request.inputs)), dimension=4)

    middle.fake_model(embed)  # type: ignore[arg-type]
    middle.fakes["embedding"].handlers[w.EmbedQuery] = lambda r: w.Vectors(vectors=bytes(16), dimension=4)
    return batches


async def _index_jobs(middle: Middle) -> list[p.JobInfo]:
    return [job for job in (await middle.ok(p.Jobs())).jobs if job.kind == "index"]


async def _settled(middle: Middle, count: int = 0) -> list[p.JobInfo]:
    """The index jobs once at least ``count`` exist and none is queued or running (30 s for a hang)."""
    with trio.fail_after(30):
        while True:
            jobs = await _index_jobs(middle)
            if len(jobs) >= count and all(job.state in FINISHED for job in jobs):
                return jobs
            await trio.sleep(0.01)


@asynccontextmanager
async def _auto(tmp_path: Path, **settings: Any) -> AsyncIterator[Middle]:
    async with running_middle(tmp_path, auto_index=settings.pop("auto_index", "local"), **settings) as middle:
        yield middle


@pytest.mark.parametrize("change", ["rag ingest", "memory add"])
async def test_a_change_is_embedded_by_itself_and_the_default_mode_becomes_hybrid(tmp_path: Path, change: str) -> None:
    async with _auto(tmp_path) as middle:
        batches = _model(middle)
        if change == "rag ingest":  # 70 notes: more than a search embeds on demand
            folder = tmp_path / "notes"
            folder.mkdir()
            for n in range(70):
                (folder / f"n{n:02}.md").write_text(f"# Note {n}\n\nalpha {n}\n")
            await middle.ok(p.RagIngest(vault="notes", paths=[str(folder)]))
        else:
            for n in range(70):
                await middle.add(f"alpha {n}")
        jobs = await _settled(middle, 1)
        assert {(job.background, job.state, job.error) for job in jobs} == {(True, "done", None)}
        assert sum(batches) == 70  # no input twice
        status = await middle.ok(p.RagStatus(vault="notes"))
        assert (status.embedded, status.missing, status.indexing) == (70, 0, None)
        assert (await middle.ok(p.RagSearch(vault="notes", query="alpha"))).mode == "hybrid"


async def test_off_embeds_nothing_by_itself(middle: Middle) -> None:
    batches = _model(middle)
    for n in range(70):
        await middle.add(f"alpha {n}")
    ctx = RequestContext()
    assert (await middle.ok(p.RagSearch(vault="notes", query="alpha"), ctx)).mode == "bm25"
    assert await _index_jobs(middle) == [] and batches == []
    assert any("70 chunks have no vector yet" in warning for warning in ctx.warnings)


async def test_while_the_job_runs_a_search_embeds_nothing_and_says_how_much_it_covers(tmp_path: Path) -> None:
    async with _auto(tmp_path) as middle:
        gate = trio.Event()
        batches = _model(middle, gate)
        for n in range(20):
            await middle.add(f"alpha {n}")
        while not middle.fakes["embedding"].requests or not isinstance(
            middle.fakes["embedding"].requests[-1], w.EmbedBatch
        ):
            await trio.sleep(0.01)  # the background job's first batch is held in the worker
        await middle.add("alpha 20")  # joins the running job
        assert len(await _index_jobs(middle)) == 1
        ctx = RequestContext()
        found = await middle.ok(p.RagSearch(vault="notes", query="alpha", mode="vector"), ctx)
        assert found.mode == "vector" and batches == []
        assert any("searched the 0 of 21 chunks that have a vector" in warning for warning in ctx.warnings)
        ctx = RequestContext()
        assert (await middle.ok(p.RagSearch(vault="notes", query="alpha"), ctx)).mode == "bm25"
        assert any("0 of 21 chunks have a vector so far; background job" in warning for warning in ctx.warnings)
        status = await middle.ok(p.RagStatus(vault="notes"))
        assert status.indexing is not None and status.indexing.background
        gate.set()
        assert len(await _settled(middle)) == 1 and sum(batches) == 21


async def test_a_background_step_waits_for_every_foreground_run_and_one_runs_at_a_time() -> None:
    turns = EmbeddingTurns()
    order: list[str] = []

    async def background(name: str) -> None:
        async with turns.background() as waited:
            order.append(f"{name} {'after waiting' if waited else 'at once'}")
            await trio.sleep(1)

    async with trio.open_nursery() as nursery:
        with turns.foreground():
            nursery.start_soon(background, "first")
            nursery.start_soon(background, "second")
            await trio.sleep(5)
            assert order == []
    # whichever took the turn first waited for the foreground run; the other then found no foreground run left
    assert sorted(entry.split(" ", 1)[1] for entry in order) == ["after waiting", "at once"]


async def test_a_remote_service_is_used_by_itself_only_with_always(tmp_path: Path) -> None:
    for auto, sent in (("local", 0), ("always", 1)):
        (tmp_path / auto).mkdir()
        embedding = EmbeddingConfig(protocol="compatible", url="http://127.0.0.1:9/v1/embeddings", model="m")
        async with _auto(tmp_path / auto, rag=RagConfig(embedding=embedding), auto_index=auto) as middle:
            remote = middle.fakes["remote"]
            remote.handlers[w.RemoteEmbed] = lambda r: w.RemoteVectors(
                vectors=bytes(16 * len(r.inputs)), dimension=4, ok=list(range(len(r.inputs)))
            )
            await middle.add("alpha")
            await _settled(middle)
            assert len([r for r in remote.requests if isinstance(r, w.RemoteEmbed)]) == sent, auto


async def test_a_device_only_vault_is_never_sent_to_a_remote_service_by_itself(tmp_path: Path) -> None:
    embedding = EmbeddingConfig(protocol="compatible", url="https://embed.example/v1/embeddings", model="m")
    rag = RagConfig(embedding=embedding)
    async with _auto(tmp_path, rag=rag, auto_index="always") as middle:
        await middle.ok(p.VaultPolicy(vault="notes", device_only=True))
        await middle.add("alpha")
        await middle.ok(p.Lock())
        await middle.ok(p.Unlock(passphrase=PASSPHRASE))
        await trio.testing.wait_all_tasks_blocked()
        assert await _settled(middle) == [] and middle.fakes["remote"].requests == []


async def test_an_unlock_warms_the_recent_vault_with_its_kept_vectors(tmp_path: Path) -> None:
    async with _auto(tmp_path) as middle:
        batches = _model(middle)
        await middle.add("alpha")
        await _settled(middle)
        await middle.ok(p.RagSearch(vault="notes", query="alpha"))
        await middle.ok(p.Lock())
        await middle.ok(p.Unlock(passphrase=PASSPHRASE))
        jobs = await _settled(middle, 2)
        assert (jobs[-1].background, jobs[-1].state) == (True, "done")
        assert middle.index.caches[middle.vault_id].loaded  # warm, with its kept vectors: the search builds nothing
        assert sum(batches) == 1  # nothing embedded again


async def test_an_unlock_embeds_a_vault_whose_kept_vectors_miss_inputs(tmp_path: Path) -> None:
    """The vault was never searched (nothing to warm); its rows are gone, as after a model change."""
    async with _auto(tmp_path) as middle:
        batches = _model(middle)
        await middle.add("alpha")
        await _settled(middle)
        await middle.ok(p.Lock())
        with sqlite3.connect(middle.daemon.home.db_path) as db:
            db.execute("DELETE FROM vectors")
        await middle.ok(p.Unlock(passphrase=PASSPHRASE))
        await _settled(middle, 2)
        assert sum(batches) == 2


async def _step(clock: trio.testing.MockClock, seconds: float) -> None:
    """Jump the virtual clock, then let the tasks and (in real time) the store's threads run."""
    clock.jump(seconds)
    await trio.testing.wait_all_tasks_blocked()
    await trio.to_thread.run_sync(time.sleep, 0.005)


async def test_a_background_job_does_not_keep_the_home_from_its_idle_auto_lock(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    idle = DaemonConfig(job_budget_seconds=300, auto_lock_minutes=0.02)  # 1.2 s idle
    async with _auto(tmp_path, daemon=idle) as middle:
        _model(middle, trio.Event())  # the job's batch never returns
        await middle.add("alpha")
        deadline = time.monotonic() + 60  # real seconds: a loaded machine's store thread may take a while
        while not (await middle.ok(p.Status())).locked and time.monotonic() < deadline:
            await _step(mock_clock, 1)
        while (job := (await _index_jobs(middle))[0]).state not in FINISHED and time.monotonic() < deadline:
            await _step(mock_clock, 0.1)  # the job ends once its store call in a thread has returned
        assert job.error is not None and job.error.code == "vault_locked"
        with pytest.raises(MemoriesError):
            await middle.ok(p.MemoryList(vault="notes"))


async def test_a_model_install_embeds_the_vaults_by_itself(tmp_path: Path) -> None:
    """Notes stored before any model was installed: ``rag model-install`` starts their background index."""
    async with _auto(tmp_path) as middle:
        batches = _model(middle)
        files = [path for path in middle.daemon.models.path.rglob("*") if path.is_file()]
        for path in files:  # _model wrote the files: the install below writes them again
            path.unlink()
        for n in range(3):
            await middle.add(f"alpha {n}")
        assert await _index_jobs(middle) == [] and batches == []

        def download(request: w.DownloadModel) -> w.ModelInstalled:
            for path in files:
                path.write_bytes(b"fake")
            return w.ModelInstalled(files=[])

        middle.fakes["remote"].handlers[w.DownloadModel] = download
        await middle.ok(p.RagModelInstall(from_dir=None))
        [job] = await _settled(middle, 1)
        assert (job.background, job.state) == (True, "done") and sum(batches) == 3
        status = await middle.ok(p.RagStatus(vault="notes"))
        assert (status.embedded, status.missing) == (3, 0)
