"""Fusion and the lightweight reranker: steps 5 of the retrieval pipeline (R-34, R-35).

**Reciprocal Rank Fusion** (Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms Condorcet and
individual Rank Learning Methods", SIGIR 2009) scores a document by its ranks alone, never by the lists' scores,
so BM25 scores and cosines of different scales fuse without calibration::

    rrf(d) = Σ over rankings r holding d of 1 / (k + rank_r(d)),   ranks 1-based, k = 60

A document first in both the BM25 and the vector ranking scores 1/61 + 1/61 = 2/61 ≈ 0.0328; first in one
list only, 1/61 ≈ 0.0164. Ties (equal fused scores, compared exactly as fractions) are broken by

1. the better best rank (a document ranked 1st somewhere beats one whose best is 2nd), then
2. the ranks list by list, in the order the rankings were given (missing = after every rank): with
   ``[bm25, vector]``, the lexical ranking decides what the ranks alone leave open.

Two different documents cannot hold the same rank in one list, so these keys always decide: the order is total
and deterministic. With a single non-empty ranking every document has one rank and ``1/(k+rank)`` falls with
it, so that ranking comes back unchanged.

**The lightweight reranker** (R-35; not a learned model) boosts candidates that contain the query's words::

    boost    = 1 + coverage_weight * coverage + phrase_weight * phrase
    coverage = |distinct query terms found in the chunk| / |distinct query terms|      (0 … 1)
    phrase   = 1 if the normalized query phrase occurs in the chunk's phrase key else 0
    score'   = score * boost   if score >= 0
               score / boost   if score <  0   (a cosine can be negative: the boost still moves it up)

The boost is multiplicative so it is scale-free: it works the same on RRF scores (about 0.01-0.03) and on
cosines (-1 … 1), and scaling every score by a constant never changes the order. With the default weights
(0.5 and 0.25) the largest boost is 1.75x: enough to lift a chunk that holds every query term over one found at
a similar rank without them, not enough to let lexical overlap alone beat a chunk both rankings put first
(1/61 * 1.75 < 2/61). Scores stay higher-is-better.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Generic, TypeVar

RRF_K = 60
"""R-34; the constant of Cormack, Clarke & Büttcher (2009)."""
COVERAGE_WEIGHT = 0.5
"""Reranker boost for a chunk holding every distinct query term (scaled by the share held)."""
PHRASE_WEIGHT = 0.25
"""Reranker boost for a chunk containing the whole normalized query as one run."""

Document = TypeVar("Document", bound=Hashable)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Document]], k: int = RRF_K) -> list[tuple[Document, float]]:
    """Fuse rankings (each best first) into ``[(document, score), ...]`` best first, by RRF.

    A document repeated within one ranking counts at its first (best) position. Ties follow the rule in the
    module docstring. ``k`` must be positive.

    >>> reciprocal_rank_fusion([["a", "b"], ["a", "c"]])
    [('a', 0.03278688524590164), ('b', 0.016129032258064516), ('c', 0.016129032258064516)]
    """
    if k <= 0:
        raise ValueError("k must be positive")
    ranks: dict[Document, list[int | None]] = {}
    for list_index, ranking in enumerate(rankings):
        for position, document in enumerate(ranking, start=1):
            document_ranks = ranks.setdefault(document, [None] * len(rankings))
            if document_ranks[list_index] is None:
                document_ranks[list_index] = position
    exact = {
        document: sum((Fraction(1, k + rank) for rank in document_ranks if rank is not None), Fraction(0))
        for document, document_ranks in ranks.items()
    }
    missing = float("inf")

    def order(document: Document) -> tuple[Fraction, int, tuple[float, ...]]:
        document_ranks = ranks[document]
        present = [rank for rank in document_ranks if rank is not None]
        by_list = tuple(missing if rank is None else float(rank) for rank in document_ranks)
        return (-exact[document], min(present), by_list)

    return [(document, float(exact[document])) for document in sorted(ranks, key=order)]


@dataclass(frozen=True)
class RerankCandidate(Generic[Document]):
    """One chunk to rerank.

    Attributes:
        document: the caller's id for the chunk.
        score: its fused (RRF) or cosine score, higher is better.
        terms: the chunk's analyzed terms (the same analyzer as the query's, ``memories.rag`` analysis).
        phrase_key: the chunk's normalized text used for phrase matching.
    """

    document: Document
    score: float
    terms: Collection[str]
    phrase_key: str


def rerank(
    query_terms: Collection[str],
    query_phrase: str,
    candidates: Sequence[RerankCandidate[Document]],
    *,
    coverage_weight: float = COVERAGE_WEIGHT,
    phrase_weight: float = PHRASE_WEIGHT,
) -> list[tuple[Document, float]]:
    """Boost ``candidates`` by lexical coverage and phrase match; ``[(document, score), ...]`` best first.

    ``query_terms`` are the query's analyzed terms (repeats count once); ``query_phrase`` its normalized
    phrase key (empty: no phrase bonus). Formula and reasons in the module docstring. Equal new scores keep
    the candidates' order (so a caller passing them ranked keeps its own tie rule).

    Raises:
        ValueError: a negative weight or a non-finite candidate score.

    >>> rerank(["git", "rebase"], "git rebase", [
    ...     RerankCandidate("a", 0.5, {"git"}, "git merge"),
    ...     RerankCandidate("b", 0.4, {"git", "rebase"}, "how to git rebase"),
    ... ])
    [('b', 0.7000000000000001), ('a', 0.625)]
    """
    if coverage_weight < 0 or phrase_weight < 0:
        raise ValueError("reranker weights must not be negative")
    if not all(math.isfinite(candidate.score) for candidate in candidates):
        raise ValueError("candidate scores must be finite")
    distinct = set(query_terms)
    scored = []
    for candidate in candidates:
        coverage = len(distinct.intersection(candidate.terms)) / len(distinct) if distinct else 0.0
        phrase = 1.0 if query_phrase and query_phrase in candidate.phrase_key else 0.0
        boost = 1.0 + coverage_weight * coverage + phrase_weight * phrase
        score = candidate.score * boost if candidate.score >= 0 else candidate.score / boost
        scored.append((candidate.document, score))
    return sorted(scored, key=lambda item: -item[1])
