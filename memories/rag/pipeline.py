"""One vault's cache and the search pipeline over it: BM25, vectors, Reciprocal Rank Fusion, reranking (R-10 … R-14,
R-34, R-35).

::

    query ─ analyze ─┬─ BM25 (FTS5, weights 5/1/2) ── own script first ─────────┐  coverage ≥ 0.95,
                     │                                                          ├─ RRF (k = 60) ─ rerank ─ top N
                     └─ cosine over unit vectors ── strict-mode filter ─────────┘  (hybrid)  (unless --no-rerank)
                          (vector, hybrid)          (all, phrase)

Scores are higher-is-better in every mode: ``bm25`` gives ``-bm25()`` of FTS5 times ``1 - folded share / 3``
(a chunk counts up to a third less for the query words it holds only through Traditional/Simplified folding);
``vector`` the cosine similarity in ``[-1, 1]``; ``hybrid`` the RRF value ``Σ 1/(60 + rank)`` over the two
rankings (at most ``2/61``), where only BM25 chunks holding 95 % of the query's idf weight take part, and a chunk
in another language than the query keeps the place the vector ranking gave it; the reranker multiplies a
non-negative score by ``1 + 0.5·coverage + 0.25·phrase`` (coverage counted from 95 % on) and leaves chunks in
another language in place (rules and reasons in :mod:`memories.rag.fusion`). Hybrid fuses the best
:data:`CANDIDATES` of each ranking; when one ranking is empty the other's order is kept. Ties: BM25 by record id
then byte offset; vector by the order of the chunks in the vault; RRF by best rank, then the vector rank.

Chunks reach the model as :func:`~memories.rag.chunk_vectors.model_input` names them, by the embedding backend's
recipe (for EmbeddingGemma, the model card's document prompt). With ``evidence`` (``rag ask``), the BM25 query is
the question's content terms (:func:`memories.rag.stopwords.content_terms`: *what does the note say about* asks
nothing of BM25), and only chunks that are evidence come back (:func:`memories.rag.answers.is_evidence`); ``rag
search`` ranks as before.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np

from memories import worker_protocol as w
from memories.limits import IndexLimits
from memories.rag.analysis import AnalyzedQuery, analyze_query, highlight_spans, text_language, written_forms
from memories.rag.answers import QuestionTerms, is_evidence, weak_matches
from memories.rag.chunk_vectors import ChunkVectors
from memories.rag.explain import explanation, named_chunk
from memories.rag.fusion import Candidate, QueryFacts, Trace, fuse, prefer_script, rerank
from memories.rag.stopwords import content_terms
from memories.rag.vault_index import ChunkRow, VaultIndex

CANDIDATES = 100
"""Depth of each ranking fed to fusion and the reranker (at least the requested limit)."""

CACHED_CANDIDATES = 4096
"""Most chunks a cache keeps as fusion candidates (their terms, phrase key and language), least recently used
dropped: a search uses at most a few hundred, and each costs about 7.7 KB (mostly its terms), so an unbounded cache
grew towards the whole vault, some 770 MB at 100,000 chunks after enough different searches (issue 28 item 4)."""


class VaultCache:
    """Everything ``workers.index`` keeps for one vault: the lexical index, the vectors and the epoch it is at,
    within ``limits`` (``[rag] max_chunks`` …; default: ``[rag]``'s defaults)."""

    def __init__(self, vault_id: str, limits: IndexLimits | None = None) -> None:
        limits = limits or IndexLimits()
        self.vault_id = vault_id
        self.index = VaultIndex(vault_id, max_chunks=limits.chunks, max_text_bytes=limits.text_bytes)
        self.vectors = ChunkVectors(self.index, max_vector_bytes=limits.vector_bytes)
        self.epoch: int | None = None
        self.last_build: float | None = None
        self._candidates: OrderedDict[int, Candidate[int]] = OrderedDict()

    # -- updates -------------------------------------------------------------------------------------------

    def apply(self, upserts: list[w.IndexRecord], deletes: list[str]) -> None:
        """Apply a sync batch. The cache is no longer at any epoch until :meth:`stamp`.

        Raises:
            MemoriesError: ``vault_too_large`` (the records and chunks are unchanged; the cache stays unstamped).
        """
        self.epoch = None
        self.index.apply(upserts, deletes)
        self.last_build = time.time()

    def stamp(self, epoch: int) -> None:
        """Mark the cache as holding the vault at ``epoch`` and drop vectors (and refusals) that no chunk uses."""
        rows = list(self.index.rows())
        live = {row.rowid for row in rows}
        self._candidates = OrderedDict(
            (rowid, candidate) for rowid, candidate in self._candidates.items() if rowid in live
        )
        self.vectors.retain(rows)
        self.epoch = epoch

    def state(self, space: w.VectorSpace | None) -> w.IndexState:
        stats = self.index.stats()
        embedded = failed = 0
        if space is not None:
            plan = self.vectors.missing(space, 0)
            embedded, missing, failed = plan.embedded, plan.total_missing, len(plan.failures)
        else:
            missing = len({row.chunk.chunk_hash for row in self.index.rows()})
        return w.IndexState(
            cached=True,
            records=stats.records,
            chunks=stats.chunks,
            text_bytes=stats.text_bytes,
            last_build=self.last_build,
            embedded=embedded,
            missing=missing,
            vector_bytes=self.vectors.store.nbytes,
            failed=failed,
        )

    # -- search --------------------------------------------------------------------------------------------

    def search(self, request: w.IndexQuery) -> list[w.WorkerHit]:
        """Chunks in rank order for one query (labels are given by the supervisor): :meth:`query`'s hits.

        Raises:
            MemoriesError: as :meth:`query`.
        """
        return self.query(request).hits

    def query(self, request: w.IndexQuery) -> w.IndexHits:
        """Chunks in rank order for one query, and, when ``request.explain`` asks, why each ranks where it does.

        One code path ranks and explains: every stage records what it did in a :class:`~memories.rag.fusion.Trace`
        per chunk; a search drops them, an explanation (:func:`memories.rag.explain.explanation`) keeps them.

        Raises:
            MemoriesError: ``query_too_long``, ``too_many_terms``, ``invalid_vector``; for an explained ``chunk``,
                ``record_not_found`` or ``invalid_argument`` (see :func:`memories.rag.explain.named_chunk`).
        """
        query = analyze_query(request.query)
        if request.evidence is not None:  # rag ask
            asked, query = _asked(self.index, query)
        facts = QueryFacts(
            weights=self.index.term_weights(query),
            phrase=query.phrase,
            language=text_language(request.query),
            forms=written_forms(request.query, query.terms),
        )
        traces: dict[int, Trace] = {}
        ranked: list[tuple[int, float]] = []
        admitted = self.index.admitted(request.filter)  # the filter, before either ranking (None: every chunk)
        if query.terms:  # an empty or punctuation-only query finds nothing, in every mode
            ranked = self._ranked(query, facts, request, traces, admitted)
        if request.evidence is not None:
            threshold = request.evidence.min_similarity
            ranked = [
                (rowid, score)
                for rowid, score in ranked
                if is_evidence(asked, self._candidate(rowid), traces[rowid].cosine, threshold)
            ]
        shown = ranked[: request.limit]
        hits = [_hit(self.index.row(rowid), score, query if request.highlight else None) for rowid, score in shown]
        weak = request.evidence is None and self._weak(query, request, [rowid for rowid, _ in shown], traces)
        if request.explain is None:
            return w.IndexHits(hits=hits, weak_matches=weak)
        named = named_chunk(self.index, request.explain.chunk, [rowid for rowid, _ in shown], traces)
        if named is not None and query.terms:
            self._trace_beyond(query, facts, request, named, traces, admitted)
        space = request.space
        missing = self.vectors.missing(space, 0).total_missing if space is not None else 0

        def has_vector(rowid: int) -> bool:
            return space is not None and self.vectors.has_vector(self.index.row(rowid), space)

        found = explanation(
            self.index,
            request,
            query,
            facts,
            [rowid for rowid, _ in shown],
            traces,
            named,
            missing,
            self._candidate,
            has_vector,
        )
        return w.IndexHits(hits=hits, explanation=found, weak_matches=weak)

    def _weak(self, query: AnalyzedQuery, request: w.IndexQuery, shown: list[int], traces: dict[int, Trace]) -> bool:
        """Whether the ``shown`` chunks are weak matches (:func:`memories.rag.answers.weak_matches`): none holds half
        of the query's content weight or reaches ``request.min_similarity``, so ``rag ask`` would find no evidence."""
        if not shown:
            return False
        asked = QuestionTerms.of(query.terms, self.index.stats().chunks, self.index.term_chunks(query))
        cosines = [(self._candidate(rowid), traces[rowid].cosine if rowid in traces else None) for rowid in shown]
        return weak_matches(asked, cosines, request.min_similarity)

    def _ranked(
        self,
        query: AnalyzedQuery,
        facts: QueryFacts,
        request: w.IndexQuery,
        traces: dict[int, Trace],
        admitted: set[int] | None,
    ) -> list[tuple[int, float]]:
        """The ranking of ``request.mode`` among the ``admitted`` chunks (``None``: all), best first; each stage's
        trace goes into ``traces``."""
        if request.mode == "bm25":
            depth = request.limit if request.evidence is None else max(CANDIDATES, request.limit)
            return self._lexical(query, facts, request, depth, traces, admitted)
        depth = max(CANDIDATES, request.limit)
        cosine = self._cosine(query, request, depth, traces, admitted)
        if request.mode == "vector":
            fused = cosine
        else:
            lexical = self._lexical(query, facts, request, min(depth, 100), traces, admitted)
            fused = fuse(
                facts,
                [self._candidate(rowid) for rowid, _ in lexical],
                [self._candidate(rowid) for rowid, _ in cosine],
                traces=traces,
            )
        if request.no_rerank:
            return fused
        return rerank(facts, [(self._candidate(rowid), score) for rowid, score in fused[:depth]], traces=traces)

    def _lexical(
        self,
        query: AnalyzedQuery,
        facts: QueryFacts,
        request: w.IndexQuery,
        limit: int,
        traces: dict[int, Trace] | None = None,
        admitted: set[int] | None = None,
    ) -> list[tuple[int, float]]:
        """The BM25 ranking among the ``admitted`` chunks, the query's own script first (:func:`prefer_script`);
        each chunk's rank and score go into ``traces`` when given."""
        # Fetch past the limit, so that a chunk in the query's script just below it can move up.
        depth = max(CANDIDATES, limit) if facts.forms else limit
        hits = self.index.search(
            query, match_mode=request.match_mode, limit=depth, cards_only=request.cards_only, admitted=admitted
        )
        ranked = prefer_script(facts, [(self._candidate(hit.row.rowid), hit.score) for hit in hits])[:limit]
        if traces is not None:
            for rank, (rowid, score) in enumerate(ranked, start=1):
                trace = traces.setdefault(rowid, Trace())
                trace.lexical_rank, trace.lexical_score = rank, score
        return ranked

    def _cosine(
        self,
        query: AnalyzedQuery,
        request: w.IndexQuery,
        limit: int | None,
        traces: dict[int, Trace] | None = None,
        admitted: set[int] | None = None,
    ) -> list[tuple[int, float]]:
        """The vector ranking of the chunks the request admits (``cards_only``, the filter's ``admitted`` rows, a
        strict match mode) that have a vector, best first, at most ``limit`` (masked before ranking, so the limit
        counts admitted chunks); each chunk's rank and cosine go into ``traces`` when given."""
        assert request.space is not None and request.query_vector is not None
        space = request.space
        view = self.vectors.view(space)
        allowed = None if admitted is None else view.mask(admitted)
        if request.cards_only:
            allowed = view.cards if allowed is None else allowed & view.cards
        if request.match_mode != "any":
            strict = self.index.filter_rowids(
                query, match_mode=request.match_mode, cards_only=request.cards_only, admitted=admitted
            )
            allowed = view.mask(strict) if allowed is None else allowed & view.mask(strict)
        matrix, vector = self.vectors.store.scanned(space.key, np.frombuffer(request.query_vector, dtype=np.float32))
        ranked = view.ranked(matrix, vector, allowed, limit)
        if traces is not None:
            for rank, (rowid, score) in enumerate(ranked, start=1):
                trace = traces.setdefault(rowid, Trace())
                trace.vector_rank, trace.cosine = rank, score
        return ranked

    def _trace_beyond(
        self,
        query: AnalyzedQuery,
        facts: QueryFacts,
        request: w.IndexQuery,
        rowid: int,
        traces: dict[int, Trace],
        admitted: set[int] | None,
    ) -> None:
        """For the named chunk, its places in the whole BM25 and vector rankings (of the admitted chunks) when the
        candidates fused left it out (ranks beyond :data:`CANDIDATES`); explain only."""
        trace = traces.setdefault(rowid, Trace())
        if trace.lexical_rank is None:
            every = self._lexical(query, facts, request, max(self.index.stats().chunks, 1), admitted=admitted)
            trace.lexical_rank, trace.lexical_score = next(
                ((rank, score) for rank, (found, score) in enumerate(every, start=1) if found == rowid), (None, None)
            )
        if trace.vector_rank is None and request.mode != "bm25":
            every = self._cosine(query, request, None, admitted=admitted)
            trace.vector_rank, trace.cosine = next(
                ((rank, score) for rank, (found, score) in enumerate(every, start=1) if found == rowid), (None, None)
            )

    def _candidate(self, rowid: int) -> Candidate[int]:
        """The row as fusion sees it, worked out once while it stays among the :data:`CACHED_CANDIDATES` used last."""
        candidate = self._candidates.get(rowid)
        if candidate is not None:
            self._candidates.move_to_end(rowid)
            return candidate
        row = self.index.row(rowid)
        written = (row.title, row.chunk.text, row.source or "")
        terms, phrase_key = self.index.analysis(rowid)
        language = text_language(row.chunk.text)
        candidate = self._candidates[rowid] = Candidate(rowid, terms, phrase_key, language, written)
        if len(self._candidates) > CACHED_CANDIDATES:
            self._candidates.popitem(last=False)
        return candidate


def _asked(index: VaultIndex, query: AnalyzedQuery) -> tuple[QuestionTerms, AnalyzedQuery]:
    """``rag ask``'s question terms over the vault (the evidence rule), and its BM25 query: the question's content
    terms, or all of them when it has none (a question of stop words then finds no lexical evidence anyway)."""
    content = content_terms(query.terms)
    asked = QuestionTerms.of(query.terms, index.stats().chunks, index.term_chunks(query))
    return asked, AnalyzedQuery(terms=content, phrase=query.phrase) if content else query


def _hit(row: ChunkRow, score: float, highlight: AnalyzedQuery | None) -> w.WorkerHit:
    chunk = row.chunk
    return w.WorkerHit(
        asset_id=row.record_id,
        revision=row.revision,
        chunk_hash=chunk.chunk_hash,
        byte_start=chunk.byte_start,
        byte_end=chunk.byte_end,
        score=score,
        title=row.title,
        kind=row.kind,
        source=row.source,
        text=chunk.text,
        highlights=highlight_spans(chunk.text, highlight.terms) if highlight else [],
    )
