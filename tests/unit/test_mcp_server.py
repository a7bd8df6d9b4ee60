"""The MCP server in process (memories/mcp/server.py, status.py): the SDK's own client in both protocol eras against
``build_server``, with a fake daemon socket (tests/fixtures/fake_daemon.py). The real daemon, the real transports
and each revision's wire are in tests/e2e/test_mcp_revisions.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp
import pytest

from memories import protocol as p
from memories.errors import MemoriesError
from memories.mcp.server import _StdioPeer, build_server
from tests.fixtures.fake_daemon import FakeDaemon, fake_daemon

ERAS = ["legacy", "2026-07-28"]

STATUS = p.ToolStatusReport(
    locked=False, generation="remote", vault="notes", scope=["search", "ask"], records=1234, model=True, embedded=0.5
)
FOUND = p.ToolSearchReport(results=[p.RecordHit("a" * 16, 1, "t", 0.5, [])], truncated=False, omitted=0)


def _answer(status: p.ToolStatusReport | MemoriesError = STATUS, result: Any = FOUND) -> Any:
    def answer(request: p.Request) -> Any:
        assert isinstance(request, p.Granted)
        if isinstance(request.call, p.ToolStatus):
            if isinstance(status, MemoriesError):
                raise status
            return status
        if isinstance(result, MemoriesError):
            raise result
        return result

    return answer


def _line(result: mcp.types.CallToolResult) -> str:
    """The one text block of an error result."""
    assert result.is_error and len(result.content) == 1 and isinstance(result.content[0], mcp.types.TextContent)
    return result.content[0].text


def _client(daemon: FakeDaemon, mode: str, token: str = "mem_token", remote: bool = False) -> mcp.Client:
    return mcp.Client(build_server(daemon.home, _StdioPeer(token, remote)), mode=mode)


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("remote", [False, True])
async def test_tools_describe_themselves(tmp_path: Path, mode: str, remote: bool) -> None:
    async with fake_daemon(tmp_path, _answer()) as daemon, _client(daemon, mode, remote=remote) as client:
        tools = (await client.list_tools()).tools
    assert [tool.name for tool in tools] == ["memory_search", "memory_read", "memory_retrieve", "memory_ask"]
    for tool in tools:
        hints = tool.annotations
        assert tool.title and hints is not None and hints.title == tool.title
        assert hints.read_only_hint is True and hints.destructive_hint is False
        assert hints.idempotent_hint is (tool.name != "memory_ask")
        assert hints.open_world_hint is (remote and tool.name == "memory_ask")
        assert tool.output_schema is not None and tool.input_schema["additionalProperties"] is False


@pytest.mark.parametrize("mode", ERAS)
async def test_a_call_is_one_granted_request_and_its_progress_reaches_the_client(tmp_path: Path, mode: str) -> None:
    """Progress frames become notifications/progress whose value always grows (a note alone, a retry being
    waited for, still moves it), with the daemon's note as the message."""
    frames = [
        p.Progress(job_id=1, done=2, total=8, unit="chunks"),
        p.Progress(job_id=1, done=2, total=8, unit="chunks", note="retrying in 1 s after HTTP 503 (attempt 2 of 3)"),
        p.Progress(job_id=1, done=8, total=8, unit="chunks"),
        p.Reply(result=FOUND, warnings=["searched in bm25 mode"]),
    ]
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, total, message))

    async with fake_daemon(tmp_path, _answer(result=frames)) as daemon, _client(daemon, mode) as client:
        result = await client.call_tool("memory_search", {"query": "x", "limit": "3"}, progress_callback=progress)
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["warnings"] == ["searched in bm25 mode"]
    call = daemon.requests[-1]
    assert call == p.Granted(token="mem_token", call=p.ToolSearch(query="x", limit=3))
    assert [message for _, _, message in seen] == [
        "2 of 8 chunks",
        "retrying in 1 s after HTTP 503 (attempt 2 of 3)",
        "8 of 8 chunks",
    ]
    values = [value for value, _, _ in seen]
    assert values == sorted(set(values)) and values[0] == 2 and values[-1] == 8


@pytest.mark.parametrize("mode", ERAS)
async def test_failures_are_one_line_tool_errors(tmp_path: Path, mode: str) -> None:
    refused = MemoriesError("scope_denied", "this grant allows search;\nmemory_ask is not among them")
    async with fake_daemon(tmp_path, _answer(result=refused)) as daemon, _client(daemon, mode) as client:
        denied = await client.call_tool("memory_ask", {"question": "x"})
        bad = await client.call_tool("memory_search", {"query": "x", "limit": 0})
    assert _line(denied) == "scope_denied: this grant allows search; memory_ask is not among them"
    assert _line(bad) == "invalid_argument: limit: must be at least 1"
    calls = [request.call for request in daemon.requests if isinstance(request, p.Granted)]
    assert [type(call) for call in calls if not isinstance(call, p.ToolStatus)] == [p.ToolAsk]  # the bad one stayed


async def test_without_a_token_no_call_reaches_the_daemon(tmp_path: Path) -> None:
    async with fake_daemon(tmp_path, _answer()) as daemon, _client(daemon, "legacy", token="") as client:
        result = await client.call_tool("memory_search", {"query": "x"})
    assert _line(result).startswith("grant_invalid: MEMORIES_GRANT_TOKEN is not set")
    assert daemon.requests == []  # not even for the instructions


@pytest.mark.parametrize(
    ("status", "lines"),
    [
        (
            STATUS,
            [
                'This grant reaches the vault "notes" with memory_search, memory_ask; 1,234 notes are searchable.',
                "Vector search: 50% of the vault's chunks have a vector; memory_retrieve uses BM25 while many are "
                "missing.",
                "memory_ask: answers with the user's generation service outside this machine, citing the notes it "
                "was shown.",
            ],
        ),
        (
            p.ToolStatusReport(locked=False, generation="none", vault="日记", scope=["ask"], records=1, model=True),
            [
                'This grant reaches the vault "日记" with memory_ask; 1 note is searchable.',
                "Vector search: unknown until the first search; memory_retrieve uses BM25 while it is not ready.",
                "memory_ask: not configured by the user; use memory_retrieve and answer from its chunks, citing their "
                "labels.",
            ],
        ),
        (
            p.ToolStatusReport(locked=True, generation="device"),
            ["The user's Memories home is locked: every call fails with vault_locked until the user unlocks it."],
        ),
        (
            MemoriesError("grant_revoked", "the grant was revoked"),
            ["This server holds no valid grant (grant_revoked): every call fails until the user gives it one."],
        ),
    ],
)
@pytest.mark.parametrize("mode", ERAS)
async def test_the_instructions_say_what_the_grant_reaches_now(
    tmp_path: Path, mode: str, status: p.ToolStatusReport | MemoriesError, lines: list[str]
) -> None:
    async with fake_daemon(tmp_path, _answer(status)) as daemon, _client(daemon, mode) as client:
        if mode == "legacy":
            instructions = client.session.initialize_result.instructions  # type: ignore[attr-defined]
        else:
            instructions = (await client.session.send_discover("2026-07-28"))["instructions"]
    assert instructions is not None
    assert instructions.splitlines()[1:] == lines
    assert daemon.requests == [p.Granted(token="mem_token", call=p.ToolStatus())]


async def test_with_no_daemon_the_instructions_say_so(tmp_path: Path) -> None:
    async with fake_daemon(tmp_path, _answer()) as daemon:
        home = daemon.home
    async with mcp.Client(build_server(home, _StdioPeer("mem_token", False)), mode="legacy") as client:
        instructions = client.session.initialize_result.instructions  # type: ignore[attr-defined]
        result = await client.call_tool("memory_search", {"query": "x"})
    assert instructions.splitlines()[1].startswith("The Memories daemon is not running")
    assert _line(result).startswith("daemon_not_running: ")
