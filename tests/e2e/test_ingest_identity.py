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


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _ingest(home: HomeDir, *paths: Path | str) -> list[dict]:
    return home.ok("rag", "ingest", "notes", *map(str, paths))["results"]


def test_three_translations_of_the_rust_book_are_three_cards_per_chapter(vault: HomeDir, corpus: Path) -> None:
    book = corpus / "rust-book"
    by_language = {}
    for language in ("en", "zh-cn", "zh-tw"):
        results = _ingest(vault, book / language)
        assert {r["status"] for r in results} == {"added"}, results
        by_language[language] = {r["source"]: r["id"] for r in results}
    chapters = sorted(p.name for p in (book / "en").glob("*.md"))
    for chapter in chapters:
        assert len({by_language[language][chapter] for language in by_language}) == 3, chapter
    cards = {r["id"]: r["title"] for r in vault.ok("memory", "list", "notes", "--kind", "card")["records"]}
    assert len(cards) == sum(len(ids) for ids in by_language.values()) == 3 * len(chapters) + 1  # + a glossary
    for record_id, title in cards.items():
        hits = vault.ok("rag", "search", "notes", title, "--match-mode", "phrase", "--limit", "100")["results"]
        assert record_id in {hit["asset_id"] for hit in hits}, title


def test_two_files_with_the_same_name_named_directly_are_two_cards(vault: HomeDir, tmp_path: Path) -> None:
    first = _write(tmp_path / "a" / "README.md", "# Alpha\n\nabout quokkas\n")
    second = _write(tmp_path / "b" / "README.md", "# Beta\n\nabout wombats\n")
    [a] = _ingest(vault, first)
    [b] = _ingest(vault, second)
    assert (a["status"], b["status"]) == ("added", "added")
    assert (a["source"], b["source"]) == ("README.md", "README.md")
    assert a["id"] != b["id"]
    both = _ingest(vault, first, second)  # in one command too, and nothing is refused any more
    assert [(r["status"], r["id"]) for r in both] == [("unchanged", a["id"]), ("unchanged", b["id"])]
    _write(second, "# Beta\n\nabout wombats and numbats\n")
    again = _ingest(vault, first, second)
    assert [(r["status"], r["id"], r["revision"]) for r in again] == [
        ("unchanged", a["id"], 1),
        ("updated", b["id"], 2),
    ]
    assert vault.ok("memory", "read", "notes", a["id"])["body"] == "# Alpha\n\nabout quokkas\n"
    for word, record_id in (("quokkas", a["id"]), ("numbats", b["id"])):
        assert [h["asset_id"] for h in vault.ok("rag", "search", "notes", word)["results"]] == [record_id]


def test_a_moved_file_keeps_its_card_and_a_copy_is_a_new_card(vault: HomeDir, tmp_path: Path) -> None:
    old = _write(tmp_path / "old" / "note.md", "# Moving\n\nabout otters\n")
    [first] = _ingest(vault, tmp_path / "old")
    new = tmp_path / "new" / "renamed.md"
    new.parent.mkdir()
    old.rename(new)
    [moved] = _ingest(vault, new)
    assert (moved["status"], moved["id"], moved["revision"], moved["source"]) == (
        "moved",
        first["id"],
        2,
        "renamed.md",
    )
    assert vault.ok("memory", "read", "notes", first["id"])["meta"]["source"] == "renamed.md"
    copy = _write(tmp_path / "copy.md", new.read_text())  # same text, but the card's file still exists
    [copied] = _ingest(vault, copy)
    assert copied["status"] == "added" and copied["id"] != first["id"]
    assert _ingest(vault, new)[0]["status"] == "unchanged"


def test_the_file_identity_survives_a_metadata_update_and_is_never_searchable(vault: HomeDir, tmp_path: Path) -> None:
    note = _write(tmp_path / "zqxsecretfolder" / "note.md", "# Kept\n\nabout herons\n")
    [first] = _ingest(vault, note)
    vault.ok("memory", "update", "notes", first["id"], "--meta", "topic=birds")  # replaces every meta key
    [again] = _ingest(vault, note)
    assert (again["status"], again["id"]) == ("updated", first["id"])  # its source comes back
    meta = vault.ok("memory", "read", "notes", first["id"])["meta"]
    assert meta == {"source": "note.md", "topic": "birds", "date": meta["date"]}  # the file's time: the note's date
    assert _ingest(vault, note)[0]["status"] == "unchanged"
    assert vault.ok("rag", "search", "notes", "zqxsecretfolder")["results"] == []
    assert vault.ok("memory", "search", "notes", "zqxsecretfolder")["results"] == []
    hit = vault.ok("rag", "search", "notes", "herons")["results"][0]
    assert "zqxsecretfolder" not in str(hit)
    assert "zqxsecretfolder" not in str(vault.ok("memory", "read", "notes", first["id"]))


def test_cards_of_the_previous_release_are_found_by_source_and_text(tmp_path: Path) -> None:
    home, notes, manifest = _old_home(tmp_path)
    try:
        old = {r["source"]: r for r in manifest["vaults"][0]["records"] if r["kind"] == "card"}
        [direct] = home.ok("rag", "ingest", "notes", str(notes / "direct" / "single.md"))["results"]
        assert (direct["status"], direct["id"]) == ("unchanged", old["single.md"]["id"])
        walked = home.ok("rag", "ingest", "notes", str(notes), "--recursive")["results"]
        found = {r["source"]: (r["status"], r["id"]) for r in walked}
        assert found == {
            "README.md": ("unchanged", old["README.md"]["id"]),
            "changed.md": ("unchanged", old["changed.md"]["id"]),
            "guide/README.md": ("unchanged", old["guide/README.md"]["id"]),
            "guide/setup.md": ("unchanged", old["guide/setup.md"]["id"]),
            "direct/single.md": ("unchanged", old["single.md"]["id"]),  # the same file, unchanged: its revision stays
        }
        _write(notes / "changed.md", "# Changed later\n\nA third version, about lanterns.\n")
        [changed] = home.ok("rag", "ingest", "notes", str(notes / "changed.md"))["results"]
        assert (changed["status"], changed["id"]) == ("updated", old["changed.md"]["id"])
        assert len(home.ok("memory", "list", "notes", "--kind", "card")["records"]) == len(old)
        assert [h["asset_id"] for h in home.ok("rag", "search", "notes", "lanterns")["results"]] == [changed["id"]]
    finally:
        home.stop()
