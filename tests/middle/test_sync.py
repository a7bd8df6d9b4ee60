"""Sync in the daemon's middle: what a pull starts, with two in-process daemons sharing one folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio
import trio.testing

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import SyncConfig
from tests.fixtures.middle import Middle, running_middle

SYNC_PASSPHRASE = "the sync passphrase"


async def _index_jobs(middle: Middle) -> list[p.JobInfo]:
    """The index jobs of ``middle`` once none is queued or running."""
    while True:
        jobs = [job for job in (await middle.ok(p.Jobs())).jobs if job.kind == "index"]
        if all(job.state in ("done", "failed", "cancelled") for job in jobs):
            return jobs
        await trio.sleep(0.01)


async def test_a_pull_that_changes_the_vault_reindexes_it_in_the_background_without_a_model(tmp_path: Path) -> None:
    """With no embedding model installed, a pull that imported a note still starts the background index job
    docs/guide/sync.md promises (`memories jobs` shows it): it brings the BM25 index up to date, so the first
    search after the pull does not pay for it. A pull that imports nothing starts nothing."""
    folder = tmp_path / "shared"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    async with running_middle(tmp_path / "a") as a, running_middle(tmp_path / "b", auto_index="local") as b:
        await a.ok(p.SyncInit(vault="notes", folder=str(folder), passphrase=SYNC_PASSPHRASE))
        joined = await b.ok(p.SyncJoin(folder=str(folder), passphrase=SYNC_PASSPHRASE, name="shared"))
        note = await a.add("ferns grow in shade")
        await a.ok(p.SyncPush(vault="notes"))
        assert (await b.ok(p.SyncPull(vault="shared"))).imported == 1
        [job] = await _index_jobs(b)
        assert (job.vault, job.background, job.state, job.error) == (joined.id, True, "done", None)
        cache = b.index.caches[joined.id]
        assert cache.epoch == b.daemon.epochs.get(joined.id) and set(cache.records) == {note.id}

        assert (await b.ok(p.SyncPull(vault="shared"))).imported == 0
        assert len(await _index_jobs(b)) == 1

        # With a model (and [rag] auto_index = "local"), the same job embeds what the pull brought.
        b.fake_model(lambda batch: w.Vectors(vectors=bytes(16 * len(batch.inputs)), dimension=4))
        second = await a.add("mosses grow in shade too")
        await a.ok(p.SyncPush(vault="notes"))
        assert (await b.ok(p.SyncPull(vault="shared"))).imported == 1
        assert [job.state for job in await _index_jobs(b)] == ["done", "done"]
        assert b.index.embedded(joined.id) == {note.id, second.id}


async def test_a_failing_timed_sync_is_shown_in_sync_status_and_the_timer_goes_on(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """An OS error from the folder during the timed sync escaped into the daemon's nursery and stopped the daemon
    (issue 21 item 4): now it is logged, shown by `sync status`, and the next round runs."""
    mock_clock.rate = 1.0  # real time, moved on by hand to the timer's next round
    async with running_middle(tmp_path, sync=SyncConfig(interval_seconds=60)) as a:
        folder = tmp_path / "shared"
        await a.ok(p.SyncInit(vault="notes", folder=str(folder), passphrase=SYNC_PASSPHRASE))
        note = await a.add("ferns grow in shade")
        revision = (await a.ok(p.MemoryRead(vault="notes", id=note.id))).revision_id
        (folder / "payloads" / f"{revision}.rev").mkdir()  # push renames its payload over a folder: EISDIR

        async def after_a_round(done: Callable[[p.SyncReport], bool]) -> p.SyncReport:
            mock_clock.jump(60)
            with trio.fail_after(60):
                while not done(report := await a.ok(p.SyncStatus(vault="notes"))):
                    await trio.sleep(0.01)
            return report

        failed = await after_a_round(lambda report: report.timer_error is not None)
        assert failed.timer_error is not None and failed.timer_error.code == "sync_folder_error"
        assert str(folder) in failed.timer_error.message and failed.last_push is None
        assert (await a.ok(p.Status())).locked is False  # the daemon still answers

        (folder / "payloads" / f"{revision}.rev").rmdir()
        repaired = await after_a_round(lambda report: report.last_push is not None)
        assert repaired.timer_error is None and repaired.pushed == 1
