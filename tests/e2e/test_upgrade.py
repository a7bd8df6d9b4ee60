"""Issue 10: a home of an earlier release is upgraded to revision ids and head sets once, at its first unlock, after
a backup; everything it held then reads, revises and renames as before."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from tests.fixtures.daemon import copy_fixture_home


@pytest.mark.parametrize("release", ["release-0.1", "release-0.2"])
def test_a_home_of_an_earlier_release_is_upgraded_once_at_unlock(tmp_path: Path, release: str) -> None:
    home, _, manifest = copy_fixture_home(release, tmp_path)
    unlock = ("unlock", "--passphrase-stdin")
    home.start()
    try:
        assert home.fails("bad_passphrase", *unlock, stdin="not the passphrase\n")
        assert not list(home.path.glob("memories.format-*"))  # a wrong passphrase upgrades nothing
        warnings = home.ok(*unlock, stdin=manifest["passphrase"] + "\n")["warnings"]
        [backup] = home.path.glob("memories.format-1.*.db")
        assert stat.S_IMODE(os.stat(backup).st_mode) == 0o600 and any(str(backup) in w for w in warnings)
        with sqlite3.connect(f"file:{backup}?mode=ro", uri=True) as old:  # the backup is the store as it was
            assert old.execute("SELECT count(*) FROM records").fetchone()[0] == 8
        with sqlite3.connect(home.path / "memories.db") as db:
            assert db.execute("PRAGMA user_version").fetchone() == (3,)
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            assert {"heads", "revisions"} <= tables and "records" not in tables

        for vault in manifest["vaults"]:
            for record in vault["records"]:
                read = home.ok("memory", "read", vault["name"], record["id"])
                assert (read["revision"], read["title"]) == (record["revision"], record["title"])
                assert len(read["revision_id"]) == 64
        [changed] = [r for r in manifest["vaults"][0]["records"] if r["source"] == "changed.md"]
        first = home.ok("memory", "read", "notes", changed["id"], "--revision", "1")
        assert "lighthouses" in first["body"] and first["created"] <= first["updated"]
        assert home.ok("memory", "update", "notes", changed["id"], "--title", "Changed thrice")["revision"] == 3
        assert home.ok("rag", "search", "notes", "windmills")["results"][0]["asset_id"] == changed["id"]
        home.ok("vault", "rename", "work", "office")
        assert home.ok("memory", "list", "office")["records"][0]["title"] == "Standup"

        home.ok("lock")
        assert "warnings" not in home.ok(*unlock, stdin=manifest["passphrase"] + "\n")  # once only
        assert list(home.path.glob("memories.format-*")) == [backup]
    finally:
        home.stop()
