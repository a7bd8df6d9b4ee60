"""Issue 21, item 6, with a real disk: on a 3 MiB tmpfs an ingest printed 2,888 pairs of ``internal_error …
OperationalError`` and ``memory add`` said "the daemon failed; see its log" (with nothing in the log, on the same full
disk); a read-only home said ``invalid_argument: cannot create`` of a folder that exists.

Mounting needs root and a kernel that lets this process mount (CI runs as root); elsewhere the test is skipped with
the reason. The full database itself is tested everywhere in ``tests/middle/test_full_disk.py``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import FAST_KDF, HomeDir, initialize


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    point = tmp_path / "disk"
    point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", str(point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"this machine does not let the tests mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_a_full_disk_stops_the_ingest_and_a_read_only_home_says_so(small_disk: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    for number in range(300):  # 3.6 MB of text for a 3 MiB disk
        (notes / f"n{number:03}.md").write_text(f"# note {number}\n\n" + f"words of note {number}. " * 500)
    home = HomeDir(small_disk / "home")
    home.path.mkdir(mode=0o700)
    home.config.write_text(FAST_KDF)
    try:
        initialize(home)
        ingest = home.run("rag", "ingest", "notes", str(notes))
        assert ingest.code == 3, ingest.stdout + ingest.stderr
        error = ingest.doc["error"]
        assert error["code"] == "disk_full" and str(home.path) in error["message"]
        assert 0 < len(error["details"]["stored"]) < 300
        assert ingest.stdout.count("disk_full") == 1 and "internal_error" not in ingest.stdout  # one line, not 300
        listed = home.ok("memory", "list", "notes")["records"]
        assert len(listed) == len(error["details"]["stored"])  # what it stored is kept
        big = tmp_path / "big.txt"
        big.write_text("x" * 1_000_000)
        added = home.fails("disk_full", "memory", "add", "notes", "--title", "t", "--file", str(big))
        assert str(home.path) in added["message"]
        for search in (("rag", "search", "notes", "words", "--mode", "bm25"), ("memory", "search", "notes", "words")):
            assert home.ok(*search)["results"], search  # a search needs no write (issue 29, item 2)
        home.stop()
        second = HomeDir(small_disk / "second")  # a new home on the full disk: named at start (item 3)
        second.path.mkdir(mode=0o700)
        assert str(second.path) in second.fails("disk_full", "daemon", "start")["message"]

        subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
        started = home.fails("home_read_only", "daemon", "start")
        assert "read-only" in started["message"] and str(home.path) in started["message"]
    finally:
        home.stop()
