"""One internal search spec (issue 27 item 2): each request that searches has its filters parsed once, whichever
way it came in (``rag search``, ``memory search``, and ``memory_search`` / ``memory_retrieve`` through a grant;
``rag explain`` needs the real index worker, which the fake of the middle is not), and a malformed filter still fails
before any work (``rag explain`` too)."""

from __future__ import annotations

from typing import Any

import pytest

from memories import protocol as p
from memories.daemon.core import filters
from memories.errors import MemoriesError
from tests.fixtures.middle import Middle


class Parses:
    """Counts the filter parses: :func:`memories.daemon.core.filters.search_filter` reads ``since`` once a parse."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = filters._bound

        def counting(name: str, *args: Any, **kwargs: Any) -> Any:
            if name == "since":
                self.count += 1
            return real(name, *args, **kwargs)

        monkeypatch.setattr(filters, "_bound", counting)


async def test_each_search_request_parses_its_filters_once(middle: Middle, monkeypatch: pytest.MonkeyPatch) -> None:
    await middle.add("lantern in the garden")
    token = (await middle.ok(p.GrantCreate(vault="notes", client="test", scope=["search", "retrieve"]))).token
    parses = Parses(monkeypatch)
    requests: list[p.Request] = [
        p.RagSearch(vault="notes", query="lantern", mode="bm25", tags=["garden"]),
        p.MemorySearch(vault="notes", query="lantern", since="30d"),
        p.Granted(token=token, call=p.ToolSearch(query="lantern", since="30d")),
        p.Granted(token=token, call=p.ToolRetrieve(query="lantern", mode="bm25", since="30d")),
    ]
    for request in requests:
        parses.count = 0
        await middle.ok(request)
        assert parses.count == 1, request


async def test_a_malformed_filter_fails_before_any_work(middle: Middle) -> None:
    await middle.add("lantern")
    queries = len(middle.index.queries) if hasattr(middle.index, "queries") else None
    for request in (
        p.RagSearch(vault="notes", query="lantern", since="not a date"),
        p.RagExplain(vault="notes", query="lantern", since="not a date"),
        p.MemorySearch(vault="notes", query="lantern", since="not a date"),
    ):
        with pytest.raises(MemoriesError) as raised:
            await middle.ok(request)
        assert raised.value.code == "invalid_argument" and "since" in raised.value.message
    jobs = (await middle.ok(p.Jobs())).jobs
    assert not [job for job in jobs if job.kind in ("search", "explain")]
    if queries is not None:
        assert len(middle.index.queries) == queries
