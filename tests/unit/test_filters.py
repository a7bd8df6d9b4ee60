"""Search filters act before the top-k (issue 20 items 6 and 7): in the index worker's pipeline, for each filter and
combinations, notes that rank below the top-k of the unfiltered search are what the filtered search returns, in
bm25, vector and hybrid (the peer that filtered after its vector search returned nothing: mcp-memory-service#1012);
the daemon's reading of filter values; hostile values stay data."""

from __future__ import annotations

import datetime

import numpy as np
import pytest

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.core.filters import listed, record_date, search_filter
from memories.errors import MemoriesError
from memories.rag.filters import RecordFacts, admits, source_matches
from memories.rag.pipeline import VaultCache
from memories.vault.views import ListedRecord

SPACE = w.VectorSpace(key="test-space", recipe=w.InputRecipe(prefix="title: {title} | text: "))
WIDTH = 8


def _day(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


def _cache() -> VaultCache:
    """40 decoys that outrank 3 targets for ``lantern`` in BM25 (they say it four times) and by cosine (their
    vectors are the query's), and the targets: cards of 2025 tagged garden and Rust, under daily/, status done."""
    records = [
        w.IndexRecord(
            id=f"d{n:02}",
            revision=1,
            kind="memory",
            title=f"Decoy {n}",
            body=f"lantern lantern lantern lantern decoy{n}",
            source=f"archive/x{n:02}.md",
            tags=["other"],
            date=_day("2020-06-01"),
            meta={"source": f"archive/x{n:02}.md", "tags": "other", "status": "draft"},
        )
        for n in range(40)
    ] + [
        w.IndexRecord(
            id=f"t{n}",
            revision=1,
            kind="card",
            title=f"Target {n}",
            body=f"a lantern once, among many other words about the garden, the shed and the path {n}",
            source=f"daily/2025/t{n}.md",
            tags=["garden", "Rust", "projects/lanterns"],
            date=_day("2025-03-01"),
            meta={"source": f"daily/2025/t{n}.md", "tags": "garden, Rust, projects/lanterns", "status": "done"},
        )
        for n in range(3)
    ]
    cache = VaultCache("v")
    cache.apply(records, [])
    cache.stamp(1)
    plan = cache.vectors.missing(SPACE, 1000)
    near = np.zeros((1, WIDTH), dtype=np.float32)
    near[0, 0] = 1.0
    far = np.zeros((1, WIDTH), dtype=np.float32)
    far[0, 0], far[0, 1] = 0.2, 0.98
    by_key = {key: row for row, key in cache.vectors.input_keys(SPACE)}
    vectors = np.concatenate([near if by_key[key].record_id.startswith("d") else far for key in plan.keys])
    cache.vectors.store_vectors(
        w.IndexStoreVectors(vault="v", space_key=SPACE.key, keys=plan.keys, vectors=vectors.tobytes(), dimension=WIDTH)
    )
    return cache


FILTERS = {
    "since": w.SearchFilter(since=_day("2025-01-01")),
    "since and until": w.SearchFilter(since=_day("2025-02-01"), until=_day("2025-03-31")),
    "tag": w.SearchFilter(tags=["garden"]),
    "every tag, in any case and with #": w.SearchFilter(tags=["#rust", "GARDEN"]),
    "the parent of a nested tag": w.SearchFilter(tags=["Projects"]),
    "kind": w.SearchFilter(kind="card"),
    "source folder": w.SearchFilter(source="daily/**"),
    "source name at any depth": w.SearchFilter(source="t*.md"),
    "meta": w.SearchFilter(meta={"status": "done"}),
    "all at once": w.SearchFilter(
        since=_day("2025-01-01"), tags=["garden"], kind="card", source="daily/*/t?.md", meta={"status": "done"}
    ),
}


def _query(mode: str, limit: int, search: w.SearchFilter | None) -> w.IndexQuery:
    vector = np.zeros(WIDTH, dtype=np.float32)
    vector[0] = 1.0
    return w.IndexQuery(
        vault="v",
        epoch=1,
        query="lantern",
        mode=mode,  # type: ignore[arg-type]
        match_mode="any",
        limit=limit,
        cards_only=False,
        no_rerank=False,
        space=SPACE if mode != "bm25" else None,
        query_vector=vector.tobytes() if mode != "bm25" else None,
        filter=search,
    )


@pytest.mark.parametrize("mode", ["bm25", "vector", "hybrid"])
@pytest.mark.parametrize("name", FILTERS)
def test_a_filter_keeps_its_notes_though_they_rank_below_the_unfiltered_top_k(mode: str, name: str) -> None:
    cache = _cache()
    unfiltered = cache.search(_query(mode, 10, None))
    assert all(hit.asset_id.startswith("d") for hit in unfiltered)  # the targets rank below the top 10
    filtered = cache.search(_query(mode, 2, FILTERS[name]))
    assert [hit.asset_id for hit in filtered] == ["t0", "t1"] or len(filtered) == 2
    assert {hit.asset_id for hit in filtered} <= {"t0", "t1", "t2"}
    every = cache.search(_query(mode, 10, FILTERS[name]))
    assert sorted(hit.asset_id for hit in every) == ["t0", "t1", "t2"]


def test_a_filter_changes_no_score_and_one_that_admits_nothing_finds_nothing() -> None:
    cache = _cache()
    scores = {hit.asset_id: hit.score for hit in cache.search(_query("bm25", 100, None))}
    for hit in cache.search(_query("bm25", 100, w.SearchFilter(kind="card"))):
        assert hit.score == scores[hit.asset_id]
    for mode in ("bm25", "vector", "hybrid"):
        assert cache.search(_query(mode, 10, w.SearchFilter(tags=["nowhere"]))) == []


HOSTILE = [
    '" OR 1=1 --',
    "NEAR(lantern decoy0) OR *",
    "lantern*",
    "'; DROP TABLE chunks; --",
    "[",
    "**/" * 200 + "t0.md",
    "*a" * 500 + "b",  # the pattern that backtracks for ever in a naive glob
    "\\",
    "t0.md\x00",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_filter_values_are_data(value: str) -> None:
    cache = _cache()
    for search in (
        w.SearchFilter(tags=[value]),
        w.SearchFilter(meta={"status": value}),
        w.SearchFilter(source=value),
    ):
        for mode in ("bm25", "vector", "hybrid"):
            hits = cache.search(_query(mode, 10, search))
            assert {hit.asset_id for hit in hits} <= {"t0"}  # at most the glob that names t0.md finds it
    assert len(cache.search(_query("bm25", 10, None))) == 10  # the index is unharmed


def test_the_daemon_reads_each_filter_and_names_a_malformed_one() -> None:
    now = _day("2025-03-10T12:00:00")
    read = search_filter(p.RagSearch(vault="v", query="q", since="7d", until="2025-03-10", tags=["#Rust"]), now)
    assert read is not None
    assert read.since == now - 7 * 86400 and read.until is not None
    assert read.until >= _day("2025-03-10T23:59:59")  # a day given to until is the whole day
    assert read.tags == ["rust"]
    assert search_filter(p.RagSearch(vault="v", query="q", cards_only=True), now) == w.SearchFilter(kind="card")
    assert search_filter(p.RagSearch(vault="v", query="q"), now) is None
    for bad, named in (
        ({"since": "last tuesday"}, "since"),
        ({"until": "2025-13-01"}, "until"),
        ({"since": "2025-03-03", "until": "2025-03-01"}, "since"),
        ({"tags": ["  "]}, "tag"),
        ({"source": "../secrets/*"}, "source"),
        ({"source": "/etc/*"}, "source"),
        ({"source": "a\x1b[31m"}, "source"),
        ({"meta": {"bad key!": "x"}}, "meta"),
        ({"kind": "memory", "cards_only": True}, "--cards-only"),
    ):
        with pytest.raises(MemoriesError) as error:
            search_filter(p.RagSearch(vault="v", query="q", **bad), now)  # type: ignore[arg-type]
        assert error.value.code == "invalid_argument" and named in error.value.message, bad


def test_a_notes_date_is_its_metadata_date_else_its_first_revision() -> None:
    created = _day("2024-01-01")
    assert record_date({"date": "2025-03-01"}, created) == _day("2025-03-01")
    assert record_date({"date": "2025-03-01T09:30:00+08:00"}, created) == _day("2025-03-01T09:30:00+08:00")
    assert record_date({"date": "sometime"}, created) == created
    assert record_date({}, created) == created


def test_a_nested_tag_counts_for_its_parents_only() -> None:
    facts = RecordFacts("card", None, ["#Projects/Lanterns/v2"], None, {})
    for tags, admitted in [
        (["projects"], True),
        (["projects/lanterns"], True),
        (["PROJECTS/LANTERNS/V2"], True),
        (["proj"], False),
        (["lanterns"], False),
        (["projects/lanterns/v2/draft"], False),
    ]:
        assert admits(w.SearchFilter(tags=tags), facts) is admitted, tags


def test_a_listing_filters_its_rows_and_keeps_a_record_whose_header_is_damaged() -> None:
    rows = [
        ListedRecord("a", 1, "card", "general", "Dated", created=_day("2020-01-01"), meta={"date": "2025-03-01"}),
        ListedRecord("b", 1, "memory", "general", "Old", created=_day("2020-01-01"), meta={}),
        ListedRecord("c", 1, None, None, None, damaged=True),  # no filter can decide about it: the listing shows it
    ]
    assert [r.id for r in listed(rows, w.SearchFilter(since=_day("2025-01-01")))] == ["a", "c"]
    assert [r.id for r in listed(rows, w.SearchFilter(kind="memory"))] == ["b", "c"]
    assert listed(rows, None) == rows


def test_source_globs() -> None:
    assert source_matches("daily/**", "daily/a.md") and source_matches("**", "a/b/c.md")
    assert source_matches("**/c.md", "c.md") and not source_matches("daily/*", "daily/2025/a.md")
    assert not source_matches("a.md", "b/a.mdx") and source_matches("[ab].md", "x/b.md")
