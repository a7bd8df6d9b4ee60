"""A crashed worker does not end background work for good (issue 29, item 4), in the daemon's middle: the embedding
worker dies in the middle of a background index job (as ``kill -9`` does); the job restarts with the worker after a
bounded backoff, the failure is in ``rag status`` and the log, and a search meanwhile does not embed the rest itself;
after the retries are used up, a search that does embed a background job's work says so."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.core.context import RequestContext
from memories.daemon.index import background
from tests.fixtures.middle import Middle, running_middle

FINISHED = ("done", "failed", "cancelled")


async def _index_jobs(middle: Middle) -> list[p.JobInfo]:
    return [job for job in (await middle.ok(p.Jobs())).jobs if job.kind == "index"]


async def _until(middle: Middle, done: object) -> list[p.JobInfo]:
    """The index jobs once ``done(jobs)`` holds (30 s for a hang; no timing assertion)."""
    with trio.fail_after(30):
        while True:
            jobs = await _index_jobs(middle)
            if done(jobs):  # type: ignore[operator]
                return jobs
            await trio.sleep(0.01)


def _crashing_model(middle: Middle, crashes: int, gate: trio.Event) -> list[int]:
    """A fake local model whose first ``crashes`` batches kill the embedding worker mid-batch (while a background job
    runs: a search's own batches are answered), and whose other batches wait for ``gate``; the list grows by each
    answered batch's size."""
    batches: list[int] = []
    fake = middle.fakes["embedding"]
    left = [crashes]

    async def embed(request: w.EmbedBatch) -> w.Vectors:
        vault = await middle.daemon.store.resolve("notes")
        if left[0] and middle.daemon.indexing.background_job(vault) is not None:
            left[0] -= 1
            fake.crash()
            await trio.sleep_forever()
        await gate.wait()
        batches.append(len(request.inputs))
        return w.Vectors(vectors=bytes(16 * len(request.inputs)), dimension=4)

    middle.fake_model(embed)  # type: ignore[arg-type]
    fake.handlers[w.EmbedQuery] = lambda r: w.Vectors(vectors=bytes(16), dimension=4)
    return batches


@pytest.fixture(autouse=True)
def _short_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background, "RETRY_FIRST_SECONDS", 0.05)
    monkeypatch.setattr(background, "RETRY_MAX_SECONDS", 0.1)


async def test_a_background_job_a_crash_ended_restarts_with_the_worker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="memories.indexing")
    async with running_middle(tmp_path, auto_index="local") as middle:
        gate = trio.Event()
        batches = _crashing_model(middle, 1, gate)
        for n in range(20):
            await middle.add(f"alpha {n}")
        jobs = await _until(middle, lambda jobs: len(jobs) == 2)  # the crashed job, and its retry
        assert (jobs[0].state, jobs[0].error and jobs[0].error.code) == ("failed", "worker_crashed")
        assert jobs[1].background and jobs[1].state in ("queued", "running")
        status = await middle.ok(p.RagStatus(vault="notes"))
        failure = status.background_failure
        assert failure is not None and (failure.job_id, failure.retry_job) == (jobs[0].id, jobs[1].id)
        assert (failure.error.code, failure.attempt) == ("worker_crashed", 1)
        assert any(f"job {jobs[1].id} retries it" in record.getMessage() for record in caplog.records)

        ctx = RequestContext()  # the retry is the vault's background job: a search embeds nothing itself
        assert (await middle.ok(p.RagSearch(vault="notes", query="alpha"), ctx)).mode == "bm25"
        assert any(f"background job {jobs[1].id} embeds the rest" in warning for warning in ctx.warnings)
        ctx = RequestContext()
        await middle.ok(p.RagSearch(vault="notes", query="alpha", mode="vector"), ctx)
        assert batches == [] and any("searched the 0 of 20 chunks" in warning for warning in ctx.warnings)

        gate.set()
        jobs = await _until(middle, lambda jobs: len(jobs) == 2 and all(job.state in FINISHED for job in jobs))
        assert jobs[1].state == "done" and sum(batches) == 20
        status = await middle.ok(p.RagStatus(vault="notes"))
        assert (status.embedded, status.missing, status.background_failure) == (20, 0, None)


async def test_after_the_retries_a_search_that_embeds_the_rest_says_so(tmp_path: Path) -> None:
    async with running_middle(tmp_path, auto_index="local") as middle:
        gate = trio.Event()
        gate.set()
        batches = _crashing_model(middle, background.RETRY_ATTEMPTS + 1, gate)
        for n in range(5):
            await middle.add(f"alpha {n}")
        count = background.RETRY_ATTEMPTS + 1
        jobs = await _until(middle, lambda jobs: len(jobs) == count and all(job.state in FINISHED for job in jobs))
        assert all(job.error and job.error.code == "worker_crashed" for job in jobs)
        failure = (await middle.ok(p.RagStatus(vault="notes"))).background_failure
        assert failure is not None and (failure.job_id, failure.retry_job) == (jobs[-1].id, None)
        ctx = RequestContext()
        assert (await middle.ok(p.RagSearch(vault="notes", query="alpha"), ctx)).mode == "hybrid"
        assert sum(batches) == 5
        assert any(
            f"this search embedded 5 chunks itself: background index job {jobs[-1].id} failed" in warning
            for warning in ctx.warnings
        )
        await middle.add("alpha 5")  # a change: the vault has its retries again, and the job ends well
        await _until(middle, lambda jobs: len(jobs) == count + 1 and all(job.state in FINISHED for job in jobs))
        assert (await middle.ok(p.RagStatus(vault="notes"))).background_failure is None
