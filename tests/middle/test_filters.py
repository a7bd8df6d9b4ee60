"""Search filters through the daemon (issue 20 item 6): every request that searches, lists or answers takes them
(``rag search``, ``memory search``, ``memory list``, ``rag ask``, and ``memory_search``, ``memory_retrieve`` and
``memory_ask`` through a grant); a note's date comes from its front matter, else its file's time at ingest, else its
first revision; a malformed filter is ``invalid_argument`` naming it. The ranking itself is tested on the real
pipeline in tests/unit/test_filters.py; here the fake index applies the filter the daemon sends."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import GenerationConfig, RagConfig
from memories.errors import MemoriesError
from tests.fixtures.middle import Middle, running_middle


def _day(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


async def _vault(middle: Middle, tmp_path: Path) -> dict[str, str]:
    """Notes about lanterns with a date each way: front matter ``date``, ``created``, the file's time, and a memory
    added by hand (its first revision's time: now); title -> id."""
    folder = tmp_path / "Obsidian"
    (folder / "daily").mkdir(parents=True)
    (folder / "daily" / "fm.md").write_text("---\ndate: 2024-05-01\ntags: [garden, Rust]\n---\n# Dated\n\nlantern\n")
    (folder / "daily" / "created.md").write_text("---\ncreated: 2023-02-01 08:00\n---\n# Created\n\nlantern\n")
    untimed = folder / "old.md"
    untimed.write_text("# File time\n\nlantern in an old file\n")
    os.utime(untimed, (_day("2021-07-01T12:00:00"), _day("2021-07-01T12:00:00")))
    await middle.ok(p.RagIngest(vault="notes", paths=[str(folder)], recursive=True))
    request = p.MemoryAdd(
        vault="notes", kind="memory", sensitivity="general", title="Hand", body=b"lantern by hand", meta={"k": "v"}
    )
    await middle.ok(request)
    return {r.title or "": r.id for r in (await middle.ok(p.MemoryList(vault="notes"))).records}


async def _titles(middle: Middle, **filters: object) -> set[str]:
    report = await middle.ok(p.RagSearch(vault="notes", query="lantern", mode="bm25", **filters))  # type: ignore[arg-type]
    return {hit.title for hit in report.results}


async def test_each_filter_on_rag_search_memory_search_and_memory_list(middle: Middle, tmp_path: Path) -> None:
    ids = await _vault(middle, tmp_path)
    listed = {r.title: r.date for r in (await middle.ok(p.MemoryList(vault="notes"))).records}
    assert listed["Dated"] == _day("2024-05-01") and listed["Created"] == _day("2023-02-01T08:00")
    assert listed["File time"] == _day("2021-07-01T12:00:00")
    assert listed["Hand"] is not None and listed["Hand"] > _day("2025-01-01")
    assert await _titles(middle, since="2024-01-01") == {"Dated", "Hand"}
    assert await _titles(middle, until="2023-02-01") == {"Created", "File time"}  # a day includes all of it
    assert await _titles(middle, since="2021-07-01", until="2021-07-01") == {"File time"}
    assert await _titles(middle, since="30d") == {"Hand"}
    assert await _titles(middle, tags=["garden", "rust"]) == {"Dated"}
    assert await _titles(middle, kind="memory") == {"Hand"}
    assert await _titles(middle, cards_only=True) == {"Dated", "Created", "File time"}
    assert await _titles(middle, source="daily/**") == {"Dated", "Created"}
    assert await _titles(middle, source="old.md") == {"File time"}
    assert await _titles(middle, meta={"k": "v"}) == {"Hand"}
    assert await _titles(middle, source="daily/*", until="2023-12-31") == {"Created"}
    grouped = await middle.ok(p.MemorySearch(vault="notes", query="lantern", tags=["#Garden"]))
    assert [r.id for r in grouped.results] == [ids["Dated"]]
    cards = await middle.ok(p.MemoryList(vault="notes", kind="card", since="2022-01-01"))
    assert {r.title for r in cards.records} == {"Dated", "Created"}


async def test_the_mcp_tools_take_the_same_filters(middle: Middle, tmp_path: Path) -> None:
    ids = await _vault(middle, tmp_path)
    grant = await middle.ok(p.GrantCreate(vault="notes", client="test", scope=["search", "retrieve"], expires="1h"))
    token = str(grant.token)
    found = await middle.ok(p.Granted(token=token, call=p.ToolSearch(query="lantern", source="daily/**")))
    assert {r.id for r in found.results} == {ids["Dated"], ids["Created"]}
    retrieved = await middle.ok(
        p.Granted(token=token, call=p.ToolRetrieve(query="lantern", mode="bm25", since="2024-01-01", kind="card"))
    )
    assert [hit.asset_id for hit in retrieved.results] == [ids["Dated"]]
    with pytest.raises(MemoriesError) as malformed:
        await middle.ok(p.Granted(token=token, call=p.ToolRetrieve(query="lantern", until="next week")))
    assert malformed.value.code == "invalid_argument" and "until" in malformed.value.message


async def test_rag_ask_and_memory_ask_search_only_what_the_filter_admits(tmp_path: Path) -> None:
    generation = GenerationConfig(protocol="compatible", url="http://127.0.0.1:9/v1/chat/completions", model="m")
    async with running_middle(tmp_path, RagConfig(generation=generation)) as middle:
        await _vault(middle, tmp_path)
        asked: list[w.Generate] = []

        def generate(request: w.Generate) -> w.GeneratedText:
            asked.append(request)
            return w.GeneratedText(text='{"answer": "A lantern [S1].", "citations": ["S1"]}', structured_output="none")

        middle.fakes["remote"].handlers[w.Generate] = generate
        answer = await middle.ok(p.RagAsk(vault="notes", question="lantern", mode="bm25", source="old.md"))
        assert [c.title for c in answer.citations] == ["File time"]
        grant = await middle.ok(p.GrantCreate(vault="notes", client="test", scope=["ask"], expires="1h"))
        call = p.ToolAsk(question="lantern", mode="bm25", tags=["nowhere"])
        nothing = await middle.ok(p.Granted(token=str(grant.token), call=call))
        assert nothing.status == "insufficient_evidence" and len(asked) == 1  # nothing was sent for it


@pytest.mark.parametrize(
    ("filters", "named"),
    [
        ({"since": "yesterday-ish"}, "since"),
        ({"since": "2025-03-03", "until": "2025-03-01"}, "since"),
        ({"source": "../*"}, "source"),
        ({"meta": {"": "x"}}, "meta"),
        ({"tags": [" "]}, "tag"),
    ],
)
async def test_a_malformed_filter_is_invalid_argument_naming_it(
    middle: Middle, filters: dict[str, object], named: str
) -> None:
    for request in (
        p.RagSearch(vault="notes", query="lantern", **filters),  # type: ignore[arg-type]
        p.MemorySearch(vault="notes", query="lantern", **filters),  # type: ignore[arg-type]
        p.MemoryList(vault="notes", **filters),  # type: ignore[arg-type]
    ):
        with pytest.raises(MemoriesError) as error:
            await middle.ok(request)
        assert error.value.code == "invalid_argument" and named in error.value.message
