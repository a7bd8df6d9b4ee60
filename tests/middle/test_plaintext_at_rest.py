"""Plaintext in the daemon's log and database (issue 29, item 15): a watch that pauses logs no folder path (its
reason, which names the folder, was written to daemon.log as it is), and the sync state is sealed (it held the
sync folder's path in clear in the ``sync`` table). A state written in clear by an earlier release is still read,
and sealed at its next write."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest

from memories import protocol as p
from memories.errors import MemoriesError
from memories.sync.engine import SyncState
from tests.fixtures.middle import Middle
from tests.middle.test_watch import Clock, clock, notes, register, scan, titles

__all__ = ["clock"]  # the watches' clock fixture

MARKER = "zqxplantedfolder"


async def test_a_watch_that_pauses_logs_no_folder_path(
    middle: Middle, tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    folder = notes(tmp_path / MARKER / "notes", 40)
    await register(middle, folder)
    for number in range(11):  # over the deletion limit: max(5, 25 % of 40)
        (folder / f"n{number:03}.md").unlink()
    clock.now += 1
    await scan(middle)
    clock.now += 11
    with pytest.raises(MemoriesError) as paused:
        await scan(middle)
    assert paused.value.code == "watch_paused" and len(await titles(middle)) == 40
    [info] = (await middle.ok(p.RagWatchList())).watches
    assert info.state == "paused" and str(folder) in (info.paused or "")  # the person is told which folder
    (folder.parent / "elsewhere").mkdir()
    await middle.ok(p.RagWatch(vault="notes", folder=str(folder), resume=True, accept_deletions=True))
    middle.daemon.folders.watchers.stop_all()
    folder.rename(folder.parent / "gone")  # the folder itself vanishes: the other reason to pause
    clock.now += 1
    with pytest.raises(MemoriesError):
        await scan(middle)

    paused_lines = [record.getMessage() for record in caplog.records if "paused" in record.getMessage()]
    assert len(paused_lines) == 2, paused_lines
    assert all(MARKER not in line and "<folder>" in line for line in paused_lines), paused_lines
    assert all(MARKER not in record.getMessage() for record in caplog.records)


def _sync_rows(middle: Middle) -> list[bytes]:
    with sqlite3.connect(middle.daemon.home.db_path) as database:
        return [row[0] for row in database.execute("SELECT state FROM sync")]


async def test_the_sync_state_is_sealed_and_a_state_in_clear_is_still_read(middle: Middle, tmp_path: Path) -> None:
    folder = tmp_path / MARKER
    await middle.ok(p.SyncInit(vault="notes", folder=str(folder), passphrase="the sync passphrase"))
    await middle.add("ferns grow in shade")
    await middle.ok(p.SyncPush(vault="notes"))

    [sealed] = _sync_rows(middle)
    assert MARKER.encode() not in sealed
    with pytest.raises(msgspec.DecodeError):
        msgspec.msgpack.decode(sealed, type=SyncState)
    status = await middle.ok(p.SyncStatus(vault="notes"))
    assert status.folder == str(folder) and status.pushed == 1

    clear = SyncState(folder=str(folder), device=status.device, last_push=status.last_push, pushed=1)
    with sqlite3.connect(middle.daemon.home.db_path) as database:  # as a release before the seal stored it
        database.execute("UPDATE sync SET state = ?", (msgspec.msgpack.encode(clear),))
    assert (await middle.ok(p.SyncStatus(vault="notes"))).folder == str(folder)
    await middle.ok(p.SyncPush(vault="notes"))
    [resealed] = _sync_rows(middle)
    assert MARKER.encode() not in resealed and (await middle.ok(p.SyncStatus(vault="notes"))).folder == str(folder)
