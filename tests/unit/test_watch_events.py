"""Which file system events wake a watched folder's scan (memories/daemon/folder_events.py): notes, folders and the
folder itself; never a dot folder, a temporary file, or a database, log or payload (the home inside a watched folder
would otherwise wake a scan with every write of the scan's own state)."""

from __future__ import annotations

import pytest

from memories.daemon.folder_events import _about_notes


@pytest.mark.parametrize(
    ("path", "wakes"),
    [
        ("/notes", True),
        ("/notes/a.md", True),
        ("/notes/sub/b.TXT", True),
        ("/notes/projects", True),
        ("/notes/.git/index", False),
        ("/notes/.obsidian/workspace.json", False),
        ("/notes/a.md.tmp", False),
        ("/notes/a.sync-conflict-20250301-101500-ABCDEFG.md", False),
        ("/notes/4913", False),
        ("/notes/home/memories.db-wal", False),
        ("/notes/home/logs/daemon.log", False),
        ("/notes/sync/payloads/ab.rev", False),
        ("/notes/photo.png", False),
    ],
)
def test_an_event_wakes_a_scan_only_when_it_can_change_the_notes(path: str, wakes: bool) -> None:
    assert _about_notes("/notes", path) is wakes
