"""The job gate in-process (issue 7): one budget per job, cuts with no grace, one acceptance check, late results
dropped. A real daemon middle (store, keys, jobs, services) with fake workers; time is trio's ``MockClock``, moved
only by the fake workers' steps, so nothing here depends on how fast the machine is."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.core.context import RequestContext
from memories.daemon.core.jobs import GRACE
from memories.errors import MemoriesError
from tests.fixtures.middle import Middle

SEARCH = p.MemorySearch(vault="notes", query="alpha")


async def fails(code: str, middle: Middle, request: p.Request, ctx: RequestContext | None = None) -> MemoriesError:
    with pytest.raises(MemoriesError) as caught:
        await middle.ok(request, ctx)
    assert caught.value.code == code, caught.value
    return caught.value


class HeldStoreCall:
    """Hold the ``nth`` store call of the function named ``name`` in its thread until released (a slow step of a
    job, such as the last store call of a search)."""

    def __init__(self, middle: Middle, name: str, nth: int = 1) -> None:
        self._started = threading.Event()
        self._release = threading.Event()
        self._calls = 0
        gate = middle.daemon.store
        run = gate.run

        async def held_run(fn: Any, *args: Any) -> Any:
            if getattr(fn, "__name__", None) == name:
                self._calls += 1
                if self._calls == nth:
                    return await run(self._held, fn, *args)
            return await run(fn, *args)

        gate.run = held_run  # type: ignore[method-assign]

    def _held(self, fn: Any, *args: Any) -> Any:
        self._started.set()
        self._release.wait(10)
        return fn(*args)

    async def started(self) -> None:
        """Wait until the held call is running in its thread."""
        while not self._started.is_set():
            await trio.sleep(0.001)

    def release(self) -> None:
        self._release.set()


def job_of(middle: Middle, kind: str) -> Any:
    return next(j for j in middle.daemon.jobs._history if j.kind == kind)


async def _settle(middle: Middle, request: Any, outcome: dict[str, Any]) -> None:
    """Ask ``request`` and keep what it ended with: ``outcome["result"]`` or ``outcome["error"]``."""
    try:
        outcome["result"] = await middle.ok(request)
    except MemoriesError as exc:
        outcome["error"] = exc


# -- acceptance 1: nothing is delivered after a cancel or a lock during the last step ---------------------------


@pytest.mark.parametrize("how", ["cancel", "lock"])
async def test_a_cut_during_the_final_store_call_drops_the_search_result(middle: Middle, how: str) -> None:
    await middle.add("alpha note")
    await middle.ok(SEARCH)  # warm: the next search's last step is the store's eligibility check
    held = HeldStoreCall(middle, "damaged")  # the last store call of a search
    outcome: dict[str, Any] = {}

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_settle, middle, SEARCH, outcome)
        await held.started()
        job = next(j for j in middle.daemon.jobs._active.values() if j.kind == "search")
        # Both cut the job at once, then wait for it to end: it ends when the held store call returns.
        nursery.start_soon(middle.ok, p.JobCancel(job_id=job.id) if how == "cancel" else p.Lock())
        await trio.testing.wait_all_tasks_blocked()
        held.release()
    assert "result" not in outcome
    assert outcome["error"].code == ("cancelled" if how == "cancel" else "vault_locked")
    assert job.state != "done" and job.error.code == outcome["error"].code
    status = await middle.ok(p.Status())
    assert status.dropped_results == 1


async def _granted_search(middle: Middle) -> tuple[p.GrantCreated, p.Granted]:
    await middle.add("alpha note")
    grant = await middle.ok(p.GrantCreate(vault="notes", client="test", scope=["search"], expires="1h"))
    call = p.Granted(token=grant.token, call=p.ToolSearch(query="alpha"))
    await middle.ok(call)  # warm, and the grant works
    return grant, call


async def test_a_revoke_during_a_granted_search_cuts_its_job_at_once(middle: Middle) -> None:
    grant, call = await _granted_search(middle)
    middle.index.holds[w.IndexQuery] = trio.Event()  # a step in flight, never released
    middle.index.started.pop(w.IndexQuery, None)
    outcome: dict[str, Any] = {}

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_settle, middle, call, outcome)
        await middle.index.started.setdefault(w.IndexQuery, trio.Event()).wait()
        job = next(j for j in middle.daemon.jobs._active.values() if j.kind == "search")
        await middle.ok(p.GrantRevoke(id=grant.id))
    assert "result" not in outcome
    assert outcome["error"].code == "grant_revoked"
    assert job.state != "done" and job.error.code == "grant_revoked"


async def test_a_job_cut_while_its_step_is_still_ending_is_listed_as_cancelling(middle: Middle) -> None:
    """Between the cut and the job's end (at once for a worker step; a store call must finish first, and ``jobs
    cancel`` answers after 5 s at most) the job reads ``cancelling``, not ``running``."""
    await middle.add("alpha note")
    middle.index.holds[w.IndexQuery] = trio.Event()  # a step in flight, never released
    middle.index.started.pop(w.IndexQuery, None)

    async def search() -> None:
        with pytest.raises(MemoriesError):
            await middle.ok(SEARCH)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(search)
        await middle.index.started.setdefault(w.IndexQuery, trio.Event()).wait()
        job = next(j for j in middle.daemon.jobs._active.values() if j.kind == "search")
        middle.daemon.jobs.cancel(job.id)  # the cut; the job ends at the scheduler's next turn
        assert job.info().state == "cancelling"
    assert job.info().state == "cancelled"
    assert {j.id: j.state for j in (await middle.ok(p.Jobs())).jobs}[job.id] == "cancelled"


async def test_a_grant_that_expires_during_the_last_step_of_its_search_drops_the_result(middle: Middle) -> None:
    """The grant's check (lock, auth epoch, expiry by the daemon's clock) is part of the gate's acceptance check."""
    grant, call = await _granted_search(middle)
    assert grant.expires is not None
    held = HeldStoreCall(middle, "damaged")  # the last store call of a search
    outcome: dict[str, Any] = {}

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_settle, middle, call, outcome)
        await held.started()
        job = next(j for j in middle.daemon.jobs._active.values() if j.kind == "search")
        middle.daemon.grants._clock = lambda: grant.expires + 1  # type: ignore[method-assign,operator]
        held.release()
    assert "result" not in outcome
    assert outcome["error"].code == "grant_expired"
    assert job.state != "done" and job.error.code == "grant_expired"
    assert (await middle.ok(p.Status())).dropped_results == 1


async def test_an_ingest_cancelled_mid_way_keeps_and_lists_the_cards_it_stored(middle: Middle, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    for number in range(5):
        (folder / f"n{number}.md").write_text(f"# note {number}\n\nalpha {number}\n")
    held = HeldStoreCall(middle, "store_note", nth=3)
    outcome: dict[str, Any] = {}

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_settle, middle, p.RagIngest(vault="notes", paths=[str(folder)]), outcome)
        await held.started()
        job = next(j for j in middle.daemon.jobs._active.values() if j.kind == "ingest")
        nursery.start_soon(middle.ok, p.JobCancel(job_id=job.id))  # it answers once the job has ended
        await trio.testing.wait_all_tasks_blocked()
        held.release()
    error = outcome["error"]
    assert error.code == "cancelled"
    stored = error.details["stored"]
    assert [Path(card["path"]).name for card in stored] == ["n0.md", "n1.md", "n2.md"]
    assert {card["status"] for card in stored} == {"added"}
    listing = await middle.ok(p.MemoryList(vault="notes"))
    assert {r.id for r in listing.records} == {card["id"] for card in stored}  # kept


# -- acceptance 2 and 3: budget, cuts, late replies, crashes, epochs ---------------------------------------------


async def test_a_foreground_job_whose_every_run_is_invalidated_ends_at_its_budget(
    middle: Middle, mock_clock: trio.testing.MockClock
) -> None:
    await middle.add("alpha note")
    steps: list[float] = []
    query = middle.index.handlers()[w.IndexQuery]

    async def edited_meanwhile(request: w.IndexQuery) -> Any:
        steps.append(trio.current_time())
        mock_clock.jump(70)  # a slow step, during which someone edits the vault
        middle.daemon.epochs.bump(middle.vault_id)
        return await query(request)

    middle.fakes["index"].handlers[w.IndexQuery] = edited_meanwhile
    start = trio.current_time()
    error = await fails("budget_exceeded", middle, SEARCH)
    assert len(steps) >= 4  # it ran again and again, within one budget (not a fresh one per run)
    assert all(at < start + 300 for at in steps)  # no step started after start + budget
    assert trio.current_time() < start + 300 + 70
    assert "300 s" in error.message


async def test_a_stale_epoch_runs_the_job_again_and_delivers_the_new_state(middle: Middle) -> None:
    await middle.add("alpha one")
    query = middle.index.handlers()[w.IndexQuery]
    edited = False

    async def edit_once(request: w.IndexQuery) -> Any:
        nonlocal edited
        if not edited:
            edited = True
            await middle.add("alpha two")  # lands while the first run's query is in flight
        return await query(request)

    middle.fakes["index"].handlers[w.IndexQuery] = edit_once
    epoch_at_start = middle.epoch()
    report = await middle.ok(SEARCH)
    assert sorted(r.chunks[0].text for r in report.results) == ["alpha one", "alpha two"]
    job = job_of(middle, "search")
    assert job.epoch == middle.epoch() > epoch_at_start
    assert (await middle.ok(p.Status())).dropped_results == 0  # the stale reply was dropped before acceptance


@pytest.mark.parametrize("how", ["cancel", "lock"])
async def test_a_cut_during_a_worker_step_ends_the_job_at_once_with_no_grace(
    middle: Middle, mock_clock: trio.testing.MockClock, how: str
) -> None:
    await middle.add("alpha note")
    middle.index.holds[w.IndexSync] = trio.Event()  # never released: the step would run for ever
    outcome: dict[str, Any] = {}

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_settle, middle, SEARCH, outcome)
        await middle.index.started.setdefault(w.IndexSync, trio.Event()).wait()
        before = trio.current_time()
        job = next(j for j in middle.daemon.jobs._active.values() if j.kind == "search")
        await middle.ok(p.JobCancel(job_id=job.id) if how == "cancel" else p.Lock())
    assert outcome["error"].code == ("cancelled" if how == "cancel" else "vault_locked")
    assert trio.current_time() == before  # cut at once: the clock never moved
    if how == "cancel":
        await trio.testing.wait_all_tasks_blocked()
        assert middle.fakes["index"].cancels  # the worker was told to stop the step (lock restarts it instead)


async def test_a_reply_after_cancel_is_dropped_and_counted(middle: Middle) -> None:
    await middle.add("alpha note")
    middle.index.holds[w.IndexSync] = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fails, "cancelled", middle, SEARCH)
        await middle.index.started.setdefault(w.IndexSync, trio.Event()).wait()
        job = next(j for j in middle.daemon.jobs._active.values() if j.kind == "search")
        listing = await middle.ok(p.JobCancel(job_id=job.id))
        assert [j.id for j in listing.jobs] == [job.id]
    middle.index.holds[w.IndexSync].set()  # the fake answers late
    await trio.testing.wait_all_tasks_blocked()
    status = await middle.ok(p.Status())
    assert status.dropped_replies == 1
    assert (job.state, job.error.code) == ("cancelled", "cancelled")
    await fails("job_not_found", middle, p.JobCancel(job_id=job.id))


async def test_a_step_stuck_past_the_budget_is_cut_after_the_grace_and_its_worker_replaced(
    middle: Middle, mock_clock: trio.testing.MockClock
) -> None:
    await middle.add("alpha note")
    middle.index.holds[w.IndexSync] = trio.Event()  # a step that never returns
    outcome: dict[str, Any] = {}

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_settle, middle, SEARCH, outcome)
        await middle.index.started.setdefault(w.IndexSync, trio.Event()).wait()
        mock_clock.jump(300 + GRACE - 1)  # past the budget, within the grace: the step may still finish
        await trio.testing.wait_all_tasks_blocked()
        assert "error" not in outcome
        mock_clock.jump(2)
    assert outcome["error"].code == "budget_exceeded" and "far past" in outcome["error"].message
    index = middle.daemon.workers.index
    while middle.fakes["index"].spawned < 2 or index.info().state != "ready":
        await trio.sleep(0)  # the stuck worker is killed and a fresh one started (after a 0.1 s backoff)
        mock_clock.jump(0.1)
    assert index.restarts == 1
    del middle.index.holds[w.IndexSync]
    middle.index.caches.clear()  # a fresh index worker starts cold
    assert len((await middle.ok(SEARCH)).results) == 1


async def test_a_worker_crash_mid_step_fails_the_job_and_the_next_one_works(middle: Middle) -> None:
    await middle.add("alpha note")
    query = middle.index.handlers()[w.IndexQuery]
    crashed = False

    async def crash_once(request: w.IndexQuery) -> Any:
        nonlocal crashed
        if not crashed:
            crashed = True
            middle.fakes["index"].crash()
            await trio.sleep_forever()
        return await query(request)

    middle.fakes["index"].handlers[w.IndexQuery] = crash_once
    await fails("worker_crashed", middle, SEARCH)
    middle.index.caches.clear()  # a restarted index worker starts cold
    report = await middle.ok(SEARCH)
    assert [r.chunks[0].text for r in report.results] == ["alpha note"]
    assert middle.daemon.workers.index.restarts == 1


async def test_an_ingest_adopts_its_own_writes(middle: Middle, tmp_path: Path) -> None:
    note = tmp_path / "alpha.md"
    note.write_text("# Alpha\n\nalpha text\n")
    epoch_at_start = middle.epoch()
    report = await middle.ok(p.RagIngest(vault="notes", paths=[str(note)]))
    assert [r.status for r in report.results] == ["added"]
    job = job_of(middle, "ingest")
    assert job.state == "done"
    assert job.epoch == middle.epoch() > epoch_at_start  # its own write, adopted: not a stale job
    assert middle.index.caches[middle.vault_id].epoch == middle.epoch()  # the cache was refreshed at that epoch


async def test_jobs_the_daemon_starts_need_no_client(middle: Middle) -> None:
    ctx = RequestContext()  # attached to nothing, as for background work
    await middle.add("alpha note")
    report = await middle.ok(SEARCH, ctx)
    assert len(report.results) == 1 and ctx.warnings == []


def _fake_model(middle: Middle, mock_clock: trio.testing.MockClock, seconds_per_batch: float) -> None:
    """Model files where the daemon looks for them, and a fake embedding worker that takes its time per batch."""

    def embed(request: w.EmbedBatch) -> w.Vectors:
        mock_clock.jump(seconds_per_batch)
        return w.Vectors(vectors=bytes(16 * len(request.inputs)), dimension=4)

    middle.fake_model(embed)


@pytest.mark.parametrize("background", [False, True])
async def test_an_index_stops_at_its_budget_unless_it_runs_in_the_background_in_fresh_rounds(
    middle: Middle, mock_clock: trio.testing.MockClock, background: bool
) -> None:
    for number in range(30):
        await middle.add(f"alpha {number}")
    await middle.ok(SEARCH)  # the cache holds the vault
    _fake_model(middle, mock_clock, seconds_per_batch=100)  # 8 chunks a batch: the fourth would start at 300 s
    if not background:
        error = await fails("budget_exceeded", middle, p.RagIndex(vault="notes"))
        assert error.details == {"embedded_now": 24, "reused": 0, "missing": 6}
        return
    started = await middle.ok(p.RagIndex(vault="notes", background=True))
    job = next(j for j in middle.daemon.jobs._active.values() if j.id == started.job_id)
    while job.active:
        await trio.sleep(0)
    assert (job.state, job.error) == ("done", None)
    assert len(middle.index.embedded(middle.vault_id)) == 30


async def test_searches_during_a_long_ingest_answer_from_an_epoch_no_older_than_their_start(
    middle: Middle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12, defect 5: no search fails with vault_changed while an ingest runs."""
    from memories.daemon.ingest import job as ingest
    from memories.daemon.ingest import note_files

    folder = tmp_path / "notes"
    folder.mkdir()
    for number in range(3 * ingest.STEP_FILES):
        (folder / f"n{number:03}.md").write_text(f"# note {number}\n\nalpha {number}\n")
    pauses = {ingest.STEP_FILES + 5: threading.Event(), 2 * ingest.STEP_FILES + 5: threading.Event()}
    reached = {at: threading.Event() for at in pauses}
    read_text = note_files.read_note
    reads = 0

    def paused_read(candidate: Any) -> Any:  # an ingest that takes its time, in its read thread
        nonlocal reads
        reads += 1
        if reads in pauses:
            reached[reads].set()
            pauses[reads].wait(10)
        return read_text(candidate)

    monkeypatch.setattr(note_files, "read_note", paused_read)
    answers: list[tuple[int, int, int, list[str]]] = []

    async def search() -> None:
        ctx = RequestContext()
        start = middle.epoch()
        report = await middle.ok(p.MemorySearch(vault="notes", query="alpha", limit=100), ctx)
        answers.append((start, job_of_latest(middle, "search").epoch, len(report.results), ctx.warnings))

    epoch_before = middle.epoch()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(middle.ok, p.RagIngest(vault="notes", paths=[str(folder)]))
        for at, pause in pauses.items():
            while not reached[at].is_set():
                await trio.sleep(0.001)
            for _ in range(5):
                await search()
            pause.set()
    assert len(answers) == 10
    for start, epoch, found, warnings in answers:
        assert epoch >= start and found >= ingest.STEP_FILES
        assert any("an ingest into notes is in progress" in note for note in warnings)
    assert job_of(middle, "ingest").state == "done"
    assert middle.epoch() - epoch_before == 3  # one change per step of STEP_FILES files, not one per file


def job_of_latest(middle: Middle, kind: str) -> Any:
    return [j for j in middle.daemon.jobs._history if j.kind == kind][-1]
