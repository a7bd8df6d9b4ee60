"""``rag ingest`` in the daemon's middle: one file's unexpected failure refuses that file, not the whole ingest; notes
are parsed in the index worker, never in the supervisor."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.errors import MemoriesError
from memories.rag import notes
from tests.fixtures.middle import Middle


async def test_an_unexpected_failure_on_one_file_refuses_only_that_file(
    middle: Middle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A stand-in for a parser bug no test has met yet (the way a RecursionError and a ValueError from YAML's
    constructors once failed whole ingests): the front matter of one note makes the tag reader raise, in the index
    worker's parse (here in-process), which logs its type."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "good.md").write_text("# Good\n\nan ordinary note\n")
    (folder / "bad.md").write_text("---\ntags: BOOM\n---\n# Bad\n\nthis one trips the bug\n")
    tags = notes.front_matter_tags

    def buggy(text: str) -> list[str]:
        if "BOOM" in text:
            raise RuntimeError("a bug")
        return tags(text)

    monkeypatch.setattr(notes, "front_matter_tags", buggy)
    with caplog.at_level(logging.ERROR, logger="memories.notes"):
        report = await middle.ok(p.RagIngest(vault="notes", paths=[str(folder)]))
    results = {Path(r.path).name: r for r in report.results}
    assert results["good.md"].status == "added"
    bad = results["bad.md"]
    assert bad.status == "refused" and bad.error is not None and bad.error.code == "internal_error"
    assert "RuntimeError" in bad.error.message and "see the daemon log" in bad.error.message
    assert [r.getMessage() for r in caplog.records] == [
        "parsing a note failed: RuntimeError (set MEMORIES_DEBUG=1 for the traceback)"
    ]
    listed = await middle.ok(p.MemoryList(vault="notes"))
    assert [r.title for r in listed.records] == ["Good"]


async def test_a_file_reached_twice_in_one_ingest_is_ingested_once(middle: Middle, tmp_path: Path) -> None:
    """A symbolic link to a note of the same folder (and a path given twice) is one file: one card, and a run again
    with nothing changed adds no revision (it once flipped the card between the two names on every run)."""
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "note.md").write_text("# Note\n\nthe only text\n")
    (folder / "sub" / "link.md").symlink_to("../note.md")
    request = p.RagIngest(vault="notes", paths=[str(folder), str(folder / "note.md")], recursive=True)
    first = await middle.ok(request)
    assert [(r.source, r.status) for r in first.results] == [
        ("note.md", "added"),
        ("sub/link.md", "skipped"),
        ("note.md", "skipped"),
    ]
    again = await middle.ok(request)
    assert [r.status for r in again.results] == ["unchanged", "skipped", "skipped"]
    listed = await middle.ok(p.MemoryList(vault="notes"))
    assert [(r.title, r.revision) for r in listed.records] == [("Note", 1)]


async def test_lock_answers_while_a_note_is_still_being_parsed(middle: Middle, tmp_path: Path) -> None:
    """Issue 21, item 1: a note's parse (titles, front matter) runs in the index worker, so however long it takes
    (a pattern that holds the GIL, held here by the fake worker) the supervisor answers ``lock``, which cuts the
    ingest and restarts that worker."""
    note = tmp_path / "note.md"
    note.write_text("# a note\n\nbody\n")
    middle.index.holds[w.ParseNotes] = trio.Event()  # never set: the parse never ends by itself
    started = middle.index.started.setdefault(w.ParseNotes, trio.Event())
    outcome: list[str] = []

    async def ingest() -> None:
        with pytest.raises(MemoriesError) as failed:
            await middle.ok(p.RagIngest(vault="notes", paths=[str(note)]))
        outcome.append(failed.value.code)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ingest)
        with trio.fail_after(30):
            await started.wait()
            locked = await middle.ok(p.Lock())
    assert locked.locked and outcome == ["vault_locked"]
    assert [type(r) for r in middle.fakes["index"].requests] == [w.ParseNotes]  # nothing parsed in the supervisor
    assert middle.daemon.workers.index.lock_restarts == 1  # the worker holding the note's text was killed


async def test_ingesting_a_subfolder_again_keeps_unchanged_notes_and_their_source(
    middle: Middle, tmp_path: Path
) -> None:
    """Issue 21: ingesting ``notes/sub`` after ``notes`` added a revision to every unchanged note of ``sub``, only
    because its ``source`` (the path relative to the folder given) changed. A changed note takes the new one."""
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "kept.md").write_text("# Kept\n\nthe same text\n")
    (folder / "sub" / "edited.md").write_text("# Edited\n\nfirst text\n")
    await middle.ok(p.RagIngest(vault="notes", paths=[str(folder)], recursive=True))
    (folder / "sub" / "edited.md").write_text("# Edited\n\nsecond text\n")
    again = await middle.ok(p.RagIngest(vault="notes", paths=[str(folder / "sub")]))
    assert sorted((r.source, r.status, r.revision) for r in again.results) == [
        ("edited.md", "updated", 2),
        ("kept.md", "unchanged", 1),
    ]
    listed = {r.title: r for r in (await middle.ok(p.MemoryList(vault="notes"))).records}
    kept = await middle.ok(p.MemoryRead(vault="notes", id=listed["Kept"].id))
    edited = await middle.ok(p.MemoryRead(vault="notes", id=listed["Edited"].id))
    assert (kept.revision, kept.meta["source"]) == (1, "sub/kept.md")  # as stored with its revision
    assert (edited.revision, edited.meta["source"]) == (2, "edited.md")


async def test_a_subfolder_that_cannot_be_read_is_reported_refused(
    middle: Middle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``os.walk`` leaves out a subfolder it cannot list; the ingest says so (refused, exit status 3) instead of
    importing the rest as if it were all. Root ignores ``chmod``: ``os.scandir`` fails for it here."""
    folder = tmp_path / "notes"
    (folder / "locked").mkdir(parents=True)
    (folder / "open.md").write_text("# Open\n\nread\n")
    (folder / "locked" / "hidden.md").write_text("# Hidden\n\nnot readable\n")
    scandir = os.scandir

    def denied(path: object) -> object:
        if os.fspath(path).endswith("locked"):  # type: ignore[call-overload]
            raise PermissionError(13, "Permission denied", os.fspath(path))  # type: ignore[call-overload]
        return scandir(path)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "scandir", denied)
    report = await middle.ok(p.RagIngest(vault="notes", paths=[str(folder)], recursive=True))
    found = [(Path(r.path).name, r.status) for r in report.results]
    assert found == [("open.md", "added"), ("locked", "refused")]
    refused = report.results[1].error
    assert refused is not None and refused.code == "invalid_argument" and "cannot read the folder" in refused.message
