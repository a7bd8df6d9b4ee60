"""Issue 20, acceptance 3 end to end: the filters as the CLI and an MCP client give them, on notes whose dates come
from front matter, file times and revisions, the matching notes below the unfiltered top k in bm25 and, with the
tiny model, in vector and hybrid through MCP; the ranking under each filter and combinations in every mode is tested
in tests/unit/test_filters.py and the daemon's wiring in tests/middle/test_filters.py."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from tests.fixtures.daemon import HomeDir, initialize, with_hooks
from tests.fixtures.mcp_client import call, grant, mcp_session
from tests.fixtures.tiny_model import TinyModel


def _notes(home: HomeDir, tmp_path: Path) -> None:
    folder = tmp_path / "Obsidian"
    (folder / "daily").mkdir(parents=True)
    for number in range(12):  # outrank the dated notes for "lantern" in the unfiltered top 10
        (folder / f"decoy{number:02}.md").write_text(f"# Decoy {number}\n\nlantern lantern lantern lantern\n")
    (folder / "daily" / "fm.md").write_text(
        "---\ndate: 2024-05-01\ntags: [garden]\nstatus: done\n---\n# Dated\n\na lantern among many other words\n"
    )
    old = folder / "daily" / "old.md"
    old.write_text("# File time\n\na lantern in an old file, among many other words\n")
    moment = datetime.datetime(2021, 7, 1, 12).timestamp()
    os.utime(old, (moment, moment))
    home.ok("rag", "ingest", "notes", str(folder), "--recursive")


def test_the_cli_filters_every_search_and_the_listing(vault: HomeDir, tmp_path: Path) -> None:
    _notes(vault, tmp_path)

    def titles(*args: str) -> list[str]:
        found = vault.ok("rag", "search", "notes", "lantern", "--mode", "bm25", "--limit", "10", *args)["results"]
        return [hit["title"] for hit in found]

    assert "Dated" not in titles() and "File time" not in titles()
    assert titles("--since", "2024-01-01", "--until", "2024-12-31") == ["Dated"]
    assert titles("--tag", "Garden") == ["Dated"]
    assert titles("--source", "daily/**", "--limit", "1") in (["Dated"], ["File time"])
    assert sorted(titles("--source", "daily/**")) == ["Dated", "File time"]
    assert titles("--until", "2021-07-01") == ["File time"]
    assert titles("--kind", "memory") == [] and len(titles("--cards-only")) == 10
    grouped = vault.ok("memory", "search", "notes", "lantern", "--source", "*/old.md")["results"]
    assert [record["title"] for record in grouped] == ["File time"]
    listing = vault.run("memory", "list", "notes", "--until", "2022-01-01", json_output=False)
    assert "File time" in listing.stdout and "2021-07-01" in listing.stdout and "Decoy" not in listing.stdout
    refused = vault.fails("invalid_argument", "rag", "search", "notes", "lantern", "--since", "soon")
    assert "since" in refused["message"]
    vault.fails("invalid_argument", "memory", "list", "notes", "--source", "../*")
    vault.fails("usage_error", "rag", "search", "notes", "lantern", "--meta", "no-equals-sign", exit_status=2)


async def test_an_mcp_client_gives_the_same_filters(vault: HomeDir, tmp_path: Path) -> None:
    _notes(vault, tmp_path)
    token = grant(vault, "notes", "search,retrieve")["token"]
    async with mcp_session(vault, token) as session:
        tools = {tool.name: tool.input_schema["properties"] for tool in (await session.list_tools()).tools}
        for name in ("memory_search", "memory_retrieve", "memory_ask"):
            assert {"since", "until", "tags", "kind", "source", "meta"} <= set(tools[name]), name
        error, found = await call(
            session, "memory_retrieve", {"query": "lantern", "mode": "bm25", "since": "2024-01-01", "tags": ["garden"]}
        )
        assert not error and [hit["title"] for hit in found["results"]] == ["Dated"]
        error, found = await call(session, "memory_search", {"query": "lantern", "meta": {"source": "daily/old.md"}})
        assert not error and [record["title"] for record in found["results"]] == ["File time"]
        error, line = await call(session, "memory_retrieve", {"query": "lantern", "source": "/etc/**"})
        assert error and line.startswith("invalid_argument") and "source" in line


async def test_an_mcp_client_filters_vector_and_hybrid_searches_before_the_top_k(
    home: HomeDir, tiny_model: TinyModel, tmp_path: Path
) -> None:
    """The in-process model (the tiny one) embeds the notes; through an MCP client, a filter admits the two dated
    notes in vector and hybrid mode, with a limit of 2, where the unfiltered top 2 are decoys."""
    home.config.write_text(home.config.read_text() + "[rag]\nlocal_threads = 1\nauto_index = 'off'\n")
    with_hooks(home, model_manifest=str(tiny_model.manifest_path))
    initialize(home)
    home.ok("rag", "model-install", "--from", str(tiny_model.model_dir))
    _notes(home, tmp_path)
    assert home.ok("rag", "index", "notes")["missing"] == 0
    token = grant(home, "notes", "retrieve")["token"]
    async with mcp_session(home, token) as session:
        for mode in ("vector", "hybrid"):
            error, top = await call(session, "memory_retrieve", {"query": "lantern", "mode": mode, "limit": 2})
            assert not error and {hit["title"] for hit in top["results"]} <= {f"Decoy {n}" for n in range(12)}, mode
            error, found = await call(
                session, "memory_retrieve", {"query": "lantern", "mode": mode, "limit": 2, "source": "daily/**"}
            )
            assert not error and {hit["title"] for hit in found["results"]} == {"Dated", "File time"}, mode
