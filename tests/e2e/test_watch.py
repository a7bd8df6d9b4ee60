"""Issue 20, acceptance 1 and 2 end to end: a watched folder of 200 notes kept searchable through edits, additions,
renames, moves between subfolders and deletions, without a manual ingest; a change made while locked and one made
while the daemon was stopped are there after unlock; the registration survives a restart; a folder renamed away
and replaced pauses its watch, visibly. The deletion rules' every case runs in tests/middle/test_watch.py; here the
10 s rule is crossed by moving the daemon's clock (the ``clock_offset_file`` hook), not by sleeping."""

from __future__ import annotations

import os
from pathlib import Path

from tests.fixtures.daemon import PASSPHRASE, HomeDir, initialize, with_hooks


def _found(home: HomeDir, word: str) -> list[dict]:
    return home.ok("rag", "search", "notes", word, "--mode", "bm25", "--limit", "20")["results"]


def test_a_watched_folder_stays_searchable_through_every_kind_of_change(home: HomeDir, tmp_path: Path) -> None:
    offset = tmp_path / "clock-offset"
    offset.write_text("0")
    with_hooks(home, clock_offset_file=str(offset))
    initialize(home)
    folder = tmp_path / "Obsidian"
    for number in range(200):
        path = folder / ("daily" if number < 100 else "projects") / f"note{number:03}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Note {number}\n\nabout zqx{number:03} and the garden\n", encoding="utf-8")
    registered = home.ok("rag", "watch", "notes", str(folder), "--recursive")
    assert [r["status"] for r in registered["results"]] == ["added"] * 200
    assert registered["watch"]["state"] == "watching" and registered["watch"]["cards"] == 200
    [edited] = _found(home, "zqx005")

    (folder / "daily" / "note005.md").write_text("# Note 5\n\nabout zqx005 and a heron's plumage\n")
    (folder / "daily" / "added.md").write_text("# Added\n\nwritten after the watch began: lanterns\n")
    os.rename(folder / "daily" / "note010.md", folder / "daily" / "renamed.md")
    os.rename(folder / "projects" / "note150.md", folder / "daily" / "note150.md")
    home.wait_for(lambda: [h["asset_id"] for h in _found(home, "plumage")] == [edited["asset_id"]], what="the edit")
    home.wait_for(lambda: _found(home, "lanterns"), what="the new note")
    home.wait_for(lambda: [h["source"] for h in _found(home, "zqx010")] == ["daily/renamed.md"], what="the rename")
    home.wait_for(lambda: [h["source"] for h in _found(home, "zqx150")] == ["daily/note150.md"], what="the move")
    assert len(home.ok("memory", "list", "notes")["records"]) == 201

    (folder / "projects" / "note120.md").unlink()
    home.wait_for(lambda: home.ok("rag", "watch", "list")["watches"][0]["missing"] == 1, what="the absence")
    assert _found(home, "zqx120")  # absent once is not deleted: an editor's save looks like this
    offset.write_text("20")  # the daemon's clock is 20 s later: the next scan confirms the deletion
    (folder / "projects" / "poke.md").write_text("# Poke\n\na scan\n")
    home.wait_for(lambda: not _found(home, "zqx120"), what="the deletion")

    home.ok("lock")
    (folder / "daily" / "locked.md").write_text("# While locked\n\nwritten while the home was locked: quinces\n")
    home.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    home.wait_for(lambda: _found(home, "quinces"), what="the catch-up at unlock")

    home.ok("daemon", "stop")
    (folder / "daily" / "stopped.md").write_text("# While stopped\n\nwritten while no daemon ran: medlars\n")
    home.start()
    listing = home.ok("rag", "watch", "list")
    assert (listing["locked"], listing["count"], listing["watches"]) == (True, 1, [])
    home.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    home.wait_for(lambda: _found(home, "medlars"), what="the catch-up after a restart")
    status = home.run("rag", "status", "notes", json_output=False)
    assert f"watch     {folder} -> notes (recursive, on delete: delete)" in status.stdout

    folder.rename(tmp_path / "renamed-away")
    folder.mkdir()  # an empty folder in its place: not 203 deletions
    home.wait_for(lambda: home.ok("rag", "watch", "list")["watches"][0]["state"] == "paused", what="the pause")
    jobs = home.ok("jobs")["jobs"]
    assert any(job["kind"] == "watch" and (job["error"] or {}).get("code") == "watch_paused" for job in jobs)
    text = home.run("rag", "status", "notes", json_output=False).stdout
    assert "paused: the folder" in text and "--resume" in text
    assert len(home.ok("memory", "list", "notes")["records"]) == 203
    folder.rmdir()
    (tmp_path / "renamed-away").rename(folder)
    resumed = home.ok("rag", "watch", "notes", str(folder), "--resume")
    assert resumed["watch"]["state"] == "watching"
    assert [r for r in resumed["results"] if r["status"] == "deleted"] == []
    assert len(home.ok("memory", "list", "notes")["records"]) == 203
