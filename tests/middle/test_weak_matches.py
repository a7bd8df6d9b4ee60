"""Honest results when nothing matches (issue 30 item 4, acceptance 5): a query no note answers gets its results
marked ``weak_matches``, with a warning, in ``rag search`` (the CLI's request), ``rag explain`` and MCP
``memory_retrieve``; a query a note answers, by its words or by its meaning, does not. In the daemon's middle with
the real index worker's handlers (``workers.index.HANDLERS``: BM25, vectors, fusion, the rule) and a scripted
model whose cosines the test chooses: the evidence cosine is the local default, 0.55."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import workers.index
from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.core.context import RequestContext
from memories.daemon.search.retrieval import WEAK_MATCHES
from memories.rag.answers import MIN_SIMILARITY
from tests.fixtures.middle import Middle, running_middle

NOTES = {
    "Lantern": "lantern repair with brass fittings and a new wick",
    "Sourdough": "sourdough starter feeding schedule, twice a day",
    "Ownership": "rust ownership and borrowing rules",
}
LANTERN, ELSEWHERE, NOWHERE = (0.0, 1.0, 0.0, 0.0), (0.0, 0.0, 1.0, 0.0), (1.0, 0.0, 0.0, 0.0)
"""Unit vectors: the lantern note's, the other notes', and one orthogonal to every note (cosine 0)."""


def _vector(text: str) -> bytes:
    return struct.pack("<4f", *(LANTERN if "lantern" in text else ELSEWHERE))


def _query_vector(query: str) -> bytes:
    """A query about lamps means the lantern note (cosine 1, no shared word); any other query means nothing."""
    return struct.pack("<4f", *(LANTERN if "lamp" in query else NOWHERE))


def _one_argument(handler: Callable[[Any, Any], Any]) -> Callable[[Any], Any]:
    return lambda request: handler(request, None)


@pytest.fixture
async def real(tmp_path: Path) -> AsyncIterator[Middle]:
    workers.index._caches.clear()
    async with running_middle(tmp_path) as middle:
        fake = middle.fakes["index"]
        fake.handlers.clear()
        fake.handlers.update({kind: _one_argument(handler) for kind, handler in workers.index.HANDLERS.items()})
        middle.index.restarted = workers.index._caches.clear  # type: ignore[method-assign]
        middle.fake_model(
            lambda request: w.Vectors(vectors=b"".join(_vector(text) for text in request.inputs), dimension=4)
        )
        middle.fakes["embedding"].handlers[w.EmbedQuery] = lambda request: w.Vectors(
            vectors=_query_vector(request.query), dimension=4
        )
        for title, body in NOTES.items():
            await middle.add(body, title)
        yield middle
    workers.index._caches.clear()


async def _search(middle: Middle, query: str, mode: p.SearchMode | None) -> tuple[p.SearchReport, list[str]]:
    ctx = RequestContext()
    report = await middle.ok(p.RagSearch(vault="notes", query=query, mode=mode), ctx)
    return report, ctx.warnings


@pytest.mark.parametrize("mode", ["hybrid", "vector", None])
async def test_a_query_no_note_answers_gets_results_marked_weak_in_rag_search(real: Middle, mode: str | None) -> None:
    assert MIN_SIMILARITY["local"] > 0.0  # the scripted cosines: 0 for this query, under any sensible bar
    report, warnings = await _search(real, "zzzqqqxyz", mode)  # type: ignore[arg-type]
    assert report.mode in ("hybrid", "vector") and len(report.results) == 3  # the nearest notes are still shown
    assert report.weak_matches
    assert p.document(report)["weak_matches"] is True
    assert WEAK_MATCHES in warnings


@pytest.mark.parametrize(
    ("query", "mode"),
    [
        ("lantern wick", "hybrid"),  # its words
        ("lantern wick", "bm25"),
        ("how do I fix the lamp", "hybrid"),  # its meaning: no shared content word, cosine 1
        ("how do I fix the lamp", "vector"),
    ],
)
async def test_a_query_a_note_answers_is_not_marked_weak(real: Middle, query: str, mode: p.SearchMode) -> None:
    report, warnings = await _search(real, query, mode)
    assert report.results and report.results[0].title == "Lantern"
    assert not report.weak_matches
    assert WEAK_MATCHES not in warnings


async def test_bm25_says_no_results_and_nothing_weak_for_a_word_no_note_holds(real: Middle) -> None:
    report, warnings = await _search(real, "zzzqqqxyz", "bm25")
    assert report.results == [] and not report.weak_matches and WEAK_MATCHES not in warnings


async def test_rag_explain_says_weak_matches_as_the_search_does(real: Middle) -> None:
    for query, weak in (("zzzqqqxyz", True), ("lantern wick", False), ("fix the lamp", False)):
        searched, _ = await _search(real, query, "hybrid")  # first: explain embeds no chunk, a search does
        explained = await real.ok(p.RagExplain(vault="notes", query=query, mode="hybrid"))
        assert explained.weak_matches is searched.weak_matches is weak, query
        assert [c.asset_id for c in explained.results] == [hit.asset_id for hit in searched.results]


async def test_memory_retrieve_tells_the_ai_client_the_results_are_weak(real: Middle) -> None:
    grant = await real.ok(p.GrantCreate(vault="notes", client="test", scope=["retrieve"], expires="1h"))
    ctx = RequestContext()
    weak = await real.ok(p.Granted(token=grant.token, call=p.ToolRetrieve(query="zzzqqqxyz")), ctx)
    assert weak.mode == "hybrid" and len(weak.results) == 3
    assert p.document(weak)["weak_matches"] is True
    assert WEAK_MATCHES in ctx.warnings  # the MCP server hands these to the client beside the result
    ctx = RequestContext()
    answered = await real.ok(p.Granted(token=grant.token, call=p.ToolRetrieve(query="fix the lamp")), ctx)
    assert answered.results[0].title == "Lantern"
    assert p.document(answered)["weak_matches"] is False and WEAK_MATCHES not in ctx.warnings
