"""Issue 12, defect 1: a card is its file (the resolved path in the sealed header), not its relative name."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.daemon import HomeDir, copy_fixture_home


def _old_home(tmp_path: Path) -> tuple[HomeDir, Path, dict]:
    """The release-0.1 home, copied, started and unlocked."""
    home, notes, manifest = copy_fixture_home("release-0.1", tmp_path)
    home.start()
    home.ok("unlock", "--passphrase-stdin", stdin=manifest["passphrase"] + "\n")
    return home, notes, manifest


def test_a_home_of_the_previous_release_unlocks_and_reads(tmp_path: Path) -> None:
    home, _, manifest = _old_home(tmp_path)
    try:
        for vault in manifest["vaults"]:
            listed = {r["id"]: r for r in home.ok("memory", "list", vault["name"])["records"]}
            assert set(listed) == {r["id"] for r in vault["records"]}
            for record in vault["records"]:
                read = home.ok("memory", "read", vault["name"], record["id"])
                assert (read["revision"], read["title"], read["meta"].get("source")) == (
                    record["revision"],
                    record["title"],
                    record["source"],
                )
        assert home.ok("rag", "search", "notes", "windmills")["results"][0]["title"] == "Changed later"
    finally:
        home.stop()
