"""Every MCP protocol revision a client may send, on stdio and over HTTP, against a real daemon (issue 23,
acceptance 1): the four tools in one order with annotations and schemas, each call's structured content valid
against its tool's outputSchema, the instructions from the live state, an unknown version answered, progress
forwarded. One daemon (with fake embedding and generation services on loopback) and one HTTP server serve the
module; each stdio case starts its own ``mcp serve``. One test per transport and revision, so a failure names it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.fixtures.daemon import FAST_KDF, HomeDir, initialize
from tests.fixtures.mcp_client import grant
from tests.fixtures.mcp_wire import MODERN, REVISIONS, HttpServer, HttpWire, envelope, wire_for
from tests.fixtures.model_servers import ModelServer

TOOLS = ["memory_search", "memory_read", "memory_retrieve", "memory_ask"]
TRANSPORTS = ["stdio", "http"]


@dataclass
class Setup:
    home: HomeDir
    http: HttpServer
    token: str
    note: str
    model_server: ModelServer


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """A home whose daemon embeds and generates with the loopback fakes, a note, a grant of every tool, and
    ``mcp serve --http 0``. (A generation url that leaves the machine, which turns memory_ask's openWorldHint on,
    needs HTTPS to another host: tests/unit/test_mcp_server.py and tests/middle/test_tool_status.py cover it.)"""
    model_server = ModelServer()
    path = tmp_path_factory.mktemp("revisions") / "home"
    path.mkdir(mode=0o700)
    home = HomeDir(path)
    home.config.write_text(
        FAST_KDF
        + f"[rag.embedding]\nprotocol = 'compatible'\nurl = '{model_server.url('embeddings')}'\nmodel = 'fake'\n"
        + f"[rag.generation]\nprotocol = 'compatible'\nurl = '{model_server.url('chat')}'\n"
        + "model = 'fake-chat'\n"
    )
    try:
        initialize(home)
        note = home.ok("memory", "add", "notes", "--title", "备份", "--body", "Nightly backups run restic 到 NAS。")
        token = grant(home, "notes", "search,read,retrieve,ask")["token"]
        with HttpServer(home) as http:
            yield Setup(home, http, token, note["id"], model_server)
    finally:
        home.stop()
        model_server.close()


def _document(result: dict[str, Any]) -> dict[str, Any]:
    """The structured content of a successful call, checked against its text block."""
    assert not result.get("isError"), result
    assert len(result["content"]) == 1 and result["content"][0]["type"] == "text"
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    return result["structuredContent"]


@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_revision_lists_and_calls_every_tool(setup: Setup, transport: str, revision: str) -> None:
    wire = wire_for(transport, setup.home, setup.http, setup.token)
    opened = wire.open(revision)
    if revision == MODERN:
        assert opened["supportedVersions"] == [MODERN] and opened["resultType"] == "complete"
    else:
        assert opened["protocolVersion"] == revision
    assert 'This grant reaches the vault "notes" with memory_search, memory_read' in opened["instructions"]

    listing = wire.request("tools/list")
    tools = {tool["name"]: tool for tool in listing["tools"]}
    assert [tool["name"] for tool in listing["tools"]] == TOOLS
    for tool in listing["tools"]:
        assert tool["annotations"]["readOnlyHint"] is True and tool["annotations"]["destructiveHint"] is False
        assert tool["annotations"]["openWorldHint"] is False  # the generation service is on loopback
        assert tool["title"] and tool["inputSchema"]["type"] == "object" and tool["outputSchema"]["type"] == "object"
        assert "$ref" not in json.dumps(tool) and "$defs" not in json.dumps(tool)

    calls = {
        "memory_search": {"query": "restic"},
        "memory_read": {"id": setup.note},
        "memory_retrieve": {"query": "backups", "mode": "bm25"},
        "memory_ask": {"question": "when do backups run", "mode": "bm25"},
    }
    for name, arguments in calls.items():
        result = wire.request("tools/call", {"name": name, "arguments": arguments})
        if revision == MODERN:
            assert result["resultType"] == "complete"
        Draft202012Validator(tools[name]["outputSchema"]).validate(_document(result))
    error = wire.request("tools/call", {"name": "memory_search", "arguments": {"query": "x", "limit": "abc"}})
    assert error["isError"] and error["content"][0]["text"] == "invalid_argument: limit: expected an integer"
    if isinstance(wire, HttpWire):
        assert wire.session is not None or revision == MODERN
    else:
        wire.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_unknown_version_gets_a_clear_answer_and_the_server_goes_on(setup: Setup, transport: str) -> None:
    """initialize with a version the server does not know gets the newest handshake revision; a 2026-style
    request naming an unknown version gets -32022 with the supported list."""
    legacy = wire_for(transport, setup.home, setup.http, setup.token)
    assert legacy.open("1999-01-01")["protocolVersion"] == "2025-11-25"
    assert len(legacy.request("tools/list")["tools"]) == 4

    modern = wire_for(transport, setup.home, setup.http, setup.token)
    modern.version = MODERN
    params = {"_meta": envelope("2099-01-01")}
    if isinstance(modern, HttpWire):
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}
        response = modern.post(message, **{"MCP-Protocol-Version": "2099-01-01", "Mcp-Method": "tools/list"})
        answer = response.json()
        assert response.status_code == 400
    else:
        answer = modern.server.send("tools/list", params)
    assert answer["error"]["code"] == -32022
    assert answer["error"]["data"] == {"supported": [MODERN], "requested": "2099-01-01"}
    if isinstance(modern, HttpWire):
        modern.version = MODERN
        assert len(modern.request("tools/list")["tools"]) == 4
    else:
        assert len(modern.exchange("tools/list")[-1]["result"]["tools"]) == 4
        modern.close()
    if not isinstance(legacy, HttpWire):
        legacy.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_progress_reaches_a_client_that_asked_for_it(setup: Setup, transport: str) -> None:
    """A vector search embeds the vault's new chunks on demand; the daemon's progress of that job reaches the
    client as notifications/progress with its token, before the result."""
    setup.home.ok("memory", "add", "notes", "--title", f"new {transport}", "--body", f"a new note over {transport}")
    wire = wire_for(transport, setup.home, setup.http, setup.token)
    wire.open("2025-11-25")
    params = {"name": "memory_retrieve", "arguments": {"query": "note", "mode": "vector"}}
    found = wire.exchange("tools/call", {**params, "_meta": {"progressToken": "p-1"}})
    progress = [m["params"] for m in found[:-1] if m.get("method") == "notifications/progress"]
    assert progress and all(p["progressToken"] == "p-1" and p["message"].endswith(" chunks") for p in progress)
    assert _document(found[-1]["result"])["results"]
    if not isinstance(wire, HttpWire):
        wire.close()


def test_a_2026_call_whose_headers_disagree_with_its_body_is_refused(setup: Setup) -> None:
    wire = HttpWire(setup.http.url, setup.token)
    wire.version = MODERN
    params = {"name": "memory_search", "arguments": {"query": "x"}, "_meta": envelope(MODERN)}
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    response = wire.post(message, **{"Mcp-Name": "memory_read"})
    assert response.status_code == 400 and response.json()["error"]["code"] == -32020
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MODERN}
    missing = httpx.post(setup.http.url, json=message, headers=headers, timeout=60)  # no Mcp-Method
    assert missing.status_code == 400 and missing.json()["error"]["code"] == -32020
