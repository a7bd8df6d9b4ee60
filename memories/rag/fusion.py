"""Fusion and the lightweight reranker: step 5 of the retrieval pipeline (R-34, R-35).

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

**What enters the fusion** (:func:`fuse`). RRF gives a chunk in both lists about twice the score of one in a
single list, whatever the ranks, so a BM25 list that cannot see the answer drags its own candidates above the
vector arm's answer. Measured with the real EmbeddingGemma Q4 model (``ops/bench/quality.py``): plain RRF of
both top-100 lists scored nDCG@10 0.42 on FLORES and 0.05 on Tatoeba, where the vector arm alone scored 0.98 and
0.83. Two rules, each about what the BM25 list can know:

1. *Coverage.* A BM25 candidate enters only if it holds at least :data:`LEXICAL_FLOOR` (0.5) of the query's
   weight, each distinct query term weighted by its idf over the vault (:func:`coverage`; a term no chunk holds
   weighs most, a term in most chunks almost nothing). A chunk that shares a name or a stop word with a
   question but not what it asks about is not lexical evidence.
2. *Language.* BM25 matches words, and a query's words cannot appear in a chunk written in another language
   (:func:`comparable`: Han against Latin text; ``mixed`` text is comparable with both). When the vector arm
   puts such a chunk first, the model has matched across languages, where BM25 is blind: the lexical list is
   dropped and the vector order is kept. When the vector arm's first chunk is in the query's language, both
   lists fuse as above.

On FLORES (six directions between English, Simplified and Traditional Chinese) and Tatoeba (Chinese-English
short sentences) these rules bring hybrid to within 0.005 of the better arm or above it. The floor is a share
of the query, not a score of one set: FLORES gives the same figures from 0.3 to 0.5; on Tatoeba, lower floors
let in same-language sentences that hold most of a short query's words (``我不知道``) when the vector arm's
first chunk is a same-language one too, and 0.5 is the lowest floor that kept hybrid within 0.005 there.
The tables: ``docs/search-quality.md``.

**The lightweight reranker** (R-35; not a learned model, :func:`rerank`) boosts candidates that contain the
query's words::

    boost    = 1 + coverage_weight * coverage + phrase_weight * phrase
    coverage = the candidate's share of the query's idf weight, as above                  (0 … 1)
    phrase   = 1 if the normalized query phrase occurs in the chunk's phrase key else 0
    score'   = score * boost   if score >= 0
               score / boost   if score <  0   (a cosine can be negative: the boost still moves it up)

A chunk that is not comparable with the query (another language) cannot show the query's words either way, so
it gets the benefit of the doubt: the largest boost given to any comparable candidate. Without that, every
same-language chunk that shares a stop word would be lifted over the answer in the other language; the boost
may reorder chunks the query's words can appear in, never overturn the vector arm across languages. Weighting by
idf keeps shared stop words (``the``, ``的``) from counting as coverage.

The boost is multiplicative so it is scale-free: it works the same on RRF scores (about 0.01-0.03) and on
cosines (-1 … 1), and scaling every score by a constant never changes the order. With the default weights
(0.5 and 0.25) the largest boost is 1.75x: enough to lift a chunk that holds every query term over one found at
a similar rank without them, not enough to let lexical overlap alone beat a chunk both rankings put first
(1/61 * 1.75 < 2/61). Scores stay higher-is-better.

**The query's own script** (:func:`prefer_script`). Script folding (Traditional → Simplified, ``rag.analysis``)
makes the two scripts' versions of a note match a query alike, so among BM25 candidates within a few percent of
each other the query's script should win: a chunk in the other Chinese script (:func:`~memories.rag.analysis.
han_script`) scores :data:`SCRIPT_MARGIN` (3 %) less in the BM25 ranking, before fusion. Only near-ties change:
a Traditional query whose best match is a Simplified chunk (an independent translation, not a copy) still finds
it first. It does not apply to the vector arm, whose cosines already prefer the query's script, or to fused
scores, where 3 % is about two ranks.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from memories.rag.analysis import Language, Script

RRF_K = 60
"""R-34; the constant of Cormack, Clarke & Büttcher (2009)."""
LEXICAL_FLOOR = 0.5
"""Least :func:`coverage` of the query for a BM25 candidate to enter hybrid fusion."""
COVERAGE_WEIGHT = 0.5
"""Reranker boost for a chunk holding all of the query's idf weight (scaled by the share held)."""
PHRASE_WEIGHT = 0.25
"""Reranker boost for a chunk containing the whole normalized query as one run."""
SCRIPT_MARGIN = 0.03
"""How much a chunk in the query's own Chinese script may trail one in the other script and still win."""

Document = TypeVar("Document", bound=Hashable)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Document]], k: int = RRF_K) -> list[tuple[Document, float]]:
    """Fuse rankings (each best first) into ``[(document, score), ...]`` best first, by RRF.

    A document repeated within one ranking counts at its first (best) position. Ties follow the rule in the
    module docstring. ``k`` must be positive.

    >>> reciprocal_rank_fusion([["a", "b"], ["a", "c"]])
    [('a', 0.03278688524590164), ('b', 0.016129032258064516), ('c', 0.016129032258064516)]
    """
    ranks: dict[Document, list[int | None]] = {}
    for list_index, ranking in enumerate(rankings):
        for position, document in enumerate(ranking, start=1):
            document_ranks = ranks.setdefault(document, [None] * len(rankings))
            if document_ranks[list_index] is None:
                document_ranks[list_index] = position
    return _fused(ranks, k)


def _fused(ranks: dict[Document, list[int | None]], k: int) -> list[tuple[Document, float]]:
    """``Σ 1/(k + rank)`` over each document's ranks (``None``: not in that list), best first, ties as documented."""
    if k <= 0:
        raise ValueError("k must be positive")
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
class QueryFacts:
    """What fusion and reranking know about the query.

    Attributes:
        weights: each distinct query term → its idf over the vault (``LexicalIndex.term_weights``), > 0.
        phrase: the normalized query phrase (``AnalyzedQuery.phrase``); empty: no phrase bonus.
        language: :func:`memories.rag.analysis.text_language` of the query as typed.
        script: :func:`memories.rag.analysis.han_script` of the query as typed.
    """

    weights: Mapping[str, float]
    phrase: str = ""
    language: Language | None = None
    script: Script | None = None


@dataclass(frozen=True)
class Candidate(Generic[Document]):
    """One chunk as fusion and the reranker see it.

    Attributes:
        document: the caller's id for the chunk.
        terms: the chunk's analyzed terms (title, text and metadata; the query's analyzer).
        phrase_key: the chunk's normalized text, for phrase matching.
        language, script: of the chunk's text (:func:`~memories.rag.analysis.text_language`,
            :func:`~memories.rag.analysis.han_script`).
    """

    document: Document
    terms: Collection[str]
    phrase_key: str = ""
    language: Language | None = None
    script: Script | None = None


def coverage(weights: Mapping[str, float], terms: Collection[str]) -> float:
    """Share of the query's idf weight that ``terms`` hold: ``Σ idf(t) for t in terms / Σ idf(t)`` (0 … 1).

    >>> round(coverage({"git": 3.0, "the": 0.0001, "rebase": 1.0}, {"git", "the"}), 3)
    0.75
    """
    total = sum(weights.values())
    return sum(weight for term, weight in weights.items() if term in terms) / total if total > 0 else 0.0


def comparable(query: QueryFacts, candidate: Candidate[Document]) -> bool:
    """Whether the query's words could appear in the chunk: false only for a Han query and a Latin chunk or the
    reverse (``mixed`` or unknown languages are comparable with everything)."""
    return {query.language, candidate.language} != {"han", "latin"}


def fuse(
    query: QueryFacts,
    lexical: Sequence[Candidate[Document]],
    vector: Sequence[Candidate[Document]],
    *,
    floor: float = LEXICAL_FLOOR,
    k: int = RRF_K,
) -> list[tuple[Document, float]]:
    """Hybrid fusion of the BM25 ranking ``lexical`` and the cosine ranking ``vector`` (each best first).

    RRF (``k``) of the vector ranking and of the BM25 candidates that hold at least ``floor`` of the query's
    weight (:func:`coverage`), in BM25 order. When the vector ranking's first chunk is not :func:`comparable`
    with the query (the model puts a chunk of another language first), BM25, which cannot see into that
    language, has no say: the vector order is kept. Reasons in the module docstring; ``[(document, score), ...]``
    best first, ties as in :func:`reciprocal_rank_fusion` (lexical rank first).
    """
    if vector and not comparable(query, vector[0]):
        lexical = []
    admitted = [candidate.document for candidate in lexical if coverage(query.weights, candidate.terms) >= floor]
    return reciprocal_rank_fusion([admitted, [candidate.document for candidate in vector]], k)


def rerank(
    query: QueryFacts,
    scored: Sequence[tuple[Candidate[Document], float]],
    *,
    coverage_weight: float = COVERAGE_WEIGHT,
    phrase_weight: float = PHRASE_WEIGHT,
) -> list[tuple[Document, float]]:
    """Boost candidates by weighted lexical coverage and phrase match; ``[(document, score), ...]`` best first.

    ``scored`` holds fused or cosine scores, higher is better. A chunk that is not :func:`comparable` with the
    query (another language) cannot show the query's words, so it gets the benefit of the doubt: the largest
    boost any comparable candidate got. Equal new scores keep the given order. Formula and reasons in the module
    docstring.

    Raises:
        ValueError: a negative weight or a non-finite score.
    """
    if coverage_weight < 0 or phrase_weight < 0:
        raise ValueError("reranker weights must not be negative")
    if not all(math.isfinite(score) for _, score in scored):
        raise ValueError("candidate scores must be finite")
    boosts = [
        _boost(query, candidate, coverage_weight, phrase_weight) if comparable(query, candidate) else None
        for candidate, _ in scored
    ]
    doubt = max((boost for boost in boosts if boost is not None), default=1.0)
    result = [
        (candidate.document, _scaled(score, doubt if boost is None else boost))
        for (candidate, score), boost in zip(scored, boosts, strict=True)
    ]
    return sorted(result, key=lambda item: -item[1])


def _boost(query: QueryFacts, candidate: Candidate[Document], coverage_weight: float, phrase_weight: float) -> float:
    phrase = 1.0 if query.phrase and query.phrase in candidate.phrase_key else 0.0
    return 1.0 + coverage_weight * coverage(query.weights, candidate.terms) + phrase_weight * phrase


def prefer_script(
    query: QueryFacts, scored: Sequence[tuple[Candidate[Document], float]], *, margin: float = SCRIPT_MARGIN
) -> list[tuple[Document, float]]:
    """The query's own script wins near-ties: a chunk in the other Chinese script scores ``1 + margin`` times less.

    Only Simplified against Traditional: chunks without a script, and every chunk of a query without one, keep
    their scores. ``[(document, score), ...]`` best first; equal scores keep the given order.
    """
    result = []
    for candidate, score in scored:
        other = query.script is not None and candidate.script is not None and candidate.script != query.script
        result.append((candidate.document, _scaled(score, 1.0 / (1.0 + margin)) if other else score))
    return sorted(result, key=lambda item: -item[1])


def _scaled(score: float, factor: float) -> float:
    """``score`` moved by ``factor`` in the higher-is-better direction whatever its sign (a cosine can be < 0)."""
    return score * factor if score >= 0 else score / factor
