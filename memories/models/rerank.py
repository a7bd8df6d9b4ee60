"""The learned reranker (R-36) on the wire: ``{model, query, documents, top_n}`` → a checked new order.

Request and reply follow the common rerank API (Cohere, Jina, vLLM's ``/v1/rerank``, TEI's ``/v1/rerank`` adapter,
llama.cpp): ``{"results": [{"index": i, "relevance_score": s}, ...]}``. The vault does not trust the server's
ordering or its ``top_n``: it sorts by score itself (ties by the fused order), keeps ``top_n``, and the candidates
the server did not return, or that fell outside ``top_n``, follow in their fused order. Scores may be any finite
numbers (raw logits too). An unknown, duplicate or non-finite entry fails the whole request (it would reorder the
wrong documents), and so does another schema, such as TEI's native bare array with ``score``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from memories.errors import MemoriesError

EXPECTED_SHAPE = '{"results": [{"index": <int>, "relevance_score": <number>}, ...]}'


def rerank_request(model: str, query: str, documents: Sequence[str], top_n: int) -> dict[str, Any]:
    """The request body.

    >>> rerank_request("bge-reranker", "q", ["a", "b"], 1)
    {'model': 'bge-reranker', 'query': 'q', 'documents': ['a', 'b'], 'top_n': 1}
    """
    return {"model": model, "query": query, "documents": list(documents), "top_n": top_n}


def reranked_order(reply: Any, count: int, top_n: int) -> list[tuple[int, float | None]]:
    """Every candidate index ``0..count-1`` once, in the new order, with its score (``None``: not scored).

    >>> results = [{"index": 2, "relevance_score": 0.91}, {"index": 0, "relevance_score": 0.12}]
    >>> reranked_order({"results": results}, 3, 2)
    [(2, 0.91), (0, 0.12), (1, None)]

    Raises:
        MemoriesError: ``upstream_error`` naming the expected shape, for another schema, an index out of range or
            repeated, or a score that is not a finite number.
    """
    results = reply.get("results") if isinstance(reply, dict) else None
    if not isinstance(results, list):
        raise _bad(f"the reply is not in the rerank shape {EXPECTED_SHAPE}")
    scores: dict[int, float] = {}
    for entry in results:
        index = entry.get("index") if isinstance(entry, dict) else None
        score = entry.get("relevance_score") if isinstance(entry, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise _bad(f"a result has the index {index!r}, not one of 0..{count - 1} (expected {EXPECTED_SHAPE})")
        if index in scores:
            raise _bad(f"the index {index} is returned twice")
        if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
            raise _bad(f"the result for index {index} has no finite relevance_score (expected {EXPECTED_SHAPE})")
        scores[index] = float(score)
    ranked = sorted(scores, key=lambda index: (-scores[index], index))[:top_n]
    chosen = set(ranked)
    return [(index, scores[index]) for index in ranked] + [(i, None) for i in range(count) if i not in chosen]


def _bad(message: str) -> MemoriesError:
    return MemoriesError("upstream_error", f"rag.rerank: {message}", {"expected": EXPECTED_SHAPE})
