"""Which file system events wake a watched folder's scan (memories/daemon/ingest/folder_events.py): notes, folders
and the folder itself, a folder whose name has a dot, a path gone; never a dot folder, a temporary file, or a database,
log or payload written (the home inside a watched folder would otherwise wake a scan with every write of the scan's own
state)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memories.daemon.ingest.folder_events import _about_notes


@pytest.mark.parametrize(
    ("path", "wakes"),
    [
        ("", True),
        ("a.md", True),
        ("sub/b.TXT", True),
        ("projects", True),
        ("2025.03 reviews", True),  # a folder whose name has a dot
        ("gone.png", True),  # a path gone may have been a folder
        (".git/index", False),
        (".obsidian/workspace.json", False),
        ("a.md.tmp", False),
        ("a.sync-conflict-20250301-101500-ABCDEFG.md", False),
        ("4913", False),
        ("home/memories.db-wal", False),
        ("home/logs/daemon.log", False),
        ("sync/payloads/ab.rev", False),
        ("photo.png", False),
    ],
)
def test_an_event_wakes_a_scan_only_when_it_can_change_the_notes(tmp_path: Path, path: str, wakes: bool) -> None:
    (tmp_path / "2025.03 reviews").mkdir()
    for existing in ("home/memories.db-wal", "home/logs/daemon.log", "sync/payloads/ab.rev", "photo.png"):
        (tmp_path / existing).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / existing).write_bytes(b"")
    folder = str(tmp_path)
    assert _about_notes(folder, os.path.join(folder, path) if path else folder) is wakes
