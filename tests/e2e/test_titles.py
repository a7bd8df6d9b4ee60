"""Issue 12, smaller things: note titles at ingest (front matter, Setext, long headings) and front matter in results."""

from __future__ import annotations

from pathlib import Path

from memories.limits import MAX_TITLE_BYTES
from tests.fixtures.daemon import HomeDir


def _ingest_one(home: HomeDir, path: Path) -> dict:
    [result] = home.ok("rag", "ingest", "notes", str(path))["results"]
    return result


def test_titles_from_front_matter_setext_and_long_headings(vault: HomeDir, tmp_path: Path) -> None:
    notes = {
        "front.md": ("---\ntitle: From the front matter\ntags: [a]\n---\n# A heading\n\nbody one\n", None),
        "setext.md": ("Underlined title\n================\n\nbody two\n", "Underlined title"),
        "long.md": ("# " + "長" * 2000 + "\n\nbody three\n", None),  # 6,000 bytes of heading
    }
    results = {}
    for name, (text, _) in notes.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        results[name] = _ingest_one(vault, tmp_path / name)
    assert {r["status"] for r in results.values()} == {"added"}
    titles = {name: vault.ok("memory", "read", "notes", r["id"])["title"] for name, r in results.items()}
    assert titles["front.md"] == "From the front matter"
    assert titles["setext.md"] == "Underlined title"
    long = titles["long.md"]
    assert len(long.encode()) <= MAX_TITLE_BYTES and long.endswith("…") and set(long[:-1]) == {"長"}
    assert _ingest_one(vault, tmp_path / "long.md")["status"] == "unchanged"


def test_front_matter_is_not_the_first_snippet(vault: HomeDir, tmp_path: Path) -> None:
    note = tmp_path / "fm.md"
    note.write_text("---\ntitle: Quarterly planning\nauthor: someone\n---\n\nWe plan the quarter in March.\n")
    card = _ingest_one(vault, note)
    body = vault.ok("memory", "read", "notes", card["id"])["body"]
    assert body.startswith("---\n")  # the card keeps the file's text as it is
    for query in ("quarterly planning", "march"):  # by the title, and by the text
        hits = vault.ok("rag", "search", "notes", query)["results"]
        assert [h["text"] for h in hits] == ["We plan the quarter in March."], query
        start, end = hits[0]["byte_start"], hits[0]["byte_end"]
        assert body.encode()[start:end].decode() == hits[0]["text"]
    [record] = vault.ok("memory", "search", "notes", "quarterly")["results"]
    assert [c["text"] for c in record["chunks"]] == ["We plan the quarter in March."]
