"""A vault over its limits (issue 28 item 1) in the daemon's middle, with the real index worker's handlers
in-process: ``rag ingest`` keeps every note; the vault is refused with the figures it has now and the setting to
raise, and after the first refusal (also after a lock and a restart: the figures are sealed in the home) with no
index build, no analysis and no request to the index worker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import workers.index
from memories import protocol as p
from memories import worker_protocol as w
from memories.config import RagConfig
from memories.daemon.core.context import RequestContext
from memories.daemon.index import feed as daemon_feed
from memories.daemon.index import snapshots as daemon_snapshots
from memories.errors import MemoriesError
from tests.fixtures.middle import PASSPHRASE, Middle, running_middle
from tests.middle.test_index_snapshots import Analyses, _real_index, restarted

LIMIT = 5
"""``[rag] max_chunks`` of these tests (set through the struct: ``config.toml`` accepts 1,000 and up)."""


class IndexCalls:
    """Counts the requests of each type the index worker is sent (a build is its ``IndexSync`` batches)."""

    def __init__(self, middle: Middle) -> None:
        self.counts: dict[type, int] = {}
        handlers = middle.fakes["index"].handlers
        for kind, handler in list(handlers.items()):
            handlers[kind] = self._counting(kind, handler)

    def _counting(self, kind: type, handler: Any) -> Any:
        def run(request: Any) -> Any:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            return handler(request)

        return run

    def reset(self) -> None:
        self.counts.clear()


@pytest.fixture
async def over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Middle]:
    monkeypatch.setattr(daemon_snapshots, "WRITE_DELAY_SECONDS", 0.0)
    monkeypatch.setattr(daemon_feed, "SYNC_BATCH", 2)  # the refusal comes before the last batch: the rest is counted
    workers.index._caches.clear()
    async with running_middle(tmp_path, RagConfig(max_chunks=LIMIT)) as middle:
        _real_index(middle)
        yield middle
    workers.index._caches.clear()


def _notes(folder: Path, count: int) -> Path:
    folder.mkdir(exist_ok=True)
    for number in range(count):
        (folder / f"n{number:02}.md").write_text(f"# Note {number}\n\nzebracorn number {number} of the herd\n")
    return folder


async def _refused(middle: Middle, mode: p.SearchMode = "bm25") -> MemoriesError:
    with pytest.raises(MemoriesError) as caught:
        await middle.ok(p.RagSearch(vault="notes", query="zebracorn", mode=mode))
    assert caught.value.code == "vault_too_large"
    return caught.value


async def test_an_ingest_over_max_chunks_keeps_every_note_and_later_refusals_build_nothing(
    over: Middle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = await over.ok(p.RagIngest(vault="notes", paths=[str(_notes(tmp_path / "notes", 8))]))
    assert [result.status for result in report.results] == ["added"] * 8
    listed = await over.ok(p.MemoryList(vault="notes"))
    assert len(listed.records) == 8  # every note is stored
    assert report.over_limit is not None and report.over_limit.details is not None
    details = report.over_limit.details
    assert (details["chunks"], details["limit"], details["max"], details["over"]) == (8, "chunks", LIMIT, 3)
    assert details["setting"] == "rag.max_chunks" and details["text_bytes"] > 0
    assert "holds 8 chunks" in report.over_limit.message and "max_chunks is raised" in report.over_limit.message

    calls, analyses = IndexCalls(over), Analyses(monkeypatch)
    for mode in ("bm25", "bm25", None):  # None: the default mode, chosen as for any search
        error = await _refused(over, mode)
        assert error.details == details
    with pytest.raises(MemoriesError) as caught:
        await over.ok(p.MemorySearch(vault="notes", query="zebracorn"))
    assert caught.value.code == "vault_too_large"
    assert calls.counts == {} and analyses.count == 0  # refused at once: nothing reached the index worker

    ctx = RequestContext()
    status = await over.ok(p.RagStatus(vault="notes"), ctx)
    assert status.over_limit is not None and status.over_limit.details == details
    assert status.limits["chunks"] == LIMIT and any("max_chunks is raised" in warning for warning in ctx.warnings)

    await over.ok(p.Lock())
    await over.ok(p.Unlock(passphrase=PASSPHRASE))
    calls.reset()
    assert (await _refused(over)).details == details
    assert analyses.count == 0 and calls.counts == {}  # the sealed figures: not even the (restarted) worker asked
    assert over.daemon.index_feed.over.measured == 1  # measured once, at the ingest: the figures were sealed


async def test_the_figures_survive_a_restart_and_a_change_measures_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemon_snapshots, "WRITE_DELAY_SECONDS", 0.0)
    workers.index._caches.clear()
    async with running_middle(tmp_path, RagConfig(max_chunks=LIMIT)) as middle:
        _real_index(middle)
        await middle.ok(p.RagIngest(vault="notes", paths=[str(_notes(tmp_path / "notes", 7))]))
    workers.index._caches.clear()
    analyses = Analyses(monkeypatch)
    async with restarted(middle) as again:
        calls = IndexCalls(again)
        error = await _refused(again)
        assert error.details is not None and error.details["chunks"] == 7
        assert analyses.count == 0 and set(calls.counts) == {w.IndexQuery}  # no build, no count: the sealed figures
        assert again.daemon.index_feed.over.measured == 0
        await again.ok(p.MemoryAdd(vault="notes", kind="memory", sensitivity="general", title="t", body=b"more"))
        error = await _refused(again)  # a new revision of the vault: measured again
        assert error.details is not None and error.details["chunks"] == 8
        assert again.daemon.index_feed.over.measured == 1
        listed = await again.ok(p.MemoryList(vault="notes"))
        for record in listed.records[:4]:
            await again.ok(p.MemoryDelete(vault="notes", id=record.id))
        found = await again.ok(p.RagSearch(vault="notes", query="zebracorn", mode="bm25"))
        assert found.results  # under the limit again: searched
        status = await again.ok(p.RagStatus(vault="notes"))
        assert status.over_limit is None and status.cache == "warm"


async def test_a_snapshot_over_limits_lowered_since_is_refused_as_a_build_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemon_snapshots, "WRITE_DELAY_SECONDS", 3600.0)  # written by `daemon stop`
    workers.index._caches.clear()
    async with running_middle(tmp_path) as middle:
        _real_index(middle)
        await middle.ok(p.RagIngest(vault="notes", paths=[str(_notes(tmp_path / "notes", 6))]))
        assert len((await middle.ok(p.RagSearch(vault="notes", query="zebracorn", mode="bm25"))).results) == 6
    workers.index._caches.clear()
    lowered = msgspec.structs.replace(middle.daemon.config, rag=RagConfig(max_chunks=LIMIT))
    analyses = Analyses(monkeypatch)
    async with restarted(middle, lowered) as again:
        error = await _refused(again)
        assert error.details is not None and (error.details["chunks"], error.details["max"]) == (6, LIMIT)
        assert analyses.count == 0 and again.daemon.snapshots.restored == 0  # refused from the snapshot's figures
        calls = IndexCalls(again)
        await _refused(again)
        assert calls.counts == {}
