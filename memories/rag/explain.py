"""``rag explain``: the traces the ranking left, as the client protocol's explanation (no ranking happens here).

:meth:`memories.rag.pipeline.VaultCache.query` ranks once; every stage writes what it did to each chunk into a
:class:`~memories.rag.fusion.Trace` (the arms their ranks and scores, :func:`~memories.rag.fusion.fuse` the
coverage, the vote and its rules, :func:`~memories.rag.fusion.rerank` the boost and its parts). A search drops the
traces; an explanation turns those of the shown chunks, and of one named chunk (:func:`named_chunk`), into
:class:`~memories.protocol.ExplainedChunk` here, adding the reasons a chunk is absent from an arm and the query's
analysis. So what explain says is what ranked the results, never a second implementation of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from memories import protocol as p
from memories import worker_protocol as w
from memories.errors import MemoriesError
from memories.rag.analysis import AnalyzedQuery, analyze_query, text_language
from memories.rag.fusion import Candidate, QueryFacts, Trace, comparable, coverage, held
from memories.rag.vault_index import ChunkRow, VaultIndex

DEPTH = 100
"""How many chunks of each ranking enter fusion and the reranker (:data:`memories.rag.pipeline.CANDIDATES`)."""


def explanation(
    index: VaultIndex,
    request: w.IndexQuery,
    query: AnalyzedQuery,
    facts: QueryFacts,
    shown: Sequence[int],
    traces: Mapping[int, Trace],
    named: int | None,
    missing: int,
    candidate: Callable[[int], Candidate[int]],
    has_vector: Callable[[int], bool],
) -> w.Explanation:
    """The explanation of one query: its analysis, each shown chunk (row ids in rank order) and the ``named`` one.

    ``candidate`` gives a row as fusion sees it, ``has_vector`` whether it has a vector in the request's space;
    ``missing`` counts the model inputs without one.
    """

    def explained(rowid: int) -> p.ExplainedChunk:
        rank = shown.index(rowid) + 1 if rowid in shown else None
        return _chunk(index, request, facts, rowid, traces.get(rowid, Trace()), rank, candidate(rowid), has_vector)

    return w.Explanation(
        query=_query(index, request.query, query, facts),
        results=[explained(rowid) for rowid in shown],
        chunk=None if named is None else explained(named),
        missing_vectors=missing,
    )


def named_chunk(index: VaultIndex, chunk: str | None, shown: Sequence[int], traces: Mapping[int, Trace]) -> int | None:
    """The row id of the chunk ``rag explain --chunk`` names: ``RECORD[:N]``, the N-th chunk (from 1) of the
    record whose id, source path or title is ``RECORD`` (:meth:`VaultIndex.named`), or without ``:N`` its chunk
    ranked best here (of ``shown``, the row ids shown in rank order, the first; else the one with the best rank of
    either arm in ``traces``; else its first); or a chunk-hash prefix of at least 8 hex digits. ``None`` when none
    is named.

    Raises:
        MemoriesError: ``record_not_found`` (it names no searchable record and is no hash prefix),
            ``invalid_argument`` (no such chunk position; a name of several records; a hash prefix of no chunk
            or several).
    """
    if chunk is None:
        return None
    name, colon, position = chunk.rpartition(":")
    if not colon or not position.isdigit():
        name, position = chunk, ""
    [records] = index.named([name])
    if len(records) > 1:
        raise MemoriesError("invalid_argument", f"{name!r} names {len(records)} records; use a record id")
    if records:
        rows = index.record_rows(records[0])
        if position:
            if not 1 <= int(position) <= len(rows):
                raise MemoriesError(
                    "invalid_argument", f"record {records[0]} has {len(rows)} chunks; there is no chunk {position}"
                )
            return rows[int(position) - 1].rowid
        ids = [row.rowid for row in rows]
        if placed := [rowid for rowid in shown if rowid in ids]:
            return placed[0]

        def best(rowid: int) -> float:
            trace = traces.get(rowid)
            ranks = [] if trace is None else [r for r in (trace.lexical_rank, trace.vector_rank) if r is not None]
            return min(ranks, default=math.inf)

        return min(ids, key=best)
    prefix = chunk.lower()
    if len(prefix) < 8 or any(c not in "0123456789abcdef" for c in prefix):
        raise MemoriesError(
            "record_not_found",
            f"no searchable record has the id, source or title {name!r}, and {chunk!r} is not a chunk-hash prefix "
            "of at least 8 hex digits",
        )
    found = [row.rowid for row in index.rows() if row.chunk.chunk_hash.startswith(prefix)]
    if len(found) != 1:
        what = "no chunk" if not found else f"{len(found)} chunks"
        raise MemoriesError("invalid_argument", f"{what} of the vault have a hash starting with {prefix}")
    return found[0]


def _query(index: VaultIndex, text: str, query: AnalyzedQuery, facts: QueryFacts) -> p.QueryExplanation:
    chunks = index.term_chunks(query)
    terms = [
        p.ExplainedTerm(
            term=term,
            written=sorted(form for form in facts.forms.get(term, ()) if form != term),
            weight=facts.weights.get(term, 0.0),
            chunks=chunks.get(term, 0),
        )
        for term in query.terms
    ]
    dropped = [part for part in text.split() if not analyze_query(part).terms]
    return p.QueryExplanation(
        terms=terms,
        phrase=query.phrase,
        language=text_language(text),
        dropped=dropped,
        widened=index.widened(query) if query.terms else {},
    )


def _chunk(
    index: VaultIndex,
    request: w.IndexQuery,
    facts: QueryFacts,
    rowid: int,
    trace: Trace,
    rank: int | None,
    candidate: Candidate[int],
    has_vector: Callable[[int], bool],
) -> p.ExplainedChunk:
    row = index.row(rowid)
    siblings = [sibling.rowid for sibling in index.record_rows(row.record_id)]
    lexical = vector = None
    if request.mode != "vector":
        lexical = p.LexicalStage(
            rank=trace.lexical_rank,
            score=trace.lexical_score,
            coverage=coverage(facts.weights, held(facts, candidate)),
            vote=trace.vote,
            note=_lexical_note(request, facts, row, trace, candidate),
        )
    if request.mode != "bm25":
        vector = p.VectorStage(
            rank=trace.vector_rank, cosine=trace.cosine, note=_vector_note(request, row, trace, has_vector)
        )
    fusion = None
    if request.mode == "hybrid" and trace.fused is not None and trace.fused_rank is not None:
        fusion = p.FusionStage(score=trace.fused, rank=trace.fused_rank, rules=list(trace.rules))
    reranked = None
    if request.mode != "bm25" and not request.no_rerank and trace.reranked is not None:
        boost = trace.boost
        reranked = p.RerankStage(
            score=trace.reranked,
            boost=boost,
            coverage=trace.counted,
            phrase=trace.phrase,
            script=trace.script,
            note=None if boost is not None else f"kept place {trace.placed}: in another language than the query",
        )
    return p.ExplainedChunk(
        asset_id=row.record_id,
        revision=row.revision,
        chunk_hash=row.chunk.chunk_hash,
        position=siblings.index(rowid) + 1,
        chunks=len(siblings),
        title=row.title,
        source=row.source,
        byte_start=row.chunk.byte_start,
        byte_end=row.chunk.byte_end,
        language=candidate.language,
        bm25=lexical,
        vector=vector,
        fusion=fusion,
        rerank=reranked,
        rank=rank,
        label=None if rank is None else f"S{rank}",
    )


def _lexical_note(
    request: w.IndexQuery, facts: QueryFacts, row: ChunkRow, trace: Trace, candidate: Candidate[int]
) -> str | None:
    """Why the chunk has no BM25 rank, or why its rank does not count in fusion; ``None`` when nothing needs
    saying."""
    if trace.lexical_rank is not None:
        if request.mode == "hybrid" and trace.lexical_rank > DEPTH:
            return f"beyond the first {DEPTH} BM25 chunks, which alone enter fusion"
        return None
    if request.cards_only and row.kind != "card":
        return "not a knowledge card (--cards-only)"
    if not comparable(facts, candidate):
        return "in another language than the query: BM25 cannot match its words"
    if not held(facts, candidate):
        return "holds none of the query's words"
    if request.match_mode != "any":
        return f"left out by match mode {request.match_mode}"
    return f"beyond the first {DEPTH if request.mode == 'hybrid' else request.limit} BM25 chunks"


def _vector_note(request: w.IndexQuery, row: ChunkRow, trace: Trace, has_vector: Callable[[int], bool]) -> str | None:
    """Why the chunk has no vector rank; ``None`` when it has one within the chunks fused."""
    if trace.vector_rank is not None:
        if trace.vector_rank > DEPTH:
            return f"beyond the first {DEPTH} vector chunks, which alone enter fusion and the reranker"
        return None
    if not has_vector(row.rowid):
        return "no vector yet (`rag index` embeds it; explain never does)"
    if request.cards_only and row.kind != "card":
        return "not a knowledge card (--cards-only)"
    if request.match_mode != "any":
        return f"left out by match mode {request.match_mode}"
    return f"beyond the first {DEPTH} vector chunks"
