"""Issue 12, defect 6: one record whose ciphertext fails authentication never makes its vault unsearchable."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.fixtures.daemon import PASSPHRASE, HomeDir, copy_fixture_home


def _flip(home: HomeDir, record_id: str, field: str) -> None:
    """Flip one ciphertext byte of the latest revision's ``field`` (``header`` or ``body``)."""
    with sqlite3.connect(home.path / "memories.db") as db:
        (blob,) = db.execute(f"SELECT {field} FROM revisions WHERE record_id = ?", (record_id,)).fetchone()
        flipped = bytearray(blob)
        flipped[20] ^= 0x01
        db.execute(f"UPDATE revisions SET {field} = ? WHERE record_id = ?", (bytes(flipped), record_id))


def _add(home: HomeDir, title: str, body: str) -> str:
    return home.ok("memory", "add", "notes", "--title", title, "--body", body)["id"]


def test_a_tampered_body_is_left_out_of_search_named_and_deletable(vault: HomeDir) -> None:
    good = _add(vault, "Good", "the quick zebra crossing")
    bad = _add(vault, "Bad", "another zebra crossing")
    _flip(vault, bad, "body")
    for command in (("rag", "search", "notes", "zebra"), ("memory", "search", "notes", "zebra")):
        found = vault.ok(*command)
        ids = {r.get("asset_id") or r.get("id") for r in found["results"]}
        assert ids == {good}, command
        assert any(bad in warning and "revision 1" in warning for warning in found["warnings"]), found
    listed = {r["id"]: r for r in vault.ok("memory", "list", "notes")["records"]}
    assert (listed[bad]["damaged"], listed[good]["damaged"]) == (True, False)
    assert "DAMAGED" in vault.run("memory", "list", "notes", json_output=False).stdout
    error = vault.fails("integrity_error", "memory", "read", "notes", bad)
    assert error["details"] == {"vault": "notes", "id": bad, "revision": 1, "field": "body"}
    assert bad in error["message"]
    vault.ok("memory", "delete", "notes", bad)
    after = vault.ok("rag", "search", "notes", "zebra")
    assert [r["asset_id"] for r in after["results"]] == [good]
    assert not any(bad in warning for warning in after.get("warnings", []))


def test_a_tampered_header_is_listed_without_a_title_and_the_rest_still_works(vault: HomeDir) -> None:
    good = _add(vault, "Good", "lighthouse keeper")
    bad = _add(vault, "Bad", "lighthouse painter")
    _flip(vault, bad, "header")
    vault.ok("lock")  # the catalog of headers is read again at unlock
    vault.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    listed = {r["id"]: r for r in vault.ok("memory", "list", "notes")["records"]}
    assert listed[bad] == {
        "id": bad,
        "revision": 1,
        "kind": None,
        "sensitivity": None,
        "title": None,
        "damaged": True,
        "conflict": False,
        "missing": False,
        "date": None,
    }
    assert listed[good]["title"] == "Good"
    assert bad in str(vault.ok("memory", "list", "notes", "--kind", "card"))  # listed whatever the kind asked
    found = vault.ok("rag", "search", "notes", "lighthouse")
    assert [r["asset_id"] for r in found["results"]] == [good]
    assert any(bad in warning for warning in found["warnings"])
    error = vault.fails("integrity_error", "memory", "read", "notes", bad)
    assert (error["details"]["id"], error["details"]["revision"], error["details"]["field"]) == (bad, 1, "header")
    vault.fails("integrity_error", "memory", "update", "notes", bad, "--title", "x")
    vault.ok("memory", "delete", "notes", bad)
    assert [r["id"] for r in vault.ok("memory", "list", "notes")["records"]] == [good]


def test_a_damaged_card_of_the_previous_release_does_not_block_an_ingest(tmp_path: Path) -> None:
    home, notes, manifest = copy_fixture_home("release-0.1", tmp_path)
    home.start()
    try:
        home.ok("unlock", "--passphrase-stdin", stdin=manifest["passphrase"] + "\n")
        [old] = [r for r in manifest["vaults"][0]["records"] if r["source"] == "README.md"]
        _flip(home, old["id"], "body")
        [result] = home.ok("rag", "ingest", "notes", str(notes / "README.md"))["results"]
        assert result["status"] == "added" and result["id"] != old["id"]
    finally:
        home.stop()
