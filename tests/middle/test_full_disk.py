"""Issue 21, item 6: a full disk is ``disk_full`` naming the home's folder, and an ingest stops at the first one,
keeping (and listing) the cards it stored. A full database is made with ``PRAGMA max_page_count``, which SQLite
reports exactly as a full disk (``SQLITE_FULL``) and which works as root too (root ignores ``chmod``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memories import protocol as p
from memories.errors import MemoriesError
from tests.fixtures.middle import Middle


def _fill_up(middle: Middle, spare_pages: int) -> None:
    """Let the database grow by at most ``spare_pages`` pages (4 KiB each) from now on."""
    db = middle.daemon.store._records.store._db  # the daemon's own connection: the pragma is per connection
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages + spare_pages}")


async def test_an_add_on_a_full_disk_is_disk_full_naming_the_home(middle: Middle) -> None:
    _fill_up(middle, 0)
    with pytest.raises(MemoriesError) as full:
        await middle.add("x" * 100_000)
    assert full.value.code == "disk_full"
    assert middle.daemon.home.root in full.value.message and full.value.details == {"folder": middle.daemon.home.root}
    _fill_up(middle, 1000)  # space again: the store goes on (the failed transaction was rolled back)
    assert (await middle.add("a small note")).revision == 1


async def test_an_ingest_stops_at_the_first_full_disk_and_keeps_what_it_stored(middle: Middle, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    for number in range(200):
        (folder / f"n{number:03}.md").write_text(f"# note {number}\n\n" + f"text of note {number} " * 300)
    _fill_up(middle, 60)
    with pytest.raises(MemoriesError) as full:
        await middle.ok(p.RagIngest(vault="notes", paths=[str(folder)]))
    error = full.value
    stored = error.details["stored"]
    assert error.code == "disk_full" and middle.daemon.home.root in error.message
    assert 0 < len(stored) < 200 and error.details["done"] == len(stored)  # it stopped at the first failure
    assert f"with {len(stored)} cards stored" in error.message
    listed = await middle.ok(p.MemoryList(vault="notes"))
    assert {r.id for r in listed.records} == {card["id"] for card in stored}  # kept
