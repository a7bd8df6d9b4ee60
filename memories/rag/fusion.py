"""Fusion and the lightweight reranker: step 5 of the retrieval pipeline (R-34, R-35).

**Reciprocal Rank Fusion** (Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms Condorcet and
individual Rank Learning Methods", SIGIR 2009) scores a document by its ranks alone, never by the lists' scores,
so BM25 scores and cosines of different scales fuse without calibration::

    rrf(d) = Σ over rankings r holding d of 1 / (k + rank_r(d)),   ranks 1-based, k = 60

A document first in both the BM25 and the vector ranking scores 1/61 + 1/61 = 2/61 ≈ 0.0328; first in one
list only, 1/61 ≈ 0.0164. Ties (equal fused scores, compared exactly as fractions) are broken by

1. the better best rank (a document ranked 1st somewhere beats one whose best is 2nd), then
2. the ranks list by list, in the order the rankings were given (missing = after every rank): :func:`fuse`
   gives ``[vector, bm25]``, so the vector ranking decides what the ranks alone leave open (a chunk at vector
   rank 1 and one at BM25 rank 1 tie at 1/61: the vector arm's comes first).

Two different documents cannot hold the same rank in one list, so these keys always decide: the order is total
and deterministic. With a single non-empty ranking every document has one rank and ``1/(k+rank)`` falls with
it, so that ranking comes back unchanged.

**What enters the fusion** (:func:`fuse`). RRF gives a chunk in both lists about twice the score of one in a
single list, whatever the ranks, so a BM25 list that cannot see the answer drags its own candidates above the
vector arm's answer. Measured with the real EmbeddingGemma Q4 model (``ops/bench/quality.py``): plain RRF of
both top-100 lists scored nDCG@10 0.42 on FLORES and 0.05 on Tatoeba, where the vector arm alone scored 0.98 and
0.83. Two rules, each about what the BM25 list can know:

1. *Coverage.* A BM25 candidate's rank counts only if it holds at least :data:`LEXICAL_FLOOR` (0.95) of the
   query's weight, each distinct query term weighted by its idf over the vault (:func:`coverage`; a term no chunk
   holds weighs most, a term in most chunks almost nothing): nearly the whole query. A chunk that shares a name,
   a topic or a stop word with a question but not what it asks about is not lexical evidence, and BM25's order
   among such chunks is no evidence either. With no vector ranking at all (no chunk has a vector, or a strict
   match mode left none) every BM25 candidate counts: there is nothing for weak evidence to outvote. A chunk
   holds a Han term when it writes it, however Jieba cut the chunk (:func:`held`, as match mode ``all`` counts
   it): ``人民银行`` in ``中国人民银行发布通知``, ``发`` in ``开发``.
2. *Language: places BM25 cannot see.* BM25 matches words, and a query's words cannot appear in a chunk written
   in another language (:func:`comparable`: Han against Latin text; ``mixed`` text is comparable with both).
   Such a chunk keeps the place the vector ranking gave it, and the fused order of the comparable chunks
   fills the places around it (:func:`_keep_places`). BM25 can neither lift a chunk of another language nor,
   by lifting its own candidates over it, push it down: its absence from the BM25 list says nothing about it.
   So a question answered in the other language ranks as in ``vector`` mode, whatever BM25 found, and among
   the chunks the query's words can appear in, both rankings fuse as above.

Why places rather than scores: counting a missing BM25 rank as 0 (plain RRF) buries every chunk of another
language under same-language chunks that share a few words (the ownership chapter's English version under an
unrelated Traditional chapter that mentions 堆積, in the sample corpus); giving such a chunk its vector rank in
the BM25 list too (imputation) lifts it over same-language chunks the vector arm ranked far above it (a Chinese
README at vector rank 58 over an English one at 25). A place is the one thing the vector arm said about it.
On the heading check of the sample corpus (``ops/bench/headings.py``: 701 section headings as queries, each
note's translations also relevant) hybrid went from 0.863 to 0.866 nDCG@10 and the reranked ``vector`` mode from
0.818 to 0.838 with this rule and :func:`held`; on ``queries.md`` from 0.962 to 0.969 and from 0.967 to 0.959.
On the development sets, whose answers are in the other language or script, hybrid now equals ``vector``: FLORES
0.994 as before; Tatoeba 0.929 for both, the bare model's figure, where the reranker's old benefit of the doubt
(below) gave 0.943 and 0.941 by lifting Chinese answers over English sentences that share a word or two. The
tables: ``docs/search-quality.md``.

**Why 0.95, and why the reranker shares it (issue 24).** The floor used to be 0.5 ("half of what the query
asks"), fitted on the sample corpus. On same-language, sentence-level sets hybrid then fell below its own vector
arm: the other sentences of the answer's article hold the question's names and topic words, BM25 ranks them
first, confidently and wrongly, and their RRF votes and the reranker's boost for a partial match pulled the
answer down (real model, nDCG@10: ``wikiqa-sent-en`` vector 0.892, hybrid 0.798; ``cmrc-sent-zh`` 0.954 and
0.945). A BM25 rank is evidence only when the chunk holds what the question asks, so one rule now decides both
stages: below the floor a chunk neither votes in the fusion nor earns a coverage boost in the reranker (in
``vector`` mode too). Candidates measured in process on the real model's vectors of the four development sets
and the sample corpus (``docs/search-quality.md`` has the figures, the losers too): floors 0.5-1.0, a vote
weighted by coverage to a power (4-64), a vote weighted per query by the best coverage any chunk reaches, a
convex combination of min-max-normalized scores, each with the reranker's coverage to a power. The constant was
chosen by cross-validation (fit on three development sets, judge on the fourth, each way round, the criterion
the worst paired difference hybrid - better arm): the folds chose floors of 0.7-0.95, with held-out differences
of -0.0034 on WikiQA ([-0.0082, 0.0000]) and 0.0000 on the other three; fitted on all four the choice is 0.95
(1.0 ties it; 0.95 lets a chunk miss a word of under 5 % of the weight). Hybrid then equals ``vector`` on the
four sets and stays above it on the corpus checks (``queries.md`` +0.006, the heading check +0.039). What it
costs: the boost for a partial match had helped keyword queries and Chinese questions; reranked ``vector`` falls
on ``queries.md`` from 0.959 to 0.942 and on ``cmrc-sent-zh`` from 0.954 to 0.942 (one query), hybrid on
``queries.md`` from 0.969 to 0.948.

**The lightweight reranker** (R-35; not a learned model, :func:`rerank`) boosts candidates that contain the
query's words::

    boost    = 1 + coverage_weight * counted + phrase_weight * phrase
    counted  = coverage * script_factor   if coverage >= LEXICAL_FLOOR   else 0
    coverage = the candidate's share of the query's idf weight, as above; script_factor: a word held only
               through script folding counts 1 - SCRIPT_DISCOUNT of its weight (below)   (0 … 1)
    phrase   = 1 if the normalized query phrase occurs in the chunk's phrase key else 0
    score'   = score * boost   if score >= 0
               score / boost   if score <  0   (a cosine can be negative: the boost still moves it up)

The reranker follows the place rule too: a chunk that is not :func:`comparable` with the query cannot show the
query's words, so it keeps its place and the boosted comparable chunks are sorted around it. (It used to get
the largest boost any comparable candidate got, "the benefit of the doubt": that lifted every chunk of another
language over same-language chunks with partial coverage, which helped cross-language queries and hurt
same-language ones: on the heading check's notes without translations, ``vector`` 0.852 with it, 0.874 with
places.) Weighting by idf keeps shared stop words (``the``, ``的``) from counting as coverage.

The boost is multiplicative so it is scale-free: it works the same on RRF scores (about 0.01-0.03) and on
cosines (-1 … 1), and scaling every score by a constant never changes the order. With the default weights
(0.5 and 0.25) the largest boost is 1.75x: enough to lift a chunk that holds every query term over one found at
a similar rank without them, not enough to let lexical overlap alone beat a chunk both rankings put first
(1/61 * 1.75 < 2/61). Scores stay higher-is-better: a chunk kept in its place whose neighbour below now scores
more takes that neighbour's score.

**The query's own script** (:func:`prefer_script`). Script folding (Traditional → Simplified, ``rag.analysis``)
makes a Traditional chunk match a Simplified query's words, and the reverse: the same guide in both scripts, or
a note and its translation, both match. The user wrote in one script and wants the note in that script first,
so in the BM25 ranking a chunk's score is lowered by the share of what it matched that it matched only through
folding (:func:`folded_share`: query terms, weighted by idf, that the chunk holds but never writes as the query
does). Such a word counts two thirds of its weight (``1 - SCRIPT_DISCOUNT``), in the BM25 ranking and in
the reranker's coverage alike::

    bm25'     = bm25 * script_factor
    coverage' = coverage * script_factor          (the reranker's; the floor compares plain coverage)
    script_factor = 1 - SCRIPT_DISCOUNT * folded_share,   SCRIPT_DISCOUNT = 1/3

A chunk in the query's script (or in neither: English, code, characters both scripts share) loses nothing; a
chunk in the other script whose every matched word needed folding loses a third. The rule is about words, not
whole chunks: characters the two scripts share (故事, 回) count as written, so a chunk loses only for what it
could not have matched without folding. It is not a near-tie rule: in the sample corpus the Simplified query
``数据库迁移 回滚`` matches the Traditional Rails migrations guide (title ``Active Record 遷移``, 遷移 and 資料庫 on
every line) with a best chunk 46 % above the Simplified guide's, which keeps the English word Migration; a
margin of a few percent, the rule before this one, left the translation first. Where the constant comes from,
measured with this rule alone (BM25 does not use the model): the Simplified guide comes first from a discount
of 0.314; on the FLORES subsets whose answers are in the other script (``zhs2zht``, ``zht2zhs``: reached only
through folding, against sentences in the query's script that share a few words) BM25's nDCG@10 is unchanged
up to 1/3 and loses one query from 0.36 on. A third sits inside that window; it is fitted to these two
constraints, which the held-back sets may move, and ``docs/search-quality.md`` has the figures. The cosines
themselves are left as they are: the model already prefers the query's script.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Hashable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Generic, TypeVar

from memories.rag.analysis import is_han

if TYPE_CHECKING:
    from memories.rag.analysis import Language

RRF_K = 60
"""R-34; the constant of Cormack, Clarke & Büttcher (2009)."""
LEXICAL_FLOOR = 0.95
"""Least :func:`coverage` of the query for a BM25 rank to count in hybrid fusion and for the reranker's coverage
boost; chosen by cross-validation over the development sets (module docstring, ``docs/search-quality.md``)."""
COVERAGE_WEIGHT = 0.5
"""Reranker boost for a chunk holding all of the query's idf weight (scaled by the share held)."""
PHRASE_WEIGHT = 0.25
"""Reranker boost for a chunk containing the whole normalized query as one run."""
SCRIPT_DISCOUNT = 1 / 3
"""Most a BM25 score loses when everything the chunk matched, it matched only through script folding."""

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
        forms: each Han query term → how the query writes it before script folding
            (:func:`memories.rag.analysis.written_forms`); empty for a query without Han.
    """

    weights: Mapping[str, float]
    phrase: str = ""
    language: Language | None = None
    forms: Mapping[str, Collection[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Candidate(Generic[Document]):
    """One chunk as fusion and the reranker see it.

    Attributes:
        document: the caller's id for the chunk.
        terms: the chunk's analyzed terms (title, text and metadata; the query's analyzer).
        phrase_key: the chunk's normalized text, for phrase matching.
        language: of the chunk's text (:func:`~memories.rag.analysis.text_language`).
        written: the title, text and source the terms were cut from, as written (before any folding), to tell
            a word the chunk writes as the query does from one it only matches through script folding.
    """

    document: Document
    terms: Collection[str]
    phrase_key: str = ""
    language: Language | None = None
    written: Sequence[str] = ()


@dataclass
class Trace:
    """What the ranking did to one chunk, stage by stage: ``rag explain`` keeps it, a search drops it. The
    pipeline fills the arms' fields, :func:`fuse` and :func:`rerank` their own, on the one path that ranks.

    Attributes:
        lexical_rank, lexical_score: its place (1-based) and score in the BM25 ranking; ``None``: not in it.
        vector_rank, cosine: its place (1-based) and cosine in the vector ranking; ``None``: not in it.
        coverage: the share of the query's idf weight it holds (:func:`coverage` of :func:`held`), 0 … 1.
        vote: the weight its BM25 rank carries in the fusion (0: it does not count, below :data:`LEXICAL_FLOOR`).
        fused, fused_rank: its score and place (1-based) after fusion.
        rules: what fusion did to it, in words with the numbers (``rag explain`` prints them).
        placed: the place (1-based) it kept because it is in another language (:func:`comparable`).
        boost, phrase, script: the reranker's factor, whether it holds the query phrase, its :func:`script_factor`.
        counted: the coverage the reranker's boost counted (``coverage`` times ``script``; 0 under the floor).
        reranked: its score after the reranker.
    """

    lexical_rank: int | None = None
    lexical_score: float | None = None
    vector_rank: int | None = None
    cosine: float | None = None
    coverage: float | None = None
    vote: float | None = None
    fused: float | None = None
    fused_rank: int | None = None
    rules: list[str] = field(default_factory=list)
    placed: int | None = None
    boost: float | None = None
    phrase: bool = False
    script: float | None = None
    counted: float | None = None
    reranked: float | None = None


Traces = MutableMapping[Document, Trace]
"""Document → its :class:`Trace`; :func:`fuse` and :func:`rerank` add what they did when given one."""


def coverage(weights: Mapping[str, float], terms: Collection[str]) -> float:
    """Share of the query's idf weight that ``terms`` hold: ``Σ idf(t) for t in terms / Σ idf(t)`` (0 … 1).

    >>> round(coverage({"git": 3.0, "the": 0.0001, "rebase": 1.0}, {"git", "the"}), 3)
    0.75
    """
    total = sum(weights.values())
    return sum(weight for term, weight in weights.items() if term in terms) / total if total > 0 else 0.0


def held(query: QueryFacts, candidate: Candidate[Document]) -> set[str]:
    """The query terms the chunk holds: among its terms or, for a Han term, written in its text
    (``candidate.phrase_key``, script-folded like the terms), however Jieba cut the chunk.

    This is what match mode ``all`` counts (:mod:`memories.rag.lexical`): the chunk ``中国人民银行发布通知`` holds
    ``人民银行`` although Jieba cut it into ``中国人民银行`` and its dictionary sub-words, and ``开发`` holds ``发``.

    >>> query = QueryFacts({"人民银行": 3.0, "银行": 1.0, "rust": 1.0})
    >>> sorted(held(query, Candidate("c", {"银行"}, "中国人民银行发布")))
    ['人民银行', '银行']
    """
    return {
        term for term in query.weights if term in candidate.terms or (is_han(term) and term in candidate.phrase_key)
    }


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
    traces: Traces[Document] | None = None,
) -> list[tuple[Document, float]]:
    """Hybrid fusion of the BM25 ranking ``lexical`` and the cosine ranking ``vector`` (each best first).

    RRF (``k``) of the vector ranking and of the BM25 candidates that hold at least ``floor`` of the query's
    weight (:func:`coverage`; all of them when ``vector`` is empty), in BM25 order; then each vector candidate that
    is not :func:`comparable` with the query (another language) goes back to its place in the vector ranking
    (:func:`_keep_places`). Reasons in the module docstring; ``[(document, score), ...]`` best first, ties as in
    :func:`reciprocal_rank_fusion` (vector rank first). With one ranking empty the other's order comes back
    unchanged. With ``traces``, each chunk's coverage, vote, fused score and rank, and kept place go there.
    """
    admitted = []
    for candidate in lexical:
        share = coverage(query.weights, held(query, candidate))
        votes = share >= floor or not vector  # with no vector ranking there is nothing for weak evidence to outvote
        if votes:
            admitted.append(candidate.document)
        if traces is not None:
            trace = traces.setdefault(candidate.document, Trace())
            trace.coverage, trace.vote = share, 1.0 if votes else 0.0
    fused = reciprocal_rank_fusion([[candidate.document for candidate in vector], admitted], k)
    places = {
        position: candidate.document for position, candidate in enumerate(vector) if not comparable(query, candidate)
    }
    result = _keep_places(places, fused)
    if traces is not None:
        voters = {document: rank for rank, document in enumerate(admitted, start=1)}
        nearest = {candidate.document: rank for rank, candidate in enumerate(vector, start=1)}
        for rank, (document, score) in enumerate(result, start=1):
            trace = traces.setdefault(document, Trace())
            trace.fused, trace.fused_rank = score, rank
            parts = []
            if document in voters:
                parts.append(f"1/({k}+{voters[document]}) for BM25 rank {voters[document]} among the chunks that count")
            if document in nearest:
                parts.append(f"1/({k}+{nearest[document]}) for vector rank {nearest[document]}")
            trace.rules.append(f"Reciprocal Rank Fusion: {' + '.join(parts)} = {score:.6f}")
            if trace.vote == 0.0 and trace.coverage is not None:
                trace.rules.append(
                    f"its BM25 rank does not count: it holds {trace.coverage:.0%} of the query's weight, under the "
                    f"floor of {floor:.0%}"
                )
        for position, document in places.items():
            traces[document].placed = position + 1
            traces[document].rules.append(
                f"kept vector place {position + 1}: in another language than the query, which BM25 cannot match"
            )
    return result


def rerank(
    query: QueryFacts,
    scored: Sequence[tuple[Candidate[Document], float]],
    *,
    coverage_weight: float = COVERAGE_WEIGHT,
    phrase_weight: float = PHRASE_WEIGHT,
    floor: float = LEXICAL_FLOOR,
    traces: Traces[Document] | None = None,
) -> list[tuple[Document, float]]:
    """Boost candidates by weighted lexical coverage and phrase match; ``[(document, score), ...]`` best first.

    ``scored`` holds fused or cosine scores, higher is better, best first. Coverage counts only from ``floor``
    on (:data:`LEXICAL_FLOOR`, as in :func:`fuse`). A chunk that is not :func:`comparable`
    with the query (another language) cannot show the query's words: it keeps its place in ``scored`` and the
    boosted others are sorted around it (:func:`_keep_places`). Equal new scores keep the given order. Formula
    and reasons in the module docstring. With ``traces``, each chunk's boost and its parts, its new score and its
    kept place go there.

    Raises:
        ValueError: a negative weight, a non-finite score, or scores not best first.
    """
    if coverage_weight < 0 or phrase_weight < 0:
        raise ValueError("reranker weights must not be negative")
    if not all(math.isfinite(score) for _, score in scored):
        raise ValueError("candidate scores must be finite")
    if any(later > earlier for (_, earlier), (_, later) in itertools.pairwise(scored)):
        raise ValueError("candidates must come best first")
    places: dict[int, Document] = {}
    boosted: list[tuple[Document, float]] = []
    for position, (candidate, score) in enumerate(scored):
        if comparable(query, candidate):
            phrase = bool(query.phrase) and query.phrase in candidate.phrase_key
            script = script_factor(query, candidate)
            share = coverage(query.weights, held(query, candidate))
            counted = share * script if share >= floor else 0.0
            boost = 1.0 + coverage_weight * counted + phrase_weight * phrase
            boosted.append((candidate.document, _scaled(score, boost)))
            if traces is not None:
                trace = traces.setdefault(candidate.document, Trace())
                trace.boost, trace.phrase, trace.script, trace.counted = boost, phrase, script, counted
        else:
            places[position] = candidate.document
            boosted.append((candidate.document, score))
    result = _keep_places(places, sorted(boosted, key=lambda item: -item[1]))
    if traces is not None:
        for document, score in result:
            traces.setdefault(document, Trace()).reranked = score
        for position, document in places.items():
            traces[document].placed = position + 1
    return result


def _keep_places(
    places: Mapping[int, Document], ranked: Sequence[tuple[Document, float]]
) -> list[tuple[Document, float]]:
    """``ranked`` (``[(document, score), ...]``, best first) with each document of ``places`` moved to its index
    there (0-based; a place past the end of the others comes after them, in order of places).

    A placed document keeps its score unless that would break the order: it is raised to the score of the next
    other document below it and lowered to the score of the document above it, so scores stay non-increasing.

    >>> _keep_places({0: "zh"}, [("en1", 0.032), ("zh", 0.016), ("en2", 0.031)])
    [('zh', 0.032), ('en1', 0.032), ('en2', 0.031)]
    """
    placed = set(places.values())
    others = iter([item for item in ranked if item[0] not in placed])
    score = dict(ranked)
    order: list[Document] = []
    for position, document in sorted(places.items()):
        order.extend(document for document, _ in itertools.islice(others, max(position - len(order), 0)))
        order.append(document)
    order.extend(document for document, _ in others)
    floors: list[float] = []  # per index, from the end: the score of the next document below that is not placed
    below = -math.inf
    for document in reversed(order):
        floors.append(below)
        if document not in placed:
            below = score[document]
    result: list[tuple[Document, float]] = []
    for document, floor in zip(order, reversed(floors), strict=True):
        value = score[document]
        if document in placed:
            value = max(value, floor)
            if result:
                value = min(value, result[-1][1])
        result.append((document, value))
    return result


def script_factor(query: QueryFacts, candidate: Candidate[Document], discount: float = SCRIPT_DISCOUNT) -> float:
    """``1 - discount * folded_share``: what a chunk's BM25 score and reranker coverage are multiplied by."""
    return 1.0 - discount * folded_share(query, candidate)


def folded_share(query: QueryFacts, candidate: Candidate[Document]) -> float:
    """Share of the query weight the chunk holds that it holds only through script folding (0 … 1).

    ``Σ idf(t) over held Han terms t that the chunk never writes as the query does / Σ idf(t) over held terms``,
    held meaning ``t`` is among the chunk's terms; written meaning one of ``query.forms[t]`` occurs in one of
    ``candidate.written``. 0 when the chunk holds no query term.

    >>> query = QueryFacts(weights={"迁移": 2.0, "回滚": 1.0, "rake": 1.0}, forms={"迁移": {"迁移"}, "回滚": {"回滚"}})
    >>> folded_share(query, Candidate("zh-tw", {"迁移", "回滚", "rake"}, written=["遷移，回滾 rake"]))
    0.75
    """
    held = {term: weight for term, weight in query.weights.items() if term in candidate.terms}
    total = sum(held.values())
    if total <= 0:
        return 0.0
    folded = sum(
        weight
        for term, weight in held.items()
        if term in query.forms and not any(form in part for form in query.forms[term] for part in candidate.written)
    )
    return folded / total


def prefer_script(
    query: QueryFacts, scored: Sequence[tuple[Candidate[Document], float]], *, discount: float = SCRIPT_DISCOUNT
) -> list[tuple[Document, float]]:
    """The query's own script first: each score times :func:`script_factor` (``1 - discount * folded_share``).

    ``[(document, score), ...]`` best first; equal scores keep the given order. Reasons in the module docstring.

    Raises:
        ValueError: ``discount`` outside ``[0, 1)``.
    """
    if not 0 <= discount < 1:
        raise ValueError("the script discount must be in [0, 1)")
    result = [
        (candidate.document, _scaled(score, script_factor(query, candidate, discount))) for candidate, score in scored
    ]
    return sorted(result, key=lambda item: -item[1])


def _scaled(score: float, factor: float) -> float:
    """``score`` moved by ``factor`` in the higher-is-better direction whatever its sign (a cosine can be < 0)."""
    return score * factor if score >= 0 else score / factor
