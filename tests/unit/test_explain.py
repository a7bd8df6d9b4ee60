"""``rag explain`` in process: the explanation comes from the path that ranks, so its order is the searched order
(issue 24, acceptance 3; issue 30, acceptance 6) and its ``weak_matches`` the search's, on random small vaults
with random unit vectors, in every mode."""

from __future__ import annotations

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memories import worker_protocol as w
from memories.rag.pipeline import VaultCache

WORDS = ["git", "rebase", "stack", "heap", "owner", "value", "所有权", "栈", "堆", "迁移", "遷移", "数据库", "回滚"]
SPACE = w.VectorSpace(key="test-space", recipe=w.InputRecipe(prefix="title: {title} | text: "))
WIDTH = 8

notes = st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), min_size=1, max_size=12)
queries = st.lists(st.sampled_from([*WORDS, "?", "zebra"]), min_size=1, max_size=4)


def _unit(rng: np.random.Generator, rows: int) -> np.ndarray:
    vectors = rng.normal(size=(rows, WIDTH)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@settings(max_examples=60, deadline=None)
@given(
    bodies=notes,
    words=queries,
    mode=st.sampled_from(["bm25", "vector", "hybrid"]),
    match_mode=st.sampled_from(["any", "all", "phrase"]),
    no_rerank=st.booleans(),
    limit=st.integers(1, 12),
    embedded=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
    named=st.integers(0, 11),
    min_similarity=st.floats(-1.0, 1.0),
)
def test_the_explained_order_is_the_searched_order(
    bodies: list[list[str]],
    words: list[str],
    mode: str,
    match_mode: str,
    no_rerank: bool,
    limit: int,
    embedded: float,
    seed: int,
    named: int,
    min_similarity: float,
) -> None:
    rng = np.random.default_rng(seed)
    cache = VaultCache("v")
    records = [
        w.IndexRecord(
            id=f"r{number}", revision=1, kind="card", title=body[0], body=" ".join(body), source=f"{number}.md"
        )
        for number, body in enumerate(bodies)
    ]
    cache.apply(records, [])
    cache.stamp(1)
    plan = cache.vectors.missing(SPACE, 1000)
    kept = plan.keys[: round(embedded * len(plan.keys))]  # some chunks may have no vector yet
    if kept:
        cache.vectors.store_vectors(
            w.IndexStoreVectors(
                vault="v", space_key=SPACE.key, keys=kept, vectors=_unit(rng, len(kept)).tobytes(), dimension=WIDTH
            )
        )
    vector_modes = mode != "bm25"
    query = w.IndexQuery(
        vault="v",
        epoch=1,
        query=" ".join(words),
        mode=mode,  # type: ignore[arg-type]
        match_mode=match_mode,  # type: ignore[arg-type]
        limit=limit,
        cards_only=False,
        no_rerank=no_rerank,
        space=SPACE if vector_modes else None,
        query_vector=_unit(rng, 1)[0].tobytes() if vector_modes else None,
        min_similarity=min_similarity if vector_modes else None,
    )
    found = cache.query(query)
    searched = found.hits
    chunk = f"r{named % len(records)}"
    explained = cache.query(msgspec.structs.replace(query, explain=w.Explain(chunk=chunk)))
    assert explained.hits == searched
    assert explained.weak_matches == found.weak_matches  # issue 30: explain says what the search says
    assert not found.weak_matches or searched  # no results are never "weak"
    assert explained.explanation is not None
    results = explained.explanation.results
    assert [(c.asset_id, c.chunk_hash, c.byte_start) for c in results] == [
        (h.asset_id, h.chunk_hash, h.byte_start) for h in searched
    ]
    assert [c.rank for c in results] == list(range(1, len(searched) + 1))
    for result, hit in zip(results, searched, strict=True):
        final = result.rerank.score if result.rerank is not None else None
        if final is None:
            final = result.fusion.score if result.fusion is not None else None
        if final is None:
            final = result.bm25.score if mode == "bm25" else result.vector.cosine  # type: ignore[union-attr]
        assert final == hit.score
    assert explained.explanation.chunk is not None and explained.explanation.chunk.asset_id == chunk
    missing = len(plan.keys) - len(kept) if vector_modes else 0
    assert explained.explanation.missing_vectors == missing
