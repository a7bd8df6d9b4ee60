"""Issue 3 end to end: ingest real notes, chunk them, search them with BM25, through the installed executable.

One daemon serves most tests (module scope): vault ``corpus`` holds a copy of ``tests/corpus`` (ingested once;
the index is built on the first search), vault ``misc`` holds small records each test adds with words of its own,
and refusal tests ingest into vaults of their own that are never searched (so they never evict a cached index).
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memories.cli.output import relative_scores
from memories.rag.notes import front_matter_end
from ops.corpus import CORPUS, load_queries
from tests.fixtures.daemon import FAST_KDF, HomeDir, Run, initialize

CORPUS_NOTES = 311
BOM_NOTE = "cloudywing-hackmd-notes/docs/devops/解決 WSL 2 Docker 檔案權限問題.md"
LARGEST_NOTE = "rails-guides-zh/guides/edge/active_support_core_extensions.md"
EDITED_NOTE = "ruanyf-document-style-guide/docs/marks.md"
MATCH_MODES = ("any", "all", "phrase")
HIT_KEYS = {
    "label",
    "asset_id",
    "revision",
    "chunk_hash",
    "byte_start",
    "byte_end",
    "score",
    "title",
    "kind",
    "source",
    "text",
}
"""The keys of a ``rag search --json`` result (issue 3). ``highlights`` never come with ``--json``: the CLI asks for
them for human output only (their folding is tested in ``tests/unit/test_analysis.py``)."""
STATUS_KEYS = {
    "vault",
    "locked",
    "records",
    "chunks",
    "cache",
    "text_bytes",
    "limits",
    "last_build",
    "model",
    "embedded",
    "missing",
    "vector_bytes",
    "failed",
    "vectors",
    "indexing",
    "watch_count",
    "watches",
    "over_limit",
    "background_failure",
}
MAX_CHUNK_CODE_POINTS = 768


def corpus_queries() -> list[Any]:
    """The rows of ``tests/corpus/queries.md``: (query, expected top file), one pytest param per row id."""
    rows = [pytest.param(row.query, row.expected, id=row.id) for row in load_queries(CORPUS)]
    assert len(rows) >= 10, "queries.md has no table of search checks"
    return rows


@dataclass
class Lab:
    """The shared daemon: its home, the corpus copy and what the first ingest reported."""

    home: HomeDir
    root: Path
    notes: Path
    ingest: Run
    cold_status: dict[str, Any]
    _bodies: dict[tuple[str, str, int], str] = field(default_factory=dict)

    def body(self, vault: str, record_id: str, revision: int) -> str:
        """The body of one revision of a record (read once)."""
        key = (vault, record_id, revision)
        if key not in self._bodies:
            record = self.home.ok("memory", "read", vault, record_id, "--revision", str(revision))
            self._bodies[key] = record["body"]
        return self._bodies[key]

    def add(self, title: str, body: str, *options: str, vault: str = "misc") -> str:
        return self.home.ok("memory", "add", vault, "--title", title, "--body", body, *options)["id"]

    def search(self, query: str, *options: str, vault: str = "misc", match: str = "any", limit: int = 100) -> Any:
        """``rag search --mode bm25`` that must succeed."""
        return self.home.ok(
            "rag", "search", vault, query, "--mode", "bm25", "--match-mode", match, "--limit", str(limit), *options
        )

    def found(self, query: str, *, vault: str = "misc", match: str = "any") -> list[str]:
        """Record ids of ``rag search`` results, in rank order, each once."""
        return list(dict.fromkeys(hit["asset_id"] for hit in self.search(query, vault=vault, match=match)["results"]))

    def memory_found(self, query: str, vault: str = "misc") -> list[str]:
        return [record["id"] for record in self.home.ok("memory", "search", vault, query, "--limit", "100")["results"]]

    def folder(self, name: str, files: dict[str, bytes]) -> Path:
        folder = self.root / name
        for relative, data in files.items():
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).write_bytes(data)
        return folder


def ingest_corpus(home: HomeDir, notes: Path) -> Run:
    return home.run(
        "rag", "ingest", "corpus", str(notes), "--recursive", "--exclude", "SOURCES.md", "--exclude", "queries.md"
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("lexical")
    home = HomeDir(root / "home")
    home.path.mkdir(mode=0o700)
    home.config.write_text(FAST_KDF)
    try:
        initialize(home, "corpus")
        home.ok("vault", "create", "misc")
        notes = root / "notes"
        shutil.copytree(corpus, notes)  # tests edit this copy, never tests/corpus
        cold_status = home.ok("rag", "status", "corpus")  # before the ingest
        ingest = ingest_corpus(home, notes)
        yield Lab(home, root, notes, ingest, cold_status)
    finally:
        home.stop()


def assert_spans_point_into_bodies(lab: Lab, hits: list[dict[str, Any]], vault: str) -> None:
    """Every hit's text is its record body's UTF-8 bytes [byte_start, byte_end), decoded."""
    for hit in hits:
        body = lab.body(vault, hit["asset_id"], hit["revision"]).encode("utf-8")
        assert 0 <= hit["byte_start"] < hit["byte_end"] <= len(body), hit
        assert body[hit["byte_start"] : hit["byte_end"]].decode("utf-8") == hit["text"], hit
        assert 0 < len(hit["text"]) <= MAX_CHUNK_CODE_POINTS


# -- acceptance 1: the sample notes ----------------------------------------------------------------------------


def test_corpus_ingest_adds_every_note_as_a_card(lab: Lab) -> None:
    assert lab.ingest.code == 0, lab.ingest.stdout + lab.ingest.stderr
    assert "Traceback" not in lab.ingest.stderr
    results = lab.ingest.doc["results"]
    added = [r for r in results if r["status"] == "added"]
    skipped = [r for r in results if r["status"] == "skipped"]
    assert len(added) == CORPUS_NOTES and len(results) == len(added) + len(skipped)
    assert {r["source"] for r in skipped} == {"MANIFEST.tsv", "bench.jsonl"} | {
        f"LICENSES/{p.name}" for p in (CORPUS / "LICENSES").iterdir()
    }
    for result in added:
        assert result["source"] == Path(result["path"]).relative_to(lab.notes).as_posix()
        assert result["revision"] == 1 and result["error"] is None
    assert "SOURCES.md" not in {r["source"] for r in results} and "queries.md" not in {r["source"] for r in results}
    cards = lab.home.ok("memory", "list", "corpus", "--kind", "card")["records"]
    assert len(cards) == CORPUS_NOTES
    assert {c["id"] for c in cards} == {r["id"] for r in added}
    assert {c["sensitivity"] for c in cards} == {"general"}


def test_bom_note_title_tags_and_body(lab: Lab) -> None:
    ref = next(r for r in lab.ingest.doc["results"] if r["source"] == BOM_NOTE)
    record = lab.home.ok("memory", "read", "corpus", ref["id"])
    raw = (CORPUS / BOM_NOTE).read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    assert not record["body"].startswith("\ufeff")
    assert record["body"].encode("utf-8") == raw[3:]
    assert record["title"] == "解決 WSL 2 Docker 檔案權限問題"
    tags = "Docker, WSL, Visual Studio Code, Dev Containers"
    assert record["meta"] == {"source": BOM_NOTE, "tags": tags, "date": record["meta"]["date"]}


@pytest.mark.parametrize(("query", "expected"), corpus_queries())
def test_corpus_query_finds_expected_note_in_top_3_records(lab: Lab, query: str, expected: str) -> None:
    hits = lab.search(query, vault="corpus", limit=30)["results"]
    sources: dict[str, str] = {}
    for hit in hits:
        sources.setdefault(hit["asset_id"], hit["source"])
    top3 = list(sources.values())[:3]
    assert expected in top3, f"{query!r}: top 3 records are {top3}"


def test_reingesting_the_same_folder_changes_nothing(lab: Lab) -> None:
    again = ingest_corpus(lab.home, lab.notes)
    assert again.code == 0, again.stdout + again.stderr
    first = {r["source"]: r for r in lab.ingest.doc["results"]}
    for result in again.doc["results"]:
        before = first[result["source"]]
        if before["status"] == "skipped":
            assert result["status"] == "skipped"
        else:
            assert result["status"] == "unchanged", result
            assert result["id"] == before["id"]
    assert len(again.doc["results"]) == len(first)
    assert len(lab.home.ok("memory", "list", "corpus", "--kind", "card")["records"]) == CORPUS_NOTES


def test_changed_note_becomes_revision_2_of_the_same_card(lab: Lab) -> None:
    edited = lab.notes / EDITED_NOTE
    edited.write_text(edited.read_text(encoding="utf-8") + "\n\nAn appended zorblaxedit paragraph.\n", "utf-8")
    rerun = ingest_corpus(lab.home, lab.notes)
    assert rerun.code == 0, rerun.stdout + rerun.stderr
    statuses = {r["source"]: r for r in rerun.doc["results"] if r["status"] != "skipped"}
    original = next(r for r in lab.ingest.doc["results"] if r["source"] == EDITED_NOTE)
    assert statuses[EDITED_NOTE]["status"] == "updated"
    assert (statuses[EDITED_NOTE]["id"], statuses[EDITED_NOTE]["revision"]) == (original["id"], 2)
    assert [s for s, r in statuses.items() if r["status"] != "unchanged"] == [EDITED_NOTE]
    hits = lab.search("zorblaxedit", vault="corpus")["results"]
    assert [(h["asset_id"], h["revision"], h["source"]) for h in hits] == [(original["id"], 2, EDITED_NOTE)]
    assert len(lab.home.ok("memory", "list", "corpus", "--kind", "card")["records"]) == CORPUS_NOTES


# -- acceptance 2: nothing from the user is FTS5 syntax ----------------------------------------------------------


def test_escaping_queries_never_error_and_find_their_chunks(lab: Lab) -> None:
    bodies = {
        "BENCH-100821": "Order BENCH-100821 shipped",
        'foo"bar': 'he said foo"bar loudly',
        'C++ -tutorial "unbalanced': "C++ tutorial for beginners",
        "DO NOT USE FIND /": "do not use find / from root",
    }
    ids = {query: lab.add(f"escaping {n}", body) for n, (query, body) in enumerate(bodies.items())}
    found = {
        (query, match): lab.found(query, match=match)  # each one exits 0 with a JSON document
        for query in [*bodies, "OR", "NEAR(", "(foo", "*foo", "a:b"]
        for match in MATCH_MODES
    }
    for query, record_id in ids.items():
        assert record_id in found[query, "any"], query
    for query in ("BENCH-100821", 'foo"bar', "DO NOT USE FIND /"):
        for match in ("all", "phrase"):
            assert ids[query] in found[query, match], (query, match)


# -- acceptance 3: byte offsets ----------------------------------------------------------------------------------


def test_result_offsets_point_into_corpus_bodies(lab: Lab) -> None:
    checks = {
        BOM_NOTE: "解決 WSL 2 Docker 檔案權限問題 title lastmod 權限",
        LARGEST_NOTE: "blank present presence try to_param 扩展",
        "cloudywing-hackmd-notes/docs/data/Elasticsearch Query DSL 查詢語法筆記.md": "bool must should 查詢",
        "rust-book/zh-tw/ch04-01-what-is-ownership.md": "所有權 堆疊 堆積",
    }
    for source, query in checks.items():
        raw = (CORPUS / source).read_bytes().removeprefix(b"\xef\xbb\xbf")
        hits = [h for h in lab.search(query, "--cards-only", vault="corpus")["results"] if h["source"] == source]
        assert len(hits) >= 3, (source, len(hits))
        assert lab.body("corpus", hits[0]["asset_id"], hits[0]["revision"]).encode("utf-8") == raw
        assert_spans_point_into_bodies(lab, hits, "corpus")
        if source == BOM_NOTE:  # offsets count from the first byte after the BOM; front matter is not a chunk
            text = raw.decode("utf-8")
            after = text[front_matter_end(text) :]
            expected_start = len(raw) - len(after.lstrip().encode("utf-8"))
            first = min(hits, key=lambda h: h["byte_start"])
            assert first["byte_start"] == expected_start and not first["text"].startswith("---")


def test_emoji_body_is_one_chunk_of_six_bytes(lab: Lab) -> None:
    record_id = lab.add("emojispan check", "A😀B")
    hits = lab.search("emojispan")["results"]
    assert [(h["asset_id"], h["byte_start"], h["byte_end"], h["text"]) for h in hits] == [(record_id, 0, 6, "A😀B")]


def test_empty_body_is_found_by_its_title(lab: Lab) -> None:
    record_id = lab.add("hollowtitleword only", "")
    hits = lab.search("hollowtitleword")["results"]
    assert [(h["asset_id"], h["byte_start"], h["byte_end"], h["text"]) for h in hits] == [(record_id, 0, 0, "")]
    assert lab.memory_found("hollowtitleword") == [record_id]


# -- acceptance 4: width, case and script folding ----------------------------------------------------------------


def test_full_width_case_and_script_folding(lab: Lab) -> None:
    report = lab.add("fold one", "２０１２年报告")
    company = lab.add("fold two", "ＡＢＣ公司")
    simplified = lab.add("fold three", "数据库迁移")
    traditional = lab.add("fold four", "資料庫備份")
    hits = lab.search("2012")["results"]
    assert [h["asset_id"] for h in hits] == [report]
    assert "highlights" not in hits[0]
    assert company in lab.found("abc")
    assert company in lab.found("ＡＢＣ")
    assert {simplified, traditional} <= set(lab.found("資料庫"))
    assert {simplified, traditional} <= set(lab.found("数据库"))
    assert simplified in lab.found("資料庫遷移", match="phrase")


# -- acceptance 5: match modes and cards only --------------------------------------------------------------------


def test_all_requires_every_term_and_phrase_the_order(lab: Lab) -> None:
    in_order = lab.add("modes one", "quokka zebu marmot graze together")
    reordered = lab.add("modes two", "marmot zebu quokka graze apart")
    one_term = lab.add("modes three", "a lone quokka")
    cjk = lab.add("modes four", "中国农业发展银行的报告")
    cjk_reordered = lab.add("modes five", "银行发展农业的报告")
    assert set(lab.found("quokka marmot")) == {in_order, reordered, one_term}
    assert set(lab.found("quokka marmot", match="all")) == {in_order, reordered}
    assert set(lab.found("Quokka  ZEBU marmot", match="phrase")) == {in_order}
    assert set(lab.found("农业", match="all")) == {cjk, cjk_reordered}
    assert set(lab.found("农业发展银行", match="phrase")) == {cjk}


def test_all_does_not_depend_on_how_jieba_cuts_the_note(lab: Lab) -> None:
    # Jieba cuts the note into 中国人民银行 (and 人民, 银行); the query 人民银行 also asks for the compound itself.
    bank = lab.add("modes six", "中国人民银行发布通知")
    assert bank in lab.found("人民银行", match="phrase")
    assert bank in lab.found("人民银行", match="all")
    assert bank in lab.found("人民銀行 通知", match="all")
    assert bank not in lab.found("人民银行 quokka", match="all")


def test_one_han_character_finds_the_notes_that_write_it_inside_a_word(lab: Lab) -> None:
    # Jieba keeps 鳄鱼 whole, so no chunk holds 鳄 as a word: the query stands for the words that contain it.
    crocodile = lab.add("modes seven", "鳄鱼的牙齿一生都会更换")
    for match in ("any", "all", "phrase"):
        assert lab.found("鳄", match=match) == [crocodile], match
    assert lab.found("鱷") == [crocodile]  # Traditional, folded like every other query
    assert lab.memory_found("鳄") == [crocodile]


def test_the_querys_own_script_wins_a_tie_between_translations(lab: Lab) -> None:
    # The same guide in both scripts scores the same once Traditional is folded to Simplified; the twin in the
    # other script is still found (below other notes of this vault that write 数据库迁移 as the query does).
    simplified = lab.add("script one", "狸猫数据库迁移：如何回滚上一次迁移")
    traditional = lab.add("script two", "狸貓資料庫遷移：如何回滾上一次遷移")
    for query, first, twin in (
        ("狸猫数据库迁移 回滚", simplified, traditional),
        ("狸貓資料庫遷移 回滾", traditional, simplified),
    ):
        found = lab.found(query)
        assert found.index(first) == 0, query
        assert twin in found, query


def test_the_querys_own_script_comes_first_between_the_two_rails_migration_guides(lab: Lab) -> None:
    # Issue 11: the Traditional guide writes 遷移 and 資料庫 on every line and scores higher through folding; the
    # Simplified guide, which keeps the English word Migration, must still come first for a Simplified query.
    guides = "rails-guides-zh/guides/edge-translation/migrations-zh_"
    sources = {}
    for query in ("数据库迁移 回滚", "資料庫遷移 回滾"):
        hits = lab.search(query, vault="corpus", limit=30)["results"]
        sources[query] = list(dict.fromkeys(hit["source"] for hit in hits))
    assert sources["数据库迁移 回滚"][:2] == [f"{guides}CN.md", f"{guides}TW.md"]
    assert sources["資料庫遷移 回滾"][0] == f"{guides}TW.md"


def test_cards_only_returns_only_cards(lab: Lab) -> None:
    note = lab.folder("cards-only", {"wombatcard.md": b"# Wombat card\n\nwombatcardword lives here\n"})
    card = lab.home.ok("rag", "ingest", "misc", str(note / "wombatcard.md"))["results"][0]
    assert (card["status"], card["source"]) == ("added", "wombatcard.md")
    memory = lab.add("wombat memory", "wombatcardword in a memory")
    both = lab.search("wombatcardword")["results"]
    assert {(h["asset_id"], h["kind"]) for h in both} == {(card["id"], "card"), (memory, "memory")}
    cards = lab.search("wombatcardword", "--cards-only")["results"]
    assert [(h["asset_id"], h["kind"], h["source"]) for h in cards] == [(card["id"], "card", "wombatcard.md")]


# -- acceptance 6: changes show in the very next search ----------------------------------------------------------


def test_add_update_delete_show_in_the_next_search(lab: Lab) -> None:
    lab.search("warmup")  # the index is warm: what follows must update it, not build it
    record_id = lab.add("mutable", "the first text says glimmerold")
    assert lab.found("glimmerold") == [record_id]
    assert lab.memory_found("glimmerold") == [record_id]

    lab.home.ok("memory", "update", "misc", record_id, "--body", "the second text says glimmernew")
    assert lab.found("glimmerold") == [] and lab.memory_found("glimmerold") == []
    hits = lab.search("glimmernew")["results"]
    assert [(h["asset_id"], h["revision"], h["text"]) for h in hits] == [
        (record_id, 2, "the second text says glimmernew")
    ]
    assert lab.memory_found("glimmernew") == [record_id]

    lab.home.ok("memory", "delete", "misc", record_id)
    assert lab.found("glimmernew") == [] and lab.memory_found("glimmernew") == []


# -- acceptance 7: private records and credentials never come out ------------------------------------------------


def test_private_records_and_credentials_are_never_returned(lab: Lab) -> None:
    lab.search("warmup")
    lab.add("secretdiaryword title", "secretdiaryword in a private memory", "--sensitivity", "private")
    lab.add("bankvaultword title", "bankvaultword hunter2", "--kind", "credential")
    lab.add("bankvaultword card", "bankvaultword private card", "--kind", "card", "--sensitivity", "private")
    for word in ("secretdiaryword", "bankvaultword", "hunter2"):
        for match in MATCH_MODES:
            assert lab.search(word, match=match)["results"] == [], (word, match)
        assert lab.home.ok("memory", "search", "misc", word) == {"results": []}


def test_making_a_card_private_hides_it_until_it_is_general_again(lab: Lab) -> None:
    note = lab.folder("policy", {"policycard.md": b"# Policy card\n\nshyplatypusword is here\n"})
    card = lab.home.ok("rag", "ingest", "misc", str(note))["results"][0]["id"]
    assert lab.found("shyplatypusword") == [card] and lab.memory_found("shyplatypusword") == [card]
    lab.home.ok("memory", "update", "misc", card, "--sensitivity", "private")
    for match in MATCH_MODES:
        assert lab.found("shyplatypusword", match=match) == []
    assert lab.memory_found("shyplatypusword") == []
    lab.home.ok("memory", "update", "misc", card, "--sensitivity", "general")
    assert lab.found("shyplatypusword") == [card] and lab.memory_found("shyplatypusword") == [card]


# -- acceptance 8: refusals, skips and walking -------------------------------------------------------------------


def _docx() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types/>')
        archive.writestr("word/document.xml", "<w:document>hello</w:document>")
    return buffer.getvalue()


NOT_TEXT = {
    "scan.pdf": b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n",
    "letter.docx": _docx(),
    "photo.png": b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
    "latin1.txt": "café au lait".encode("latin-1"),
    "nul.md": b"# Title\n\nbefore\x00after\n",
}


def _vault(lab: Lab, name: str) -> str:
    lab.home.ok("vault", "create", name)
    return name


def test_each_non_text_file_is_refused_with_unsupported_file(lab: Lab) -> None:
    vault = _vault(lab, "refusals")
    folder = lab.folder("refused", NOT_TEXT)
    for name in NOT_TEXT:
        run = lab.home.run("rag", "ingest", vault, str(folder / name))
        assert run.code == 1, (name, run.stdout, run.stderr)
        assert "Traceback" not in run.stderr
        [result] = run.doc["results"]
        assert (result["status"], result["id"], result["error"]["code"]) == ("refused", None, "unsupported_file")
        message = result["error"]["message"]
        assert name in message and re.search(r"convert .*to text", message), message
    assert lab.home.ok("memory", "list", vault) == {"records": []}


def test_a_mixed_run_stores_exactly_the_good_files_and_exits_3(lab: Lab) -> None:
    vault = _vault(lab, "mixed")
    folder = lab.folder("mixed", {**NOT_TEXT, "good.md": b"# Good one\n\nfine\n", "good.txt": b"plain text\n"})
    run = lab.home.run(
        "rag", "ingest", vault, *(str(folder / name) for name in [*sorted(NOT_TEXT), "good.md", "good.txt"])
    )
    assert run.code == 3, run.stdout + run.stderr
    statuses = {r["source"]: r["status"] for r in run.doc["results"]}
    assert statuses == {**dict.fromkeys(NOT_TEXT, "refused"), "good.md": "added", "good.txt": "added"}
    added = {r["id"] for r in run.doc["results"] if r["status"] == "added"}
    records = lab.home.ok("memory", "list", vault)["records"]
    assert {r["id"] for r in records} == added
    assert sorted(r["title"] for r in records) == ["Good one", "good.txt"]

    only_bad = lab.home.run("rag", "ingest", vault, str(folder / "scan.pdf"), str(folder / "nul.md"))
    assert only_bad.code == 1, only_bad.stdout + only_bad.stderr
    assert [r["status"] for r in only_bad.doc["results"]] == ["refused", "refused"]
    assert {r["id"] for r in lab.home.ok("memory", "list", vault)["records"]} == added


def test_folder_walk_skips_non_text_and_exclude_matches_at_any_depth(lab: Lab) -> None:
    vault = _vault(lab, "walk")
    folder = lab.folder(
        "walk",
        {
            "keep.md": b"# Keep\n",
            "scan.pdf": NOT_TEXT["scan.pdf"],
            "drafts.md": b"# Draft\n",
            "sub/other.txt": b"other\n",
            "sub/drafts.md": b"# Draft\n",
            "sub/deep/drafts.md": b"# Draft\n",
        },
    )
    run = lab.home.run("rag", "ingest", vault, str(folder), "--recursive", "--exclude", "drafts.md")
    assert run.code == 0, run.stdout + run.stderr
    statuses = {r["source"]: r["status"] for r in run.doc["results"]}
    assert statuses == {"keep.md": "added", "scan.pdf": "skipped", "sub/other.txt": "added"}
    assert len(lab.home.ok("memory", "list", vault)["records"]) == 2


def test_title_with_several_files_is_a_usage_error(lab: Lab) -> None:
    vault = _vault(lab, "titled")
    folder = lab.folder("titled", {"a.md": b"a\n", "b.md": b"b\n"})
    run = lab.home.run("rag", "ingest", vault, str(folder / "a.md"), str(folder / "b.md"), "--title", "Both")
    assert run.code == 2 and "Traceback" not in run.stderr
    assert "--title" in run.stderr
    assert lab.home.ok("memory", "list", vault) == {"records": []}
    one = lab.home.ok("rag", "ingest", vault, str(folder / "a.md"), "--title", "Only A")["results"][0]
    assert lab.home.ok("memory", "read", vault, one["id"])["title"] == "Only A"


# -- result documents --------------------------------------------------------------------------------------------


def test_rag_search_document_shape_labels_scores_and_hashes(lab: Lab) -> None:
    document = lab.search("ownership 所有權 heap", vault="corpus", limit=20)
    assert set(document) == {"mode", "match_mode", "results", "weak_matches"}
    assert (document["mode"], document["match_mode"]) == ("bm25", "any")
    hits = document["results"]
    assert len(hits) == 20
    assert [h["label"] for h in hits] == [f"S{n}" for n in range(1, 21)]
    for hit in hits:
        assert set(hit) == HIT_KEYS
        assert hit["kind"] == "card" and hit["score"] > 0
        assert hit["chunk_hash"] == hashlib.sha256(hit["text"].encode("utf-8")).hexdigest()
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert_spans_point_into_bodies(lab, hits, "corpus")
    again = lab.search("ownership 所有權 heap", vault="corpus", limit=20)["results"]
    key = ("asset_id", "revision", "chunk_hash", "byte_start", "byte_end")
    assert [[h[k] for k in key] for h in again] == [[h[k] for k in key] for h in hits]


def test_memory_search_groups_chunks_by_record(lab: Lab) -> None:
    document = lab.home.ok("memory", "search", "corpus", "git rebase commit", "--limit", "5")
    assert set(document) == {"results"}
    records = document["results"]
    assert len(records) == 5
    assert len({r["id"] for r in records}) == 5
    scores = [r["score"] for r in records]
    assert scores == sorted(scores, reverse=True)
    labels = []
    for record in records:
        assert set(record) == {"id", "revision", "title", "score", "chunks"}
        assert record["chunks"]
        for chunk in record["chunks"]:
            assert set(chunk) == {"label", "byte_start", "byte_end", "text"}
            body = lab.body("corpus", record["id"], record["revision"]).encode("utf-8")
            assert body[chunk["byte_start"] : chunk["byte_end"]].decode("utf-8") == chunk["text"]
            labels.append(chunk["label"])
    assert labels == [f"S{n}" for n in range(1, len(labels) + 1)]
    rag_first = lab.search("git rebase commit", vault="corpus", limit=1)["results"][0]["asset_id"]
    assert records[0]["id"] == rag_first


def test_memory_search_fills_its_limit_when_more_records_match(lab: Lab) -> None:
    # "rails active support" matches about 50 notes; one long note alone holds the best 100 chunks, so grouping
    # the first chunk window would give far fewer than 20 records.
    chunks = lab.search("rails active support", vault="corpus", limit=100)["results"]
    assert len({hit["asset_id"] for hit in chunks}) < 20
    records = lab.home.ok("memory", "search", "corpus", "rails active support", "--limit", "20")["results"]
    assert len(records) == 20 and len({r["id"] for r in records}) == 20
    everything = lab.home.ok("memory", "search", "corpus", "rails active support", "--limit", "100")["results"]
    assert 20 < len(everything) < 100


def test_search_limits(lab: Lab) -> None:
    home = lab.home
    for command in ("rag", "memory"):
        error = home.fails("limit_too_large", command, "search", "misc", "anything", "--limit", "101")
        assert "100" in error["message"]
        home.fails("query_too_long", command, "search", "misc", "测" * 341 + "ab")  # 1,025 bytes
        home.ok(command, "search", "misc", "x" * 1024)
        words = [f"w{chr(97 + n // 26)}{chr(97 + n % 26)}" for n in range(65)]
        home.fails("too_many_terms", command, "search", "misc", " ".join(words))
        home.ok(command, "search", "misc", " ".join(words[:64]))
        for empty in ("", "   ", "?!，。…—()"):
            assert home.ok(command, "search", "misc", empty)["results"] == []
    home.ok("rag", "search", "misc", "anything", "--limit", "100")
    for match in MATCH_MODES:
        assert lab.search("?!，。", match=match)["results"] == []


def test_rag_status_cold_then_warm_after_ingest(lab: Lab) -> None:
    cold = lab.cold_status
    assert set(cold) == STATUS_KEYS
    assert (cold["locked"], cold["records"], cold["cache"], cold["chunks"]) == (False, 0, "cold", 0)
    assert cold["limits"]["chunks"] == 100_000 and cold["limits"]["text_bytes"] == 160 * 1024 * 1024
    assert cold["over_limit"] is None
    assert cold["model"]["installed"] is False
    warm = lab.home.ok("rag", "status", "corpus")  # the ingest built the index before it answered
    assert set(warm) == STATUS_KEYS
    assert (warm["vault"], warm["locked"], warm["cache"]) == (cold["vault"], False, "warm")
    assert warm["records"] == CORPUS_NOTES
    assert warm["chunks"] > CORPUS_NOTES and warm["text_bytes"] > 3_000_000
    assert warm["last_build"] is not None
    assert (warm["embedded"], warm["vector_bytes"]) == (0, 0)


def test_default_mode_without_a_model_is_bm25(lab: Lab) -> None:
    record_id = lab.add("default mode", "defaultmodeword")
    document = lab.home.ok("rag", "search", "misc", "defaultmodeword")
    assert document["mode"] == "bm25"
    assert [h["asset_id"] for h in document["results"]] == [record_id]


def test_human_output_shows_label_title_and_score(lab: Lab) -> None:
    document = lab.search("spawn threads join handle", vault="corpus", limit=3)
    human = lab.home.run(
        "rag", "search", "corpus", "spawn threads join handle", "--mode", "bm25", "--limit", "3", json_output=False
    )
    assert human.code == 0 and "Traceback" not in human.stderr
    shares = relative_scores([hit["score"] for hit in document["results"]])
    for hit, share in zip(document["results"], shares, strict=True):
        assert f"[{hit['label']}] {share}  {hit['title']}" in human.stdout
    assert shares[0] == "100%" and not re.search(r"\de[-+]\d", human.stdout)  # never 3.75e-06 or 0.000001856
    memory = lab.home.run("memory", "search", "corpus", "spawn threads", json_output=False)
    assert memory.code == 0 and "Traceback" not in memory.stderr and "[S1]" in memory.stdout


def test_human_status_labels_chunks_and_distinct_inputs(lab: Lab) -> None:
    """Chunks with the same title and text share one model input (the corpus had 4,815 chunks and 4,814 inputs):
    the output labels both figures so they read as consistent."""
    status = lab.home.ok("rag", "status", "corpus")
    inputs = status["embedded"] + status["missing"]
    assert inputs <= status["chunks"]
    human = lab.home.run("rag", "status", "corpus", json_output=False)
    assert f"{status['chunks']:,} chunks" in human.stdout
    assert f"{inputs:,} distinct inputs to embed (identical chunks share one)" in human.stdout


def test_status_while_locked(vault: HomeDir) -> None:
    vault.ok("memory", "add", "notes", "--title", "lockme", "--body", "lockedstatusword")
    vault.ok("rag", "search", "notes", "lockedstatusword")
    assert vault.ok("rag", "status", "notes")["cache"] == "warm"
    vault.ok("lock")
    status = vault.ok("rag", "status", "notes")
    assert set(status) == STATUS_KEYS
    assert (status["locked"], status["cache"], status["chunks"]) == (True, "cold", 0)
