"""The vector stage over :class:`memories.rag.vector_view.VectorView` ranks exactly as the Python passes over every
chunk row did (issue 28 item 4): same chunks, same order, same cosines, with repeated inputs, chunks without a
vector, cards only, search filters, strict match modes and limits; and the view follows every change of the rows
and of the vectors."""

from __future__ import annotations

import random

import numpy as np
import pytest

from memories import worker_protocol as w
from memories.daemon.index.backends import LOCAL_RECIPE
from memories.rag.analysis import AnalyzedQuery, analyze_query
from memories.rag.pipeline import VaultCache
from memories.rag.vault_index import ChunkRow

SPACE = w.VectorSpace(key="space", recipe=LOCAL_RECIPE)
WORDS = "git branch merge rebase ssh tunnel port 分支 合併 線程 同步 資料庫 遷移 rust owner borrow".split()


def _records(rng: random.Random) -> list[w.IndexRecord]:
    records = []
    for number in range(40):
        paragraphs = ["\n".join(" ".join(rng.choices(WORDS, k=60)) for _ in range(3)) for _ in range(rng.randint(1, 4))]
        body = "\n\n".join(paragraphs)
        title = f"note {number}"
        if number % 7 == 3:  # the same title and body as the record before: the same model inputs, shared vectors
            body, title = records[-1].body, records[-1].title
        kind = "memory" if number % 5 == 0 else "card"
        records.append(w.IndexRecord(id=f"r{number:02}", revision=1, kind=kind, title=title, body=body))
    return records


def _unit(rng: np.random.Generator, count: int) -> np.ndarray:
    matrix = rng.standard_normal((count, 768)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _cache(seed: int, embedded: float) -> VaultCache:
    cache = VaultCache("v")
    cache.apply(_records(random.Random(seed)), [])
    cache.stamp(1)
    keys = list(dict.fromkeys(key for _, key in cache.vectors.input_keys(SPACE)))
    chosen = [key for number, key in enumerate(keys) if number < len(keys) * embedded]
    if chosen:
        cache.vectors.store.add(SPACE.key, chosen, _unit(np.random.default_rng(seed), len(chosen)))
    return cache


def _before(
    cache: VaultCache, query: AnalyzedQuery, request: w.IndexQuery, limit: int | None, admitted: set[int] | None
) -> list[tuple[int, float]]:
    """The vector stage as it was: Python passes over every chunk row (the reference)."""
    rows = [
        row
        for row in cache.index.rows()
        if (not request.cards_only or row.kind == "card") and (admitted is None or row.rowid in admitted)
    ]
    if request.match_mode != "any":
        allowed = cache.index.filter_rowids(
            query, match_mode=request.match_mode, cards_only=request.cards_only, admitted=admitted
        )
        rows = [row for row in rows if row.rowid in allowed]
    by_key: dict[str, list[ChunkRow]] = {}
    for row in rows:
        by_key.setdefault(cache.vectors.key(row, SPACE.recipe), []).append(row)
    assert request.query_vector is not None
    vector = np.frombuffer(request.query_vector, dtype=np.float32)
    return [
        (row.rowid, score)
        for key, score in cache.vectors.store.search(SPACE.key, vector, by_key, limit=limit)
        for row in by_key[key]
    ]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("embedded", [1.0, 0.6])
def test_the_view_ranks_as_the_passes_over_every_row_did(seed: int, embedded: float) -> None:
    cache = _cache(seed, embedded)
    rng = np.random.default_rng(seed + 10)
    rowids = [row.rowid for row in cache.index.rows()]
    pick = random.Random(seed)
    for text in ("git branch", "分支 合併", "ssh port rust"):
        query = analyze_query(text)
        for match_mode in ("any", "all", "phrase"):
            for cards_only in (False, True):
                for admitted in (None, set(pick.sample(rowids, len(rowids) // 3))):
                    for limit in (None, 1, 10, 100):
                        request = w.IndexQuery(
                            vault="v",
                            epoch=1,
                            query=text,
                            mode="vector",
                            match_mode=match_mode,  # type: ignore[arg-type]
                            limit=10,
                            cards_only=cards_only,
                            no_rerank=True,
                            space=SPACE,
                            query_vector=_unit(rng, 1)[0].tobytes(),
                        )
                        expected = _before(cache, query, request, limit, admitted)
                        assert cache._cosine(query, request, limit, admitted=admitted) == expected


def test_the_view_follows_the_rows_and_the_vectors() -> None:
    cache = _cache(4, 1.0)
    assert cache.vectors.missing(SPACE, 10).total_missing == 0
    edited = w.IndexRecord(id="r01", revision=2, kind="card", title="note 1", body="an edit: new text, a new input")
    cache.apply([edited], [])
    cache.stamp(2)
    plan = cache.vectors.missing(SPACE, 10)
    assert plan.total_missing == 1 and len(plan.keys) == 1
    cache.vectors.store.add(SPACE.key, plan.keys, _unit(np.random.default_rng(5), 1))
    assert cache.vectors.missing(SPACE, 10).total_missing == 0
    query = analyze_query("edit")
    vector = cache.vectors.store.rows(SPACE.key, plan.keys)[0]
    request = w.IndexQuery(
        vault="v",
        epoch=2,
        query="edit",
        mode="vector",
        match_mode="any",
        limit=1,
        cards_only=False,
        no_rerank=True,
        space=SPACE,
        query_vector=vector.tobytes(),
    )
    best = cache._cosine(query, request, 1)
    assert [cache.index.row(rowid).record_id for rowid, _ in best] == ["r01"]
    assert best[0][1] == pytest.approx(1.0, abs=1e-5)
    cache.vectors.store.clear()
    plan = cache.vectors.missing(SPACE, 10)
    assert plan.total_missing == len({key for _, key in cache.vectors.input_keys(SPACE)}) and plan.embedded == 0
    assert cache._cosine(query, request, 1) == []


def test_the_candidates_kept_are_bounded_and_results_do_not_depend_on_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache keeps at most CACHED_CANDIDATES fusion candidates (about 7.7 KB each: unbounded, they grew towards
    the whole vault); a candidate worked out again is the same, so every search answers as with all of them kept."""
    from memories.rag import pipeline

    unbounded, bounded = _cache(6, 1.0), _cache(6, 1.0)
    rng = np.random.default_rng(7)
    requests = []
    for text in ("git branch", "分支 合併", "ssh port", "rust owner borrow", "線程 同步"):
        for mode in ("bm25", "vector", "hybrid"):
            for match_mode in ("any", "all"):
                requests.append(
                    w.IndexQuery(
                        vault="v",
                        epoch=1,
                        query=text,
                        mode=mode,  # type: ignore[arg-type]
                        match_mode=match_mode,  # type: ignore[arg-type]
                        limit=20,
                        cards_only=False,
                        no_rerank=False,
                        space=None if mode == "bm25" else SPACE,
                        query_vector=None if mode == "bm25" else _unit(rng, 1)[0].tobytes(),
                    )
                )
    expected = [unbounded.search(request) for request in requests]
    monkeypatch.setattr(pipeline, "CACHED_CANDIDATES", 5)
    assert [bounded.search(request) for request in requests] == expected
    assert len(bounded._candidates) <= 5
