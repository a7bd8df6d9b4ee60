"""Watched folders in the daemon's middle (issue 20): registration, the scans' imports, renames and deletions, the
deletion rules and the pause, ``--on-delete keep``, refusals, lock and the catch-up at unlock, the watcher's
fallback. Scans are driven one by one (:meth:`FolderWatches.scan`) on a clock the test moves, so the 10 s rule
needs no sleep; the tests that need the real watcher poll with a 30 s ceiling."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import EmbeddingConfig, RagConfig
from memories.daemon.core.context import RequestContext
from memories.errors import MemoriesError
from memories.testing import TestHooks
from tests.fixtures.middle import PASSPHRASE, Middle, running_middle


class Clock:
    """The watches' clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(middle: Middle) -> Clock:
    clock = Clock()
    middle.daemon.folders.clock = clock
    return clock


def notes(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        (folder / f"n{number:03}.md").write_text(f"# Note {number}\n\nabout lanterns {number}\n")
    return folder


async def register(middle: Middle, folder: Path, **options: object) -> p.WatchReport:
    report = await middle.ok(p.RagWatch(vault="notes", folder=str(folder), **options))  # type: ignore[arg-type]
    middle.daemon.folders.watchers.stop_all()  # the test drives the scans itself
    return report


async def scan(middle: Middle) -> p.WatchReport:
    """One scan of the vault's only watch, as its watcher would run it."""
    folders = middle.daemon.folders
    vault = await middle.daemon.store.resolve_unlocked("notes")
    [watch] = await middle.daemon.store.watches(vault)
    report, _ = await folders.scan(vault, watch.id, RequestContext())
    return report


async def titles(middle: Middle) -> dict[str, int]:
    return {r.title: r.revision for r in (await middle.ok(p.MemoryList(vault="notes"))).records}


async def test_a_folder_is_imported_at_once_and_its_registration_is_sealed(
    middle: Middle, tmp_path: Path, clock: Clock
) -> None:
    folder = notes(tmp_path / "zqxprivatefolder", 3)
    (folder / "sub").mkdir()
    (folder / "sub" / "deep.md").write_text("# Deep\n\nbelow\n")
    report = await register(middle, folder, recursive=True)
    assert sorted((r.source, r.status) for r in report.results) == [
        ("n000.md", "added"),
        ("n001.md", "added"),
        ("n002.md", "added"),
        ("sub/deep.md", "added"),
    ]
    assert (report.watch.cards, report.watch.folder, report.watch.on_delete) == (4, str(folder), "delete")
    listing = await middle.ok(p.RagWatchList())
    assert [w.folder for w in listing.watches] == [str(folder)] and listing.count == 1
    database = sqlite3.connect(middle.daemon.home.db_path).execute("SELECT sealed FROM watches").fetchall()
    assert len(database) == 1 and b"zqxprivatefolder" not in database[0][0]
    again = await scan(middle)
    assert [r.status for r in again.results] == []  # nothing changed: nothing read again


async def test_edits_additions_renames_and_moves_keep_their_cards(middle: Middle, tmp_path: Path, clock: Clock) -> None:
    folder = notes(tmp_path / "notes", 3)
    (folder / "sub").mkdir()
    first = {r.source: r.id for r in (await register(middle, folder, recursive=True)).results}
    (folder / "n000.md").write_text("# Note 0\n\nabout lanterns, edited\n")
    (folder / "new.md").write_text("# New\n\nfresh\n")
    os.rename(folder / "n001.md", folder / "sub" / "moved.md")  # its inode, size and time move: the card follows
    os.rename(folder / "n002.md", folder / "renamed.md")
    clock.now += 1
    report = await scan(middle)
    found = {r.source: (r.status, r.id) for r in report.results}
    assert found == {
        "n000.md": ("updated", first["n000.md"]),
        "new.md": ("added", found["new.md"][1]),
        "renamed.md": ("moved", first["n002.md"]),
        "sub/moved.md": ("moved", first["n001.md"]),
    }
    (folder / "sub" / "moved.md").write_text("# Note 1\n\nabout lanterns 1, and edited in its new place\n")
    clock.now += 1
    assert [(r.source, r.status, r.id) for r in (await scan(middle)).results] == [
        ("sub/moved.md", "updated", first["n001.md"])
    ]
    clock.now += 60  # long after the 10 s rule: the old names are no deletion of the cards that moved
    assert [r.status for r in (await scan(middle)).results] == []
    assert await titles(middle) == {"Note 0": 2, "Note 1": 3, "Note 2": 2, "New": 1}
    listed = await middle.ok(p.MemoryRead(vault="notes", id=first["n002.md"]))
    assert listed.meta["source"] == "renamed.md"


async def test_memories_jobs_lists_the_scans_that_did_something(middle: Middle, tmp_path: Path, clock: Clock) -> None:
    """A background scan that found nothing to do (the quiet scan every 5 minutes, an event about no note) is left
    out of ``memories jobs``, whose history (50 jobs) it would fill in hours; a change or a pause is listed."""
    folder = notes(tmp_path / "notes", 2)
    await register(middle, folder)

    async def watch_jobs() -> list[str]:
        return [job.state for job in (await middle.ok(p.Jobs())).jobs if job.kind == "watch"]

    assert await watch_jobs() == ["done"]  # the registration's own scan, which a client asked for
    for _ in range(3):
        clock.now += 300
        await scan(middle)
    assert await watch_jobs() == ["done"]
    (folder / "n000.md").write_text("# Note 0\n\nedited\n")
    clock.now += 1
    await scan(middle)
    assert await watch_jobs() == ["done", "done"]
    os.utime(folder / "n001.md", ns=(1, 1))  # touched, the same text: a burst of saves that changed nothing
    clock.now += 1
    assert [r.status for r in (await scan(middle)).results] == ["unchanged"]
    assert await watch_jobs() == ["done", "done"]
    (folder / "n001.md").unlink()
    clock.now += 1
    await scan(middle)
    clock.now += 20
    await scan(middle)  # the deletion, confirmed: listed as the one file it handled, not "0/0 files"
    deletion = [job for job in (await middle.ok(p.Jobs())).jobs if job.kind == "watch"][-1]
    assert (deletion.state, deletion.done, deletion.total, deletion.unit) == ("done", 1, 1, "files")
    folder.rename(tmp_path / "away")
    with pytest.raises(MemoriesError):
        await scan(middle)
    assert await watch_jobs() == ["done", "done", "done", "failed"]


async def test_a_note_deleted_and_another_made_with_its_inode_is_no_rename(
    middle: Middle, tmp_path: Path, clock: Clock
) -> None:
    """ext4 gives a deleted file's inode to the next file made: a git pull or a sync tool that deletes one note and
    adds another in one burst must not turn the old note's card into the new one (on another device, watching the
    same synced folder, the same change would be a deletion and a new card: a conflict)."""
    folder = notes(tmp_path / "notes", 8)
    first = {r.source: r.id for r in (await register(middle, folder)).results}
    inode = (folder / "n000.md").stat().st_ino
    (folder / "n000.md").unlink()
    (folder / "other.md").write_text("# Other\n\na different note\n")
    if (folder / "other.md").stat().st_ino != inode:  # another file system: make the reuse happen
        os.rename(folder / "n007.md", folder / "n007.bak")
        os.rename(folder / "other.md", folder / "n007.md")
        os.rename(folder / "n007.bak", folder / "other.md")
    clock.now += 1
    found = {r.source: (r.status, r.id) for r in (await scan(middle)).results}
    assert found["other.md"][0] == "added" and found["other.md"][1] not in first.values()
    clock.now += 11
    assert [(r.source, r.status, r.id) for r in (await scan(middle)).results] == [
        ("n000.md", "deleted", first["n000.md"])
    ]


async def test_an_obsidian_vaults_own_files_are_not_notes_and_its_trash_is_a_deletion(
    middle: Middle, tmp_path: Path, clock: Clock
) -> None:
    """Obsidian keeps its settings and plugins (with their README.md) in .obsidian/, attachments and canvases
    beside the notes, and moves a deleted note to .trash/: only the notes are cards, a note moved to the trash is
    deleted by the rules, and one restored from it comes back, searchable, without a conflict."""
    folder = notes(tmp_path / "Obsidian", 8)
    (folder / ".obsidian" / "plugins" / "calendar").mkdir(parents=True)
    (folder / ".obsidian" / "plugins" / "calendar" / "README.md").write_text("# Calendar\n\na plugin's readme\n")
    (folder / ".obsidian" / "workspace.json").write_text("{}")
    (folder / ".trash").mkdir()
    (folder / "attachments").mkdir()
    (folder / "attachments" / "heron.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (folder / "board.canvas").write_text('{"nodes": []}')
    registered = await register(middle, folder, recursive=True)
    assert sorted(r.source or "" for r in registered.results) == [f"n{n:03}.md" for n in range(8)]
    assert registered.watch.error is None
    os.rename(folder / "n000.md", folder / ".trash" / "n000.md")
    clock.now += 1
    assert (await scan(middle)).results == []
    clock.now += 11
    assert [(r.source, r.status) for r in (await scan(middle)).results] == [("n000.md", "deleted")]
    os.rename(folder / ".trash" / "n000.md", folder / "n000.md")
    clock.now += 1
    assert [(r.source, r.status) for r in (await scan(middle)).results] == [("n000.md", "added")]
    listed = (await middle.ok(p.MemoryList(vault="notes"))).records
    assert len(listed) == 8 and not any(r.conflict or r.missing for r in listed)


async def test_a_file_is_deleted_only_when_two_scans_10_s_apart_miss_it(
    middle: Middle, tmp_path: Path, clock: Clock
) -> None:
    folder = notes(tmp_path / "notes", 8)
    await register(middle, folder)
    (folder / "n000.md").unlink()
    (folder / "n001.md").unlink()
    (folder / "n001.md").write_text("# Note 1\n\nsaved again by an editor (unlink, then rename into place)\n")
    clock.now += 1
    first = await scan(middle)
    assert [(r.source, r.status) for r in first.results] == [("n001.md", "updated")]
    assert "Note 0" in await titles(middle) and first.watch.missing == 1
    listed = {r.title: r.missing for r in (await middle.ok(p.MemoryList(vault="notes"))).records}
    assert listed["Note 0"] is True and listed["Note 1"] is False
    clock.now += 5
    assert [r.status for r in (await scan(middle)).results] == []  # not yet 10 s
    clock.now += 6
    second = await scan(middle)
    assert [(r.source, r.status) for r in second.results] == [("n000.md", "deleted")]
    assert "Note 0" not in await titles(middle)
    assert second.watch.missing == 0


async def test_on_delete_keep_never_deletes(middle: Middle, tmp_path: Path, clock: Clock) -> None:
    folder = notes(tmp_path / "notes", 10)
    await register(middle, folder, on_delete="keep")
    for number in range(10):
        (folder / f"n{number:03}.md").unlink()
    for _ in range(3):
        clock.now += 3600
        report = await scan(middle)
        assert report.results == [] and report.watch.paused is None
    listed = (await middle.ok(p.MemoryList(vault="notes"))).records
    assert len(listed) == 10 and all(r.missing for r in listed)


async def test_a_mass_delete_pauses_the_watch_and_resume_deletes_nothing_that_is_back(
    middle: Middle, tmp_path: Path, clock: Clock
) -> None:
    folder = notes(tmp_path / "notes", 40)
    await register(middle, folder)
    kept = {n: (folder / f"n{n:03}.md").read_text() for n in range(11)}
    for number in range(11):  # 11 > max(5, 25 % of 40)
        (folder / f"n{number:03}.md").unlink()
    clock.now += 1
    await scan(middle)
    clock.now += 11
    with pytest.raises(MemoriesError) as paused:
        await scan(middle)
    assert paused.value.code == "watch_paused" and "11 files" in paused.value.message
    assert "--resume" in paused.value.message and len(await titles(middle)) == 40
    [info] = (await middle.ok(p.RagWatchList())).watches
    assert info.state == "paused" and "max(5, 25 %" in (info.paused or "")
    jobs = (await middle.ok(p.Jobs())).jobs
    assert jobs[-1].kind == "watch" and jobs[-1].error is not None and jobs[-1].error.code == "watch_paused"
    for number, text in kept.items():
        if number < 9:
            (folder / f"n{number:03}.md").write_text(text)  # most come back; two stay gone
    clock.now += 60
    resumed = await register(middle, folder, resume=True)  # what is still absent (since long before) goes now
    assert resumed.watch.paused is None
    assert sorted(r.source for r in resumed.results if r.status == "deleted") == ["n009.md", "n010.md"]
    clock.now += 60
    assert (await scan(middle)).results == []
    assert len(await titles(middle)) == 38


async def test_a_slow_delete_of_many_files_pauses_too_and_accept_deletions_goes_on(
    middle: Middle, tmp_path: Path, clock: Clock
) -> None:
    folder = notes(tmp_path / "notes", 20)
    await register(middle, folder)
    deleted = 0
    with pytest.raises(MemoriesError) as paused:
        for number in range(8):  # one a minute: each is confirmed alone, but 6 within ten minutes is over 5
            (folder / f"n{number:03}.md").unlink()
            clock.now += 1
            await scan(middle)
            clock.now += 59
            deleted += sum(r.status == "deleted" for r in (await scan(middle)).results)
    assert paused.value.code == "watch_paused" and deleted == 5
    assert len(await titles(middle)) == 15
    accepted = await register(middle, folder, accept_deletions=True)
    assert [r.status for r in accepted.results] == ["deleted"] and len(await titles(middle)) == 14


async def test_a_resume_still_over_the_limit_offers_accept_deletions(
    middle: Middle, tmp_path: Path, clock: Clock
) -> None:
    """Issue 29, item 8: it told the person to run --resume, which they had just run."""
    folder = notes(tmp_path / "notes", 40)
    await register(middle, folder)
    (folder / "n039.md").unlink()  # one deleted alone: within the limit, and within the window
    clock.now += 1
    await scan(middle)
    clock.now += 60
    assert [r.status for r in (await scan(middle)).results] == ["deleted"]
    for number in range(10):  # with the one before, 11 > max(5, 25 % of 40) in ten minutes
        (folder / f"n{number:03}.md").unlink()
    clock.now += 1
    await scan(middle)
    clock.now += 60
    with pytest.raises(MemoriesError) as paused:
        await scan(middle)
    assert "(1 more was deleted in the last ten minutes)" in paused.value.message
    clock.now += 60
    with pytest.raises(MemoriesError) as again:
        await register(middle, folder, resume=True)
    assert again.value.code == "watch_paused" and "--accept-deletions`" in again.value.message
    assert "nothing is deleted until" not in again.value.message and len(await titles(middle)) == 39


@pytest.mark.parametrize("how", ["renamed away and replaced", "unreadable", "gone"])
async def test_a_folder_that_vanishes_is_replaced_or_unreadable_pauses_and_deletes_nothing(
    middle: Middle, tmp_path: Path, clock: Clock, how: str
) -> None:
    folder = notes(tmp_path / "notes", 6)
    await register(middle, folder)
    unreadable: set[str] = set()
    middle.daemon.folders._unreadable = unreadable.__contains__
    if how == "renamed away and replaced":
        folder.rename(tmp_path / "elsewhere")
        folder.mkdir()
    elif how == "unreadable":
        unreadable.add(str(folder))
    else:
        folder.rename(tmp_path / "elsewhere")
    clock.now += 1
    with pytest.raises(MemoriesError) as paused:
        await scan(middle)
    assert paused.value.code == "watch_paused"
    clock.now += 3600
    with pytest.raises(MemoriesError):
        await scan(middle)  # paused: nothing happens until a resume
    assert len(await titles(middle)) == 6
    if how != "renamed away and replaced":  # (a folder replaced for good is resumed as the one watched now)
        with pytest.raises(MemoriesError) as still:
            await register(middle, folder, resume=True)
        assert still.value.code == "watch_paused"
    unreadable.clear()
    if how != "unreadable":
        if folder.exists():
            folder.rmdir()
        (tmp_path / "elsewhere").rename(folder)
    resumed = await register(middle, folder, resume=True)
    clock.now += 60
    assert [r.status for r in resumed.results + (await scan(middle)).results] == []
    assert len(await titles(middle)) == 6


async def test_an_unreadable_subfolder_keeps_its_notes_as_they_were(tmp_path: Path) -> None:
    """A subfolder that cannot be listed (its permissions changed, a mount under it failed; here the
    ``unreadable_folders_file`` hook, as root ignores ``chmod``) hides its notes from the scan: they are unseen, not
    absent, so nothing in it is deleted or marked missing, the watch says why, and all is as before once it can be
    read again. (``os.walk`` leaves such a folder out silently: its notes looked deleted.)"""
    listed = tmp_path / "unreadable-folders"
    listed.write_text("")
    async with running_middle(tmp_path, hooks=TestHooks(unreadable_folders_file=str(listed))) as middle:
        clock = Clock()
        middle.daemon.folders.clock = clock
        folder = notes(tmp_path / "notes", 2)
        notes(folder / "journal", 3)
        assert len((await register(middle, folder, recursive=True)).results) == 5
        listed.write_text(f"{folder / 'journal'}\n")
        (folder / "n000.md").write_text("# Note 0\n\nedited while the journal is unreadable\n")
        for _ in range(3):
            clock.now += 60
            report = await scan(middle)
            assert [r.status for r in report.results] in (["updated"], [])
            assert (report.watch.paused, report.watch.missing, report.watch.cards) == (None, 0, 5)
            assert "journal cannot be read" in (report.watch.error or "")
        assert len((await middle.ok(p.MemoryList(vault="notes"))).records) == 5
        listed.write_text("")
        clock.now += 60
        again = await scan(middle)
        assert again.results == [] and again.watch.error is None
        assert len((await middle.ok(p.MemoryList(vault="notes"))).records) == 5


async def test_a_note_icloud_evicted_is_kept_until_it_comes_back(middle: Middle, tmp_path: Path, clock: Clock) -> None:
    """iCloud Drive's "Optimize Mac Storage" replaces a note it evicts with the placeholder .note.md.icloud until it
    is opened: the note is not deleted, nor marked missing, and nothing changes when it comes back."""
    folder = notes(tmp_path / "iCloud Obsidian", 3)
    (folder / "sub").mkdir()
    (folder / "sub" / "deep.md").write_text("# Deep\n\nbelow\n")
    await register(middle, folder, recursive=True)
    text = (folder / "sub" / "deep.md").read_text()
    for source in ("n000.md", "sub/deep.md"):
        head, name = os.path.split(folder / source)
        os.rename(folder / source, os.path.join(head, f".{name}.icloud"))
    for _ in range(2):
        clock.now += 60
        report = await scan(middle)
        assert (report.results, report.watch.missing, report.watch.cards) == ([], 0, 4)
    (folder / "sub" / ".deep.md.icloud").unlink()
    (folder / "sub" / "deep.md").write_text(text)  # downloaded again: a new file of the same text
    clock.now += 60
    assert [(r.source, r.status) for r in (await scan(middle)).results] == [("sub/deep.md", "unchanged")]
    assert len((await middle.ok(p.MemoryList(vault="notes"))).records) == 4


async def test_folders_that_cannot_be_watched_are_refused(middle: Middle, tmp_path: Path) -> None:
    home = Path(middle.daemon.home.root)
    inside = home / "inside"
    inside.mkdir()
    for folder in ("/", str(home), str(inside)):
        with pytest.raises(MemoriesError) as refused:
            await middle.ok(p.RagWatch(vault="notes", folder=folder))
        assert refused.value.code == "invalid_argument", folder
    with pytest.raises(MemoriesError) as relative:
        await middle.ok(p.RagWatch(vault="notes", folder="notes"))
    assert relative.value.code == "invalid_argument"
    with pytest.raises(MemoriesError) as not_watched:
        await middle.ok(p.RagWatch(vault="notes", folder=str(tmp_path), resume=True))
    assert not_watched.value.code == "watch_not_found"
    assert (await middle.ok(p.RagWatchList())).watches == []


async def test_a_refused_file_is_reported_once_and_temporary_files_are_not_notes(
    middle: Middle, tmp_path: Path, clock: Clock
) -> None:
    folder = notes(tmp_path / "notes", 1)
    (folder / "bad.md").write_bytes(b"\xff\xfe not utf-8")
    for name in ("n000.md.tmp", "~$n000.md", "n000.sync-conflict-20250301-101500-ABCDEFG.md", "4913", ".~lock.x#"):
        (folder / name).write_text("# Temporary\n\nnot a note\n")
    report = await register(middle, folder)
    assert [(r.source, r.status) for r in report.results if r.status != "skipped"] == [
        ("bad.md", "refused"),
        ("n000.md", "added"),
    ]
    assert report.watch.refused == 1 and "unsupported_file" in (report.watch.error or "")
    (folder / "n000.md").write_text("# Note 0\n\nedited\n")
    clock.now += 1
    again = await scan(middle)
    assert [(r.source, r.status) for r in again.results] == [("n000.md", "updated")]  # bad.md is not read again
    assert set(await titles(middle)) == {"Note 0"} and "unsupported_file" in (again.watch.error or "")
    (folder / "bad.md").write_text("# Bad no more\n\nsaved again as text\n")
    clock.now += 1
    fixed = await scan(middle)
    assert [(r.source, r.status) for r in fixed.results] == [("bad.md", "added")]
    assert (fixed.watch.refused, fixed.watch.error) == (0, None)  # the problem shown is the folder's now


async def test_a_note_and_a_link_to_it_are_one_card_read_once(middle: Middle, tmp_path: Path, clock: Clock) -> None:
    """As ``rag ingest`` does, a file reached twice (a symbolic link to a note of the folder) is read once, where it
    is first found: an edit is one revision, not two that move the card from one name to the other."""
    folder = notes(tmp_path / "notes", 1)
    (folder / "a-link.md").symlink_to(folder / "n000.md")
    first = await register(middle, folder)
    assert [(r.source, r.status) for r in first.results] == [("a-link.md", "added")]
    (folder / "n000.md").write_text("# Note 0\n\nedited through its real name\n")
    clock.now += 1
    again = await scan(middle)
    assert [(r.source, r.status) for r in again.results] == [("a-link.md", "updated")]
    assert await titles(middle) == {"Note 0": 2}


async def test_a_watch_that_pushes_its_vault_over_the_index_limits_says_so_as_ingest_does(
    middle: Middle, tmp_path: Path, clock: Clock
) -> None:
    """The cards are stored, the report names the limit (``over_limit``, as ``rag ingest``'s), ``rag watch list``
    says the index is not up to date, and the next change whose refresh succeeds clears it."""
    fakes = middle.fakes["index"].handlers
    sync = fakes[w.IndexSync]

    def too_large(request: w.IndexSync) -> object:
        raise MemoriesError("vault_too_large", "over", {"limit": "chunks", "max": 100_000, "value": 100_003})

    fakes[w.IndexSync] = too_large
    folder = notes(tmp_path / "notes", 3)
    report = await register(middle, folder)
    assert report.over_limit is not None and report.over_limit.code == "vault_too_large"
    assert "3 chunks over the limit of 100,000" in report.over_limit.message and len(await titles(middle)) == 3
    assert "search index is not up to date" in (report.watch.error or "")
    fakes[w.IndexSync] = sync
    (folder / "n000.md").unlink()
    clock.now += 1
    await scan(middle)
    clock.now += 11
    fine = await scan(middle)
    assert fine.over_limit is None and fine.watch.error is None


async def test_unwatch_keeps_the_cards_and_a_deleted_vault_takes_its_watches(middle: Middle, tmp_path: Path) -> None:
    folder = notes(tmp_path / "notes", 2)
    await middle.ok(p.RagWatch(vault="notes", folder=str(folder)))
    await middle.ok(p.RagUnwatch(vault="notes", folder=str(folder)))
    assert (await middle.ok(p.RagWatchList())).count == 0 and len(await titles(middle)) == 2
    await middle.ok(p.VaultCreate(name="other"))
    await middle.ok(p.RagWatch(vault="other", folder=str(folder)))
    await middle.ok(p.VaultDelete(vault="other"))
    assert (await middle.ok(p.RagWatchList())).count == 0


async def test_unwatch_of_a_folder_not_watched_removes_no_other_watch(middle: Middle, tmp_path: Path) -> None:
    first, second = notes(tmp_path / "first", 1), notes(tmp_path / "second", 1)
    never = notes(tmp_path / "never", 1)
    for folder in (first, second):
        await middle.ok(p.RagWatch(vault="notes", folder=str(folder)))
    for folder in (never, tmp_path / "missing", tmp_path):
        with pytest.raises(MemoriesError) as not_watched:
            await middle.ok(p.RagUnwatch(vault="notes", folder=str(folder)))
        assert not_watched.value.code == "watch_not_found", folder
    assert [w.folder for w in (await middle.ok(p.RagWatchList())).watches] == [str(first), str(second)]
    await middle.ok(p.RagUnwatch(vault="notes", folder=str(second)))
    assert [w.folder for w in (await middle.ok(p.RagWatchList())).watches] == [str(first)]


async def poll(check: Callable[[], object], what: str) -> None:
    """Wait (at most 30 s: failing only on a hang) until ``check()`` is true."""
    with trio.fail_after(30):
        while not await check():  # type: ignore[misc]
            await trio.sleep(0.05)


async def test_lock_stops_the_watches_and_unlock_catches_up(middle: Middle, tmp_path: Path) -> None:
    folder = notes(tmp_path / "notes", 2)
    await middle.ok(p.RagWatch(vault="notes", folder=str(folder)))
    status = await middle.ok(p.Status())
    assert status.watch_count == 1 and status.watches[0].state == "watching"
    await middle.ok(p.Lock())
    locked = await middle.ok(p.Status())
    assert (locked.watch_count, locked.watches) == (1, [])
    assert (await middle.ok(p.RagWatchList())).count == 1
    (folder / "while-locked.md").write_text("# Written while locked\n\nstill found\n")
    await middle.ok(p.Unlock(passphrase=PASSPHRASE))

    async def caught_up() -> bool:
        return "Written while locked" in await titles(middle)

    await poll(caught_up, "the catch-up scan")
    (folder / "after.md").write_text("# Written after unlock\n\nseen by the watcher\n")

    async def seen() -> bool:
        return "Written after unlock" in await titles(middle)

    await poll(seen, "the watcher")
    report = await middle.ok(p.RagStatus(vault="notes"))
    assert report.watch_count == 1 and report.watches[0].last_change is not None


async def test_a_watcher_that_cannot_start_falls_back_to_scans_and_names_the_limit(
    middle: Middle, tmp_path: Path
) -> None:
    middle.daemon.folders.watchers.watcher_error = "OS file watch limit reached"
    folder = notes(tmp_path / "notes", 1)
    await middle.ok(p.RagWatch(vault="notes", folder=str(folder)))

    async def fell_back() -> bool:
        [info] = (await middle.ok(p.RagWatchList())).watches
        return info.state == "scanning"

    await poll(fell_back, "the fallback")
    [info] = (await middle.ok(p.RagWatchList())).watches
    assert "max_user_watches" in (info.error or "") and "sysctl" in (info.error or "")


SYNC_PASSPHRASE = "the sync passphrase"


async def _sync(a: Middle, b: Middle, vault_b: str) -> None:
    await a.ok(p.SyncPush(vault="notes"))
    await b.ok(p.SyncPull(vault=vault_b))
    await b.ok(p.SyncPush(vault=vault_b))
    await a.ok(p.SyncPull(vault="notes"))


async def _scan_all(middle: Middle, vault: str) -> list[tuple[str, str]]:
    row = await middle.daemon.store.resolve_unlocked(vault)
    found = []
    for watch in await middle.daemon.store.watches(row):
        report, _ = await middle.daemon.folders.scan(row, watch.id, RequestContext())
        found += [(r.source or "", r.status) for r in report.results]
    return found


@pytest.mark.parametrize("layout", ["one folder", "a synced copy at another path"])
async def test_two_devices_watching_one_synced_notes_folder_make_one_card_per_note_and_no_conflict(
    tmp_path: Path, layout: str
) -> None:
    """Issue 20 item 4: an Obsidian vault synced to two machines, watched on both. Each device imports each note
    and each change before it has pulled the other's: the same note becomes one card (its id derives from its path
    in the folder), the two imports of one change are sibling heads with identical content, not a conflict, and an
    import equal to a head adds no revision."""
    folder_a = notes(tmp_path / "Obsidian", 3)
    shared = tmp_path / "shared"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    async with running_middle(tmp_path / "a") as a, running_middle(tmp_path / "b") as b:
        await a.ok(p.SyncInit(vault="notes", folder=str(shared), passphrase=SYNC_PASSPHRASE))
        await b.ok(p.SyncJoin(folder=str(shared), passphrase=SYNC_PASSPHRASE, name="mine"))
        folder_b = folder_a
        if layout != "one folder":
            folder_b = tmp_path / "elsewhere" / "Obsidian"
            folder_b.parent.mkdir()
            shutil.copytree(folder_a, folder_b)  # what Syncthing does: the same files, their times kept
        await a.ok(p.RagWatch(vault="notes", folder=str(folder_a)))
        await b.ok(p.RagWatch(vault="mine", folder=str(folder_b)))
        for middle in (a, b):
            middle.daemon.folders.watchers.stop_all()
        await _sync(a, b, "mine")
        for middle, vault in ((a, "notes"), (b, "mine")):
            listed = (await middle.ok(p.MemoryList(vault=vault))).records
            assert sorted((r.title, r.conflict) for r in listed) == [(f"Note {n}", False) for n in range(3)]
        for folder in {folder_a, folder_b}:
            (folder / "n000.md").write_text("# Note 0\n\nedited on one machine, synced to the other\n")
        assert await _scan_all(a, "notes") == [("n000.md", "updated")]
        assert await _scan_all(b, "mine") == [("n000.md", "updated")]
        await _sync(a, b, "mine")
        for middle, vault in ((a, "notes"), (b, "mine")):
            listed = {r.title: r for r in (await middle.ok(p.MemoryList(vault=vault))).records}
            assert len(listed) == 3 and not listed["Note 0"].conflict
            read = await middle.ok(p.MemoryRead(vault=vault, id=listed["Note 0"].id))
            assert read.conflict is None and "synced to the other" in read.body
            assert (await middle.ok(p.SyncStatus(vault=vault))).conflicts == []
        for folder in {folder_a, folder_b}:  # touched, not changed: an import equal to a head adds no revision
            os.utime(folder / "n001.md")
        assert await _scan_all(a, "notes") == [("n001.md", "unchanged")]
        assert await _scan_all(b, "mine") == [("n001.md", "unchanged")]
        (folder_a / "n003.md").write_text("# Note 3\n\nwritten on one machine only, then synced\n")
        assert await _scan_all(a, "notes") == [("n003.md", "added")]
        await _sync(a, b, "mine")
        if folder_b != folder_a:
            shutil.copy2(folder_a / "n003.md", folder_b / "n003.md")
            folder_a.rename(tmp_path / "away")  # A's path is not on B's machine: B knows the note by its path in it
        assert await _scan_all(b, "mine") == [("n003.md", "unchanged")]
        (folder_b / "n003.md").write_text("# Note 3\n\nthen edited on the other machine\n")
        assert await _scan_all(b, "mine") == [("n003.md", "updated")]
        assert len((await b.ok(p.MemoryList(vault="mine"))).records) == 4


async def test_a_watch_embeds_its_changes_and_never_sends_a_device_only_vaults_text(tmp_path: Path) -> None:
    """With [rag.embedding] set and ``auto_index = "always"``, a watched folder's new note is embedded by the
    background index; a device-only vault's is not sent (its index is brought up to date, nothing leaves, and no
    index job is started for it)."""
    embedding = EmbeddingConfig(
        protocol="compatible", url="https://models.invalid.example/v1/embeddings", model="m", dimensions=4
    )
    async with running_middle(tmp_path, RagConfig(embedding=embedding), auto_index="always") as middle:
        sent: list[w.RemoteEmbed] = []

        def embed(request: w.RemoteEmbed) -> w.RemoteVectors:
            sent.append(request)
            return w.RemoteVectors(
                vectors=bytes(16 * len(request.inputs)), dimension=4, ok=list(range(len(request.inputs)))
            )

        middle.fakes["remote"].handlers[w.RemoteEmbed] = embed
        folder = notes(tmp_path / "notes", 2)
        await middle.ok(p.RagWatch(vault="notes", folder=str(folder)))

        async def embedded() -> bool:
            jobs = [job for job in (await middle.ok(p.Jobs())).jobs if job.kind == "index"]
            return bool(jobs) and all(job.state == "done" for job in jobs) and bool(sent)

        await poll(embedded, "the background index")
        await middle.ok(p.VaultCreate(name="private", device_only=True))
        before = len(sent)
        other = notes(tmp_path / "private", 2)
        await middle.ok(p.RagWatch(vault="private", folder=str(other)))

        async def scanned() -> bool:
            jobs = (await middle.ok(p.Jobs())).jobs
            watched = [job for job in jobs if job.kind == "watch" and job.vault_name == "private"]
            return bool(watched) and all(job.state in ("done", "failed") for job in jobs)

        await poll(scanned, "the device-only vault's scan")
        jobs = (await middle.ok(p.Jobs())).jobs
        assert all(job.state == "done" for job in jobs) and len(sent) == before
        assert not [job for job in jobs if job.kind == "index" and job.vault_name == "private"]
        status = await middle.ok(p.RagStatus(vault="private"))
        assert (status.chunks, status.embedded) == (2, None)  # none embedded; none loaded, so not counted
