"""One vault's cache and the search pipeline over it: BM25, vectors, Reciprocal Rank Fusion, reranking (R-10 … R-14,
R-34, R-35).

::

    query ─ analyze ─┬─ BM25 (FTS5, weights 5/1/2) ── own script wins near-ties ─┐  coverage ≥ 0.5,
                     │                                                          ├─ RRF (k = 60) ─ rerank ─ top N
                     └─ cosine over unit vectors ── strict-mode filter ─────────┘  (hybrid)  (unless --no-rerank)
                          (vector, hybrid)          (all, phrase)

Scores are higher-is-better in every mode: ``bm25`` gives ``-bm25()`` of FTS5 (a chunk in the other Chinese
script than the query's counts 3 % less); ``vector`` the cosine similarity in ``[-1, 1]``; ``hybrid`` the RRF
value ``Σ 1/(60 + rank)`` over the two rankings (at most ``2/61``), where only BM25 chunks holding half of the
query's idf weight take part, and none when the vector arm's first chunk is in another language than the query;
the reranker multiplies a non-negative score by ``1 + 0.5·coverage + 0.25·phrase`` (rules and reasons in
:mod:`memories.rag.fusion`). Hybrid fuses the best :data:`CANDIDATES` of each ranking; when one ranking is
empty the other's order is kept. Ties: BM25 by record id then byte offset; vector by the order of the chunks in
the vault; RRF by best rank, then the BM25 rank.

Chunks reach the model as :func:`model_input` names them (the model card's document prompt).
"""

from __future__ import annotations

import posixpath
import time

import numpy as np

from memories import worker_protocol as w
from memories.models.embedding import document_input, estimated_tokens
from memories.rag.analysis import AnalyzedQuery, analyze_query, han_script, highlight_spans, text_language
from memories.rag.fusion import Candidate, QueryFacts, fuse, prefer_script, rerank
from memories.rag.vault_index import ChunkRow, VaultIndex
from memories.rag.vectors import VectorStore, input_hash

CANDIDATES = 100
"""Depth of each ranking fed to fusion and the reranker (at least the requested limit)."""


class VaultCache:
    """Everything ``workers.index`` keeps for one vault: the lexical index, the vectors and the epoch it is at."""

    def __init__(self, vault_id: str) -> None:
        self.vault_id = vault_id
        self.index = VaultIndex(vault_id)
        self.vectors = VectorStore()
        self.epoch: int | None = None
        self.last_build: float | None = None
        self._input_keys: dict[int, str] = {}
        self._candidates: dict[int, Candidate[int]] = {}
        self._spaces: set[str] = set()

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
        """Mark the cache as holding the vault at ``epoch`` and drop vectors that no chunk uses any more."""
        live = {row.rowid for row in self.index.rows()}
        self._input_keys = {rowid: key for rowid, key in self._input_keys.items() if rowid in live}
        self._candidates = {rowid: candidate for rowid, candidate in self._candidates.items() if rowid in live}
        keys = {self._key(row) for row in self.index.rows()}
        self.vectors.retain((space, key) for space in self._spaces for key in keys)
        self.epoch = epoch

    def store_vectors(self, space_key: str, keys: list[str], vectors: bytes, dimension: int) -> int:
        """Store finished vectors (float32[n, dimension] bytes); returns how many were new."""
        matrix = np.frombuffer(vectors, dtype=np.float32).reshape(len(keys), dimension)
        self._spaces.add(space_key)
        return self.vectors.add(space_key, keys, matrix)

    # -- embedding plan ------------------------------------------------------------------------------------

    def missing(self, space_key: str, limit: int) -> w.MissingInputs:
        """Up to ``limit`` model inputs without a vector, shortest first by :func:`estimated_tokens` (the
        tokenizer lives in the embedding worker), so consecutive batches have similar token lengths and little
        padding; plus how many are missing and embedded in all."""
        wanted: dict[str, ChunkRow] = {}
        for row in self.index.rows():
            wanted.setdefault(self._key(row), row)
        missing = self.vectors.missing(space_key, wanted)
        inputs = {key: model_input(wanted[key]) for key in missing}
        chosen = sorted(missing, key=lambda key: (estimated_tokens(inputs[key]), wanted[key].rowid))[:limit]
        return w.MissingInputs(
            keys=chosen,
            inputs=[inputs[key] for key in chosen],
            total_missing=len(missing),
            embedded=len(wanted) - len(missing),
        )

    def state(self, space_key: str | None) -> w.IndexState:
        stats = self.index.stats()
        keys = {self._key(row) for row in self.index.rows()}
        embedded = 0 if space_key is None else len(keys) - len(self.vectors.missing(space_key, keys))
        return w.IndexState(
            cached=True,
            records=stats.records,
            chunks=stats.chunks,
            text_bytes=stats.text_bytes,
            last_build=self.last_build,
            embedded=embedded,
            missing=len(keys) - embedded,
            vector_bytes=self.vectors.nbytes,
        )

    # -- search --------------------------------------------------------------------------------------------

    def search(self, request: w.IndexQuery) -> list[w.WorkerHit]:
        """Chunks in rank order for one query (labels are given by the supervisor).

        Raises:
            MemoriesError: ``query_too_long``, ``too_many_terms``, ``invalid_vector``.
        """
        query = analyze_query(request.query)
        if not query.terms:
            return []  # an empty or punctuation-only query finds nothing, in every mode
        facts = QueryFacts(
            weights=self.index.term_weights(query),
            phrase=query.phrase,
            language=text_language(request.query),
            script=han_script(request.query),
        )
        if request.mode == "bm25":
            ranked = self._lexical(query, facts, request, request.limit)
        else:
            ranked = self._semantic(query, facts, request)
        return [
            _hit(self.index.row(rowid), score, query if request.highlight else None)
            for rowid, score in ranked[: request.limit]
        ]

    def _lexical(
        self, query: AnalyzedQuery, facts: QueryFacts, request: w.IndexQuery, limit: int
    ) -> list[tuple[int, float]]:
        """The BM25 ranking, where the query's own Chinese script wins near-ties (:func:`prefer_script`)."""
        # Fetch past the limit so that a chunk in the query's script just below it can win a near-tie.
        depth = min(2 * limit, max(CANDIDATES, limit)) if facts.script else limit
        hits = self.index.search(query, match_mode=request.match_mode, limit=depth, cards_only=request.cards_only)
        return prefer_script(facts, [(self._candidate(hit.row.rowid), hit.score) for hit in hits])[:limit]

    def _semantic(self, query: AnalyzedQuery, facts: QueryFacts, request: w.IndexQuery) -> list[tuple[int, float]]:
        assert request.space_key is not None and request.query_vector is not None
        depth = max(CANDIDATES, request.limit)
        rows = [row for row in self.index.rows() if not request.cards_only or row.kind == "card"]
        if request.match_mode != "any":
            allowed = self.index.filter_rowids(query, match_mode=request.match_mode, cards_only=request.cards_only)
            rows = [row for row in rows if row.rowid in allowed]
        by_key: dict[str, list[ChunkRow]] = {}
        for row in rows:
            by_key.setdefault(self._key(row), []).append(row)
        vector = np.frombuffer(request.query_vector, dtype=np.float32)
        cosine = [
            (row.rowid, score)
            for key, score in self.vectors.search(request.space_key, vector, by_key, limit=depth)
            for row in by_key[key]
        ]
        if request.mode == "vector":
            fused = cosine
        else:
            lexical = self._lexical(query, facts, request, min(depth, 100))
            fused = fuse(
                facts,
                [self._candidate(rowid) for rowid, _ in lexical],
                [self._candidate(rowid) for rowid, _ in cosine],
            )
        if request.no_rerank:
            return fused
        return rerank(facts, [(self._candidate(rowid), score) for rowid, score in fused[:depth]])

    def _candidate(self, rowid: int) -> Candidate[int]:
        """The row as fusion sees it; its language and script are worked out once per row."""
        candidate = self._candidates.get(rowid)
        if candidate is None:
            row = self.index.row(rowid)
            candidate = self._candidates[rowid] = Candidate(
                rowid, row.terms, row.phrase_key, text_language(row.chunk.text), han_script(row.chunk.text)
            )
        return candidate

    def _key(self, row: ChunkRow) -> str:
        key = self._input_keys.get(row.rowid)
        if key is None:
            key = self._input_keys[row.rowid] = input_hash(model_input(row))
        return key


def model_input(row: ChunkRow) -> str:
    """The exact model input of a chunk: the document prompt with the record's title and the chunk's text.

    A title that is only the file name (a note without a heading: ``rag ingest`` then titles it by its file
    name) is no title for the model, which gets ``none`` as the model card says for untitled documents: a name
    such as ``2024-05-01.md`` or ``zh-118.md`` would otherwise weigh on every vector of the note, most of all on
    short ones. BM25 still matches the file name (title and metadata columns).
    """
    title: str | None = row.title
    if row.source is not None and title == posixpath.basename(row.source):
        title = None
    return document_input(title, row.chunk.text)


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
