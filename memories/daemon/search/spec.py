"""One internal search spec (issue 27 item 2): what the daemon's searches take, built once from whichever request
came in, so no service takes a client's wire request and a search's filters are parsed once per request.

::

    rag search ─┐                           ┌─ Retrieval.report / searched / retrieve
    rag explain ┤                           ├─ Retrieval.record_search
    rag ask ────┼── SearchSpec.of(request) ─┼─ Asking.answer
    memory search, memory_search, memory_retrieve, memory_ask (MCP)
    rag bench ──── SearchSpec(query=..., mode=...)

:meth:`SearchSpec.of` checks what a search checks before any work: the result limit (``limit_too_large``) and the
filters (``invalid_argument`` naming the filter, :func:`memories.daemon.core.filters.search_filter`).
"""

from __future__ import annotations

import msgspec

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.core.filters import search_filter
from memories.limits import check_result_limit

Searching = p.RagSearch | p.RagExplain | p.RagAsk | p.ToolRetrieve | p.ToolAsk | p.MemorySearch | p.ToolSearch
"""The client requests that run a search (``rag ask`` and ``memory_ask`` search for their evidence; ``memory
search`` and ``memory_search`` are BM25 searches grouped by record)."""


class SearchSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A search of a vault's chunks as the daemon runs it.

    Attributes:
        query: the query (at most :data:`memories.limits.MAX_QUERY_BYTES` UTF-8 bytes, checked by the index
            worker); a question for ``rag ask``.
        mode: ``bm25``, ``vector`` or ``hybrid``; ``None`` chooses (hybrid when the vault is embedded, else bm25).
        match_mode: ``any``, ``all`` or ``phrase`` (R-14).
        limit: chunks wanted (1 to :data:`memories.limits.MAX_RESULTS`).
        cards_only: knowledge cards only (the filter's ``kind`` is then ``card``).
        no_rerank: skip both rerankers.
        highlight: compute each hit's highlighted spans (human output only).
        filter: the parsed filters, as the index worker applies them; ``None`` for none.
    """

    query: str
    mode: p.SearchMode | None = None
    match_mode: p.MatchMode = "any"
    limit: int = 10
    cards_only: bool = False
    no_rerank: bool = False
    highlight: bool = False
    filter: w.SearchFilter | None = None

    @classmethod
    def of(cls, request: Searching) -> SearchSpec:
        """The search ``request`` asks for, its limit and filters checked and the filters parsed.

        Raises:
            MemoriesError: ``limit_too_large``; ``invalid_argument`` naming a malformed filter.
        """
        check_result_limit(request.limit)
        query = request.question if isinstance(request, p.RagAsk | p.ToolAsk) else request.query
        return cls(
            query=query,
            mode="bm25" if isinstance(request, p.MemorySearch | p.ToolSearch) else request.mode,
            match_mode=getattr(request, "match_mode", "any"),
            limit=request.limit,
            cards_only=getattr(request, "cards_only", False),
            no_rerank=getattr(request, "no_rerank", False),
            highlight=getattr(request, "highlight", False),
            filter=search_filter(request),
        )
