"""BM25 over FTS5: escaping, match modes, incremental updates, limits and the corpus queries (R-13 … R-21)."""

from __future__ import annotations

import random
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memories.config import RagConfig
from memories.errors import MemoriesError
from memories.limits import IndexLimits
from memories.protocol import MatchMode
from memories.rag.analysis import AnalyzedQuery, analyze_query
from memories.rag.lexical import LexicalEntry, LexicalIndex
from memories.rag.pipeline import VaultCache
from memories.rag.vault_index import Hit, VaultIndex
from memories.worker_protocol import IndexRecord
from ops.corpus import load_notes, load_queries

_MODES: tuple[MatchMode, ...] = ("any", "all", "phrase")


def _record(
    record_id: str,
    body: str,
    *,
    kind: Literal["memory", "card"] = "card",
    title: str = "",
    revision: int = 1,
    source: str | None = None,
    tags: tuple[str, ...] = (),
) -> IndexRecord:
    return IndexRecord(
        id=record_id, revision=revision, kind=kind, title=title, body=body, source=source, tags=list(tags)
    )


def _index(bodies: dict[str, str], *, max_chunks: int = 10_000, max_text_bytes: int = 16 * 1024 * 1024) -> VaultIndex:
    index = VaultIndex("vault", max_chunks=max_chunks, max_text_bytes=max_text_bytes)
    index.apply([_record(record_id, body) for record_id, body in bodies.items()], [])
    return index


def _found(
    index: VaultIndex, query: str, match_mode: MatchMode = "any", *, limit: int = 10, cards_only: bool = False
) -> list[str]:
    """Record ids of the hits, in rank order."""
    hits = index.search(analyze_query(query), match_mode=match_mode, limit=limit, cards_only=cards_only)
    return [hit.row.record_id for hit in hits]


ESCAPING = {
    "order": "Order BENCH-100821 shipped",
    "quote": 'he said foo"bar loudly',
    "cpp": "C++ tutorial for beginners",
    "find": "do not use find / from root",
}


@pytest.mark.parametrize(
    ("query", "expected", "strict_too"),
    [
        ("BENCH-100821", "order", True),
        ('foo"bar', "quote", True),
        ('C++ -tutorial "unbalanced', "cpp", False),
        ("DO NOT USE FIND /", "find", True),
    ],
)
def test_escaping_queries_find_their_chunk(query: str, expected: str, strict_too: bool) -> None:
    index = _index(ESCAPING)
    assert _found(index, query, "any")[0] == expected
    for mode in ("all", "phrase"):
        assert _found(index, query, mode) == ([expected] if strict_too else [])


@pytest.mark.parametrize("query", ["OR", "NEAR(", "(foo", "*foo", "a:b", "AND", "NOT x", '"', "^title", "{title}: x"])
@pytest.mark.parametrize("mode", _MODES)
def test_fts5_syntax_in_queries_never_errors(query: str, mode: MatchMode) -> None:
    index = _index(ESCAPING)
    _found(index, query, mode)
    index.filter_rowids(analyze_query(query), match_mode="all")


def test_fts5_syntax_is_plain_words() -> None:
    index = _index({"ops": "use OR and NEAR as words", "other": "nothing here"})
    assert _found(index, "OR") == ["ops"]
    assert _found(index, "NEAR(") == ["ops"]
    assert _found(index, "*foo") == []


def test_full_width_and_case_fold() -> None:
    index = _index({"report": "２０１２年报告", "company": "ＡＢＣ公司"})
    assert _found(index, "2012") == ["report"]
    assert _found(index, "abc") == ["company"]
    assert _found(index, "ＡＢＣ") == ["company"]


def test_traditional_and_simplified_find_each_other() -> None:
    index = _index({"zh-tw": "使用資料庫與記憶體", "zh-cn": "使用数据库和内存"})
    assert sorted(_found(index, "数据库")) == ["zh-cn", "zh-tw"]
    assert sorted(_found(index, "資料庫", "all")) == ["zh-cn", "zh-tw"]
    assert sorted(_found(index, "記憶體", "phrase")) == ["zh-cn", "zh-tw"]


def test_all_requires_every_term() -> None:
    index = _index({"both": "ownership and borrowing rules", "one": "ownership of the house", "none": "other"})
    assert sorted(_found(index, "ownership borrowing", "any")) == ["both", "one"]
    assert _found(index, "ownership borrowing", "all") == ["both"]
    assert _found(index, "ownership unknownword", "all") == []


def test_all_does_not_depend_on_how_jieba_cuts_note_and_query() -> None:
    # The note is cut into 中国人民银行 and its sub-words 人民, 银行; the query also gives 人民银行 itself.
    index = _index({"bank": "中国人民银行发布通知", "other": "人民群众", "latin": "banking 人民"})
    assert analyze_query("人民银行").terms == ("人民", "银行", "人民银行")
    assert _found(index, "人民银行", "all") == ["bank"]
    assert _found(index, "人民银行", "phrase") == ["bank"]
    assert index.filter_rowids(analyze_query("人民银行"), match_mode="all") == {
        index.search(analyze_query("通知"))[0].row.rowid
    }
    # Latin words stay whole words: "bank" is not in "banking".
    assert _found(index, "人民 bank", "all") == []
    assert _found(index, "人民 banking", "all") == ["latin"]


def test_phrase_requires_the_phrase_in_order() -> None:
    index = _index(
        {
            "in-order": "the stack and the heap",
            "reversed": "the heap and the stack",
            "apart": "the stack grows, and the heap too",
            "chinese": "栈（Stack）与堆（Heap）都是内存",
        }
    )
    assert _found(index, "stack and the heap", "phrase") == ["in-order"]
    assert sorted(_found(index, "stack and the heap", "all")) == ["apart", "in-order", "reversed"]
    assert _found(index, "与堆", "phrase") == ["chinese"]
    assert _found(index, "堆与", "phrase") == []


def test_phrase_matches_the_title_too() -> None:
    index = VaultIndex("vault")
    index.apply([_record("r", "Some body text.", title="Rust 所有權規則")], [])
    assert _found(index, "所有权规则", "phrase") == ["r"]


def test_cards_only() -> None:
    index = VaultIndex("vault")
    index.apply([_record("card", "shared word", kind="card"), _record("memory", "shared word", kind="memory")], [])
    assert sorted(_found(index, "shared")) == ["card", "memory"]
    for mode in _MODES:
        assert _found(index, "shared word", mode, cards_only=True) == ["card"]
    assert index.filter_rowids(analyze_query("shared"), match_mode="all", cards_only=True) == {
        row.rowid for row in index.rows() if row.kind == "card"
    }


def test_scores_are_higher_is_better_and_weigh_the_title() -> None:
    index = VaultIndex("vault")
    filler = [_record(f"filler{number}", "other animals in a long sentence about many things") for number in range(8)]
    index.apply(
        [
            *filler,
            _record("body-once", "zebra and other animals in a long sentence about many things"),
            _record("body-thrice", "zebra zebra zebra and other animals in a long sentence"),
            _record("title", "other animals in a long sentence about many things", title="Zebra"),
            _record("tag", "other animals in a long sentence about many things", tags=("zebra",)),
        ],
        [],
    )
    hits = index.search(analyze_query("zebra"), match_mode="any")
    ranked = [hit.row.record_id for hit in hits]
    assert sorted(ranked) == ["body-once", "body-thrice", "tag", "title"]
    assert ranked[0] == "title"
    assert ranked.index("body-thrice") < ranked.index("body-once")
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert all(hit.score > 0 for hit in hits)


def test_equal_scores_rank_by_record_id_then_offset() -> None:
    index = VaultIndex("vault")
    twins = [_record(record_id, "identical words here") for record_id in ("b", "c", "a")]
    index.apply(twins, [])
    hits = index.search(analyze_query("identical"), match_mode="any")
    assert [hit.row.record_id for hit in hits] == ["a", "b", "c"]
    assert len({hit.score for hit in hits}) == 1


def test_source_path_and_tags_are_searchable() -> None:
    index = VaultIndex("vault")
    index.apply([_record("r", "body", source="notes/数据库迁移.md", tags=("postgres",))], [])
    assert _found(index, "迁移") == ["r"]
    assert _found(index, "postgres") == ["r"]
    assert _found(index, "notes") == ["r"]


def test_empty_body_gets_a_title_only_chunk() -> None:
    index = VaultIndex("vault")
    index.apply([_record("empty", "  \n ", title="Grocery list")], [])
    [hit] = index.search(analyze_query("grocery"))
    chunk = hit.row.chunk
    assert (chunk.text, chunk.start, chunk.end, chunk.byte_start, chunk.byte_end) == ("", 0, 0, 0, 0)
    assert index.stats().chunks == 1


def test_hits_carry_chunk_spans() -> None:
    body = "前言。\n\n" + "資料庫遷移與回滾。" * 200
    index = VaultIndex("vault")
    index.apply([_record("r", body, title="Migrations", source="m.md")], [])
    hits = index.search(analyze_query("数据库迁移"), limit=100)
    assert len(hits) == index.stats().chunks
    for hit in hits:
        chunk = hit.row.chunk
        assert body.encode()[chunk.byte_start : chunk.byte_end].decode() == chunk.text
        assert (hit.row.title, hit.row.source, hit.row.revision, hit.row.kind) == ("Migrations", "m.md", 1, "card")
        assert {"数据库", "迁移", "migrations"} <= index.analysis(hit.row.rowid)[0]
        assert index.row(hit.row.rowid) == hit.row


def test_updates_are_incremental() -> None:
    index = _index({"a": "alpha original text", "b": "beta text"})
    b_rows = [row for row in index.rows() if row.record_id == "b"]
    index.apply([_record("a", "alpha edited words", revision=2)], [])
    assert index.have() == {"a": 2, "b": 1}
    assert _found(index, "original") == []
    assert _found(index, "edited") == ["a"]
    assert [row for row in index.rows() if row.record_id == "b"] == b_rows  # untouched
    index.apply([_record("c", "gamma text")], ["b", "never-there"])
    assert index.have() == {"a": 2, "c": 1}
    assert _found(index, "beta") == []
    assert sorted(_found(index, "text")) == ["c"]
    assert index.stats().records == 2


def test_delete_and_upsert_in_one_call_upsert_wins() -> None:
    index = _index({"a": "alpha"})
    index.apply([_record("a", "omega", revision=3)], ["a"])
    assert index.have() == {"a": 3}
    assert _found(index, "omega") == ["a"]


def test_stats_count_text_and_metadata_bytes() -> None:
    index = VaultIndex("vault")
    index.apply([_record("r", "数据", title="ab", source="c.md", tags=("d", "é"))], [])
    assert index.stats().text_bytes == 6 + 2 + 4 + 1 + 2
    index.apply([], ["r"])
    assert index.stats().text_bytes == 0


def _snapshot(index: VaultIndex) -> tuple:
    return index.have(), index.stats(), list(index.rows()), _found(index, "kept")


def test_chunk_limit_refuses_and_leaves_the_index_as_it_was() -> None:
    index = _index({"kept": "kept words"}, max_chunks=5)
    before = _snapshot(index)
    long_body = ("A sentence of several words. " * 40 + "\n\n") * 3  # more than four chunks
    with pytest.raises(MemoriesError) as error:
        index.apply([_record("big", long_body), _record("kept", "replaced")], [])
    assert error.value.code == "vault_too_large"
    assert error.value.details["limit"] == "chunks"
    assert error.value.details["max"] == 5
    assert error.value.details["value"] > 5
    assert "chunks" in error.value.message
    assert _snapshot(index) == before


def test_text_limit_refuses_and_leaves_the_index_as_it_was() -> None:
    index = _index({"kept": "kept words"}, max_text_bytes=100)
    before = _snapshot(index)
    with pytest.raises(MemoriesError) as error:
        index.apply([_record("big", "数" * 40)], [])
    assert error.value.code == "vault_too_large"
    assert error.value.details == {
        "vault": "vault",
        "limit": "text_bytes",
        "max": 100,
        "value": 10 + 120,
        "chunks": 2,
        "text_bytes": 10 + 120,
    }
    assert "bytes" in error.value.message
    assert _snapshot(index) == before
    index.apply([_record("big", "数" * 30)], ["kept"])  # counted after the deletion: 90 bytes fit
    assert index.stats().text_bytes == 90


def test_default_limits_are_rags_and_max_chunks_10000_restores_r21() -> None:
    """Issue 28: the limits are ``[rag]`` settings (default 100,000 chunks, the byte limits by R-21's ratios);
    ``max_chunks = 10000`` alone gives R-21's 10,000 chunks, 16 MiB and 32 MiB exactly."""
    assert IndexLimits() == IndexLimits(chunks=100_000, text_bytes=160 * 1024 * 1024, vector_bytes=320 * 1024 * 1024)
    assert RagConfig().index_limits() == IndexLimits()
    r21 = RagConfig(max_chunks=10_000).index_limits()
    assert r21 == IndexLimits.r21() == IndexLimits(chunks=10_000, text_bytes=16 * 1024**2, vector_bytes=32 * 1024**2)
    index = VaultIndex("vault", max_chunks=r21.chunks, max_text_bytes=r21.text_bytes)
    with pytest.raises(MemoriesError) as error:
        index.apply([_record(f"r{number}", "w") for number in range(10_001)], [])
    assert error.value.details == {
        "vault": "vault",
        "limit": "chunks",
        "max": 10_000,
        "value": 10_001,
        "chunks": 10_001,
        "text_bytes": 10_001,
    }
    assert index.stats().chunks == 0
    default = VaultIndex("vault")
    assert (default._max_chunks, default._max_text_bytes) == (100_000, 160 * 1024 * 1024)


def test_result_limit() -> None:
    index = _index(ESCAPING)
    assert len(index.search(analyze_query("order"), limit=1000)) == 1
    with pytest.raises(MemoriesError) as error:
        index.search(analyze_query("order"), limit=0)
    assert error.value.code == "invalid_argument"


def test_filter_rowids_for_strict_modes() -> None:
    index = _index({"in-order": "the stack and the heap", "reversed": "the heap and the stack", "x": "stack only"})
    rowid = {row.record_id: row.rowid for row in index.rows()}
    query = analyze_query("stack and the heap")
    assert index.filter_rowids(query, match_mode="all") == {rowid["in-order"], rowid["reversed"]}
    assert index.filter_rowids(query, match_mode="phrase") == {rowid["in-order"]}
    assert index.filter_rowids(analyze_query("?"), match_mode="all") == set()


def _ranking(index: VaultIndex, query: str, match_mode: MatchMode = "any") -> list[tuple[str, int, float]]:
    hits = index.search(analyze_query(query), match_mode=match_mode, limit=100)
    return [(hit.row.record_id, hit.row.chunk.byte_start, round(hit.score, 9)) for hit in hits]


def test_an_edited_record_ranks_as_if_indexed_from_scratch() -> None:
    paragraphs = [
        f"Paragraph {number} talks about ownership, borrowing and 所有權規則 number {number}." for number in range(60)
    ]
    before = "\n\n".join(paragraphs)
    after = "\n\n".join([*paragraphs[:30], "An inserted paragraph about lifetimes.", *paragraphs[30:]])
    other = _record("other", "ownership elsewhere, with lifetimes", title="Other")
    incremental = VaultIndex("vault")
    incremental.apply([_record("r", before, title="Rust"), other], [])
    incremental.apply([_record("r", after, title="Rust", revision=2)], [])
    incremental.apply([_record("other", "ownership elsewhere, with lifetimes", title="Renamed", revision=2)], [])
    fresh = VaultIndex("vault")
    fresh.apply(
        [
            _record("r", after, title="Rust", revision=2),
            _record("other", "ownership elsewhere, with lifetimes", title="Renamed", revision=2),
        ],
        [],
    )
    for query in ("ownership", "lifetimes", "所有权", "paragraph 45", "renamed", "other"):
        for mode in _MODES:
            assert _ranking(incremental, query, mode) == _ranking(fresh, query, mode)
    analyses = {incremental.analysis(row.rowid) for row in incremental.rows()}
    assert analyses == {fresh.analysis(row.rowid) for row in fresh.rows()}


def test_an_edit_keeps_the_rows_of_unchanged_chunks() -> None:
    paragraphs = [f"Paragraph {number} about ownership and borrowing, number {number}." * 6 for number in range(20)]
    index = VaultIndex("vault")
    index.apply([_record("r", "\n\n".join(paragraphs), kind="card")], [])
    before = {row.chunk.chunk_hash: row.rowid for row in index.rows()}
    index.apply([_record("r", "\n\n".join([*paragraphs, "A new last paragraph."]), kind="memory", revision=2)], [])
    after = {row.chunk.chunk_hash: row.rowid for row in index.rows()}
    assert len(before) > 5
    assert len(set(before.items()) & set(after.items())) >= len(before) - 2  # only the tail chunks changed
    assert {row.revision for row in index.rows()} == {2}
    assert _found(index, "ownership", cards_only=True) == []  # the kind moved with the kept rows
    assert _found(index, "new last paragraph", "phrase") == ["r"]


_WORDS = [f"w{number}" for number in range(300)]
_WEIGHTS = [1 / (rank + 1) for rank in range(len(_WORDS))]  # Zipf: a few very common words, many rare ones


def _synthetic_lexical_index() -> LexicalIndex:
    """600 chunks of Zipf-distributed words, so queries mix words in most chunks with words in a few."""
    generator = random.Random(7)
    index = LexicalIndex()
    entries = []
    for rowid in range(1, 601):
        body = generator.choices(_WORDS, _WEIGHTS, k=generator.randint(3, 80))
        entries.append(
            LexicalEntry(
                rowid=rowid,
                record_id=f"r{rowid % 97:02d}",
                kind=generator.choice(["memory", "card"]),
                byte_start=rowid * 10,
                title_terms=generator.choices(_WORDS, _WEIGHTS, k=generator.randint(0, 3)),
                body_terms=body,
                meta_terms=generator.choices(_WORDS, k=generator.randint(0, 2)),
                phrase_key=" ".join(body),
                title_key="",
            )
        )
    index.replace([], entries)
    index.replace(range(1, 601, 7), [])  # deletions must keep the counts the pruning relies on right
    return index


_SYNTHETIC = _synthetic_lexical_index()


@settings(deadline=None, max_examples=300)
@given(
    words=st.lists(st.sampled_from(_WORDS[:40]) | st.sampled_from(_WORDS), min_size=1, max_size=12, unique=True),
    limit=st.sampled_from([1, 2, 3, 10, 40, 100]),
    match_mode=st.sampled_from(["any", "phrase"]),
    cards_only=st.booleans(),
)
def test_pruned_ranking_equals_the_full_ranking(
    words: list[str], limit: int, match_mode: MatchMode, cards_only: bool
) -> None:
    query = AnalyzedQuery(terms=tuple(words), phrase=words[0])
    full = _SYNTHETIC.search(query, match_mode=match_mode, limit=None, cards_only=cards_only)
    assert _SYNTHETIC.search(query, match_mode=match_mode, limit=limit, cards_only=cards_only) == full[:limit]


_QUERY_TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(
        st.sampled_from(['"', "'", "(", ")", "*", ":", "^", "{", "}", "+", "-", "OR", "AND", "NOT", "NEAR", "NEAR(",
                         " ", "foo", "bar", "BENCH-100821", "C++", "資料庫", "栈", "\x00", "\\", "%", "_", "\u3000"]),
        max_size=80,
    ).map("".join),
)  # fmt: skip


@settings(deadline=None, max_examples=300)
@given(query=_QUERY_TEXT, mode=st.sampled_from(_MODES), cards_only=st.booleans())
def test_arbitrary_queries_never_raise_but_limit_errors(query: str, mode: MatchMode, cards_only: bool) -> None:
    index = _INDEX_FOR_PROPERTIES
    try:
        analyzed = analyze_query(query)
    except MemoriesError as error:
        assert error.code in {"query_too_long", "too_many_terms"}
        return
    hits: list[Hit] = index.search(analyzed, match_mode=mode, limit=100, cards_only=cards_only)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    if mode != "any":
        assert {hit.row.rowid for hit in hits} <= index.filter_rowids(analyzed, match_mode=mode, cards_only=cards_only)


_INDEX_FOR_PROPERTIES = _index({**ESCAPING, "zh": "資料庫與栈", "near": "NEAR OR AND NOT"})


def test_corpus_queries_rank_the_expected_note_in_the_top_3(corpus_cache: VaultCache) -> None:
    records = load_notes()
    assert len(records) == 311
    index = corpus_cache.index  # the same records, applied once for the run
    queries = load_queries()
    assert len(queries) == 15
    ranks = {}
    for query_id, query, expected, _ in queries:
        hits = index.search(analyze_query(query), match_mode="any", limit=100)
        ranked_records = list(dict.fromkeys(hit.row.record_id for hit in hits))
        ranks[query_id] = ranked_records.index(expected) + 1 if expected in ranked_records else None
    assert {query_id: rank for query_id, rank in ranks.items() if rank is None or rank > 3} == {}


def test_a_single_han_character_no_chunk_holds_as_a_word_finds_the_words_that_contain_it() -> None:
    index = _index({"dev": "软件开发的流程", "release": "发布新版本", "cat": "我的猫咪", "stack": "栈与堆"})
    assert set(_found(index, "发")) == {"dev", "release"}
    assert _found(index, "发", "phrase") and set(_found(index, "发", "all")) == {"dev", "release"}
    assert _found(index, "猫") == ["cat"]
    assert _found(index, "栈") == ["stack"]  # a word of its own here: no widening
    assert _found(index, "栈 发") == ["stack"]  # a query term is held: only what it matches
    assert _found(index, "鹿") == []  # no word holds it


@pytest.mark.parametrize(
    "quoted", ['"stack and the heap"', "“stack and the heap”", "'stack and the heap'", "‘stack and the heap’"]
)
def test_phrase_in_quotes_is_the_phrase_inside_them(quoted: str) -> None:
    """Issue 21: a phrase typed in straight or curly quotes found nothing (the quotes were part of the phrase)."""
    index = _index({"in-order": "the stack and the heap differ", "other": "the heap and the stack"})
    assert _found(index, quoted, "phrase") == ["in-order"]
    chinese = _index({"zh": "關於「所有權」與借用", "other": "權屬所有"})
    assert _found(chinese, "「所有權」", "phrase") == _found(chinese, "所有權", "phrase") == ["zh"]
    quoted_inside = _index({"quote": 'he said foo"bar loudly'})
    assert _found(quoted_inside, 'foo"bar', "phrase") == ["quote"]  # a quote inside the phrase stays
