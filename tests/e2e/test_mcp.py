"""``memories mcp serve`` end to end with a real MCP client session over stdio from the SDK (issue 9)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from memories.caps import MAX_ANSWER_TOKENS, MAX_RESULT_CHARS, MAX_RESULT_TOKENS, cost_of
from tests.fixtures.daemon import PASSPHRASE, HomeDir, initialize, memories_executable, with_hooks
from tests.fixtures.mcp_client import RawServer, call, grant, mcp_session
from tests.fixtures.model_servers import ModelServer, Reply

TOOL_NAMES = {"memory_search", "memory_read", "memory_retrieve", "memory_ask"}


def _with_generation(home: HomeDir, server: ModelServer) -> HomeDir:
    """A home whose daemon calls the loopback fake for ``rag ask`` / ``memory_ask``."""
    home.config.write_text(
        home.config.read_text()
        + f"[rag.generation]\nprotocol = 'compatible'\nurl = '{server.url('chat')}'\nmodel = 'fake-chat'\n"
    )
    return home


def _add(home: HomeDir, vault: str, title: str, body: str, *extra: str) -> str:
    return home.ok("memory", "add", vault, "--title", title, "--body", body, *extra)["id"]


def _within_cap(document: object) -> None:
    cost = cost_of(document)
    assert cost.tokens <= MAX_RESULT_TOKENS and cost.chars <= MAX_RESULT_CHARS, cost


# -- acceptance 1: the session, the schemas, each tool ------------------------------------------------------


async def test_initialize_lists_the_tools_and_each_works(vault: HomeDir) -> None:
    note = _add(vault, "notes", "农业 笔记", "中国农业发展银行的贷款笔记。\n\n第二段：数据库迁移。")
    token = grant(vault, "notes", "search,read,retrieve")["token"]
    async with mcp_session(vault, token) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == TOOL_NAMES
        for tool in tools.values():
            schema = tool.input_schema
            assert schema["type"] == "object" and schema["additionalProperties"] is False
            assert "vault" not in schema["properties"]
        assert tools["memory_search"].input_schema["required"] == ["query"]
        assert tools["memory_read"].input_schema["required"] == ["id"]

        error, found = await call(session, "memory_search", {"query": "农业"})
        assert not error and found["results"][0]["id"] == note and found["truncated"] is False
        assert found["results"][0]["chunks"][0]["label"] == "S1"
        error, chunks = await call(session, "memory_retrieve", {"query": "数据库", "mode": "bm25", "limit": 3})
        assert not error and chunks["mode"] == "bm25" and chunks["results"][0]["asset_id"] == note
        hit = chunks["results"][0]
        assert {"label", "revision", "chunk_hash", "byte_start", "byte_end", "text"} <= set(hit)
        error, page = await call(session, "memory_read", {"id": note, "offset": hit["byte_start"]})
        assert not error and page["next_offset"] is None and page["truncated"] is False
        body = "中国农业发展银行的贷款笔记。\n\n第二段：数据库迁移。".encode()
        assert page["text"].encode() == body[hit["byte_start"] :] and page["total_bytes"] == len(body)


@pytest.mark.fresh_install
async def test_a_fresh_environment_from_the_package_metadata_serves_mcp(
    home: HomeDir, model_server: ModelServer, tmp_path: Path, repo_root: Path
) -> None:
    """The package's declared dependencies alone bring the SDK: a new virtual environment, `pip install .`."""
    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(fresh)], check=True)
    subprocess.run(
        [str(fresh / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(repo_root)],
        check=True,
        timeout=900,
    )
    initialize(_with_generation(home, model_server))
    note = _add(home, "notes", "fresh", "a note read through a fresh install")
    token = grant(home, "notes", "search,read,retrieve,ask")["token"]
    async with mcp_session(home, token, command=str(fresh / "bin" / "memories")) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOL_NAMES
        assert (await call(client, "memory_search", {"query": "fresh"}))[1]["results"][0]["id"] == note
        assert (await call(client, "memory_retrieve", {"query": "install"}))[1]["results"][0]["asset_id"] == note
        assert (await call(client, "memory_read", {"id": note}))[1]["text"].startswith("a note")
        answer = (await call(client, "memory_ask", {"question": "fresh install", "mode": "bm25"}))[1]
        assert answer["status"] == "answered" and answer["citations"][0]["asset_id"] == note


# -- acceptance 2: stdout carries JSON-RPC only ---------------------------------------------------------------


def _all_json_rpc(lines: list[str]) -> None:
    assert lines
    for line in lines:
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0", line


def test_stdout_is_json_rpc_only_cold_locked_and_with_debug_logs(vault: HomeDir) -> None:
    note = _add(vault, "notes", "t", "cold start body")
    token = grant(vault, "notes", "search,read")["token"]
    vault.ok("daemon", "stop")
    vault.start()  # a cold daemon: nothing cached, no model installed
    vault.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    server = RawServer(vault, token, MEMORIES_DEBUG="1")
    assert server.initialize()["result"]["protocolVersion"] == "2025-11-25"
    assert {t["name"] for t in server.send("tools/list")["result"]["tools"]} == TOOL_NAMES
    found = server.call("memory_search", {"query": "cold"})
    assert not found["isError"] and json.loads(found["content"][0]["text"])["results"][0]["id"] == note
    vault.ok("lock")
    locked = server.call("memory_read", {"id": note})
    assert locked["isError"] and locked["content"][0]["text"].startswith("vault_locked: ")
    again = server.call("memory_search", {"query": "cold"})  # the next call is still answered
    assert again["isError"] and again["content"][0]["text"].startswith("vault_locked: ")
    code, stderr = server.close()
    assert code == 0
    _all_json_rpc(server.lines)
    assert "memories.mcp" in stderr  # MEMORIES_DEBUG logs went to stderr, not stdout


def test_no_daemon_every_call_says_daemon_not_running(home: HomeDir) -> None:
    server = RawServer(home, "mem_" + "A" * 43)
    server.initialize()
    for _ in range(2):
        result = server.call("memory_search", {"query": "x"})
        text = result["content"][0]["text"]
        assert result["isError"] and text.startswith("daemon_not_running: ")
        assert "memories daemon start" in text and "memories unlock" in text
    code, _ = server.close()
    assert code == 0
    _all_json_rpc(server.lines)
    assert not (home.path / "run" / "daemon.lock").exists() or home.run("daemon", "status").code != 0


def test_without_a_token_the_server_starts_and_every_call_is_grant_invalid(vault: HomeDir) -> None:
    server = RawServer(vault, None)
    server.initialize()
    result = server.call("memory_search", {"query": "x"})
    assert result["isError"] and result["content"][0]["text"].startswith("grant_invalid: MEMORIES_GRANT_TOKEN")
    assert server.close()[0] == 0


def test_a_token_that_is_not_utf8_is_grant_invalid_like_any_malformed_one(vault: HomeDir) -> None:
    server = RawServer(vault, "mem_\udcff\udcfe" + "A" * 41)  # the bytes 0xff 0xfe in the environment
    server.initialize()
    result = server.call("memory_search", {"query": "x"})
    assert result["isError"] and result["content"][0]["text"].startswith("grant_invalid: the grant token is not valid")
    assert server.close()[0] == 0


def test_a_request_the_sdk_cannot_read_is_answered_and_the_server_reads_on(home: HomeDir) -> None:
    """A lone surrogate escape in an argument (the SDK's strict JSON parser refuses it) and a line that is not
    JSON each get a JSON-RPC error; a notification gets none; the next request is answered."""
    server = RawServer(home, "mem_" + "A" * 43)
    server.initialize()

    def search(request_id: int, query: str) -> str:  # json.dumps writes a lone surrogate as its escape, "\\ud800"
        params = {"name": "memory_search", "arguments": {"query": query}}
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})

    server.write(search(100, "\ud800 数据库"))
    server.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"reason": "\udc00"}}))
    server.write("not json")
    server.write(search(101, "x"))
    refused, not_json, answered = server.answers_until(101)
    assert refused["id"] == 100 and refused["error"]["code"] == -32600
    message = refused["error"]["message"]
    assert message.startswith("invalid_argument: the request is not valid JSON text: a string is not valid Unicode")
    assert not_json["id"] is None and not_json["error"]["code"] == -32700
    assert not_json["error"]["message"].startswith("protocol_error: the message is not JSON")
    assert answered["result"]["isError"] and answered["result"]["content"][0]["text"].startswith("daemon_not_running")
    code, _ = server.close()
    assert code == 0
    _all_json_rpc(server.lines)


# -- acceptance 3 and 4, what a grant reaches, revoke and expiry: tests/middle/test_grant_calls.py ---------------


# -- acceptance 5: argument decoding ----------------------------------------------------------------------------


async def test_arguments_are_decoded_strictly(vault: HomeDir) -> None:
    for i in range(7):
        _add(vault, "notes", f"农业 {i}", f"农业 笔记 {i}")
    token = grant(vault, "notes", "search,read,retrieve")["token"]
    async with mcp_session(vault, token) as session:
        as_string = await call(session, "memory_search", {"query": "农业", "limit": "5"})
        as_number = await call(session, "memory_search", {"query": "农业", "limit": 5})
        assert as_string == as_number and len(as_string[1]["results"]) == 5
        for bad in ("abc", True, 5.5, [5]):
            error, line = await call(session, "memory_search", {"query": "农业", "limit": bad})
            assert error and line == "invalid_argument: limit: expected an integer"
        error, line = await call(session, "memory_search", {"query": "农业", "limit": "1000"})
        assert error and line.startswith("limit_too_large: ")
        error, line = await call(session, "memory_search", {"query": "农业", "limit": 0})
        assert error and line == "invalid_argument: limit: must be at least 1"
        error, line = await call(session, "memory_search", {"query": "农业", "colour": "red"})
        assert error and line.startswith("invalid_argument: colour: unknown argument")
        error, line = await call(session, "memory_search", {})
        assert error and line == "invalid_argument: query: required"
        error, line = await call(session, "memory_retrieve", {"query": "农业", "mode": "magic"})
        assert error and line == "invalid_argument: mode: expected one of bm25, vector, hybrid"
        error, line = await call(session, "memory_retrieve", {"query": "农业", "cards_only": "yes"})
        assert error and line == "invalid_argument: cards_only: expected true or false"
        error, line = await call(session, "memory_search", {"query": "农" * 400})
        assert error and line.startswith("query_too_long: ")
        error, line = await call(session, "memory_read", {"id": "x", "offset": -1})
        assert error and line == "invalid_argument: offset: must be at least 0"
        error, line = await call(session, "memory_read", {"id": "x" * 100_000})
        assert error and line == "invalid_argument: id: expected a record id"
        error, line = await call(session, "memory_search", {"query": "q", "k" * 100_000: 1})
        assert error and line.startswith("invalid_argument: 'kkk") and len(line) < 200


# -- acceptance 6: result caps ----------------------------------------------------------------------------------


async def test_big_notes_page_and_wide_searches_stay_within_the_cap(vault: HomeDir, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    paragraph = "农业发展银行支持乡村振兴，数据库迁移记录第{n}段。" * 8
    big = "\n\n".join(paragraph.format(n=n) for n in range(560))
    assert 300_000 <= len(big.encode()) <= 330_000
    (folder / "big.md").write_text(big)
    for n in range(500):
        (folder / f"small-{n:03}.md").write_text(f"# 小笔记 {n}\n\n农业 数据库 笔记 {n}：" + "乡村振兴。" * 30)
    vault.ok("rag", "ingest", "notes", str(folder), "--recursive")
    token = grant(vault, "notes", "search,read,retrieve")["token"]
    big_id = next(r["id"] for r in vault.ok("memory", "list", "notes")["records"] if r["title"] == "big.md")
    async with mcp_session(vault, token) as session:
        pages, offset = [], 0
        while offset is not None:
            error, page = await call(session, "memory_read", {"id": big_id, "offset": offset})
            assert not error and page["offset"] == offset and page["total_bytes"] == len(big.encode())
            _within_cap(page)
            pages.append(page["text"])
            offset = page["next_offset"]
        assert "".join(pages) == big and len(pages) > 1
        assert all(page for page in pages)
        for tool in ("memory_search", "memory_retrieve"):
            error, document = await call(session, tool, {"query": "农业 数据库", "limit": 100})
            assert not error and document["truncated"] is True and document["omitted"] > 0
            assert 0 < len(document["results"]) < 100
            _within_cap(document)


async def test_rag_ask_and_memory_ask_cut_a_long_answer_alike_and_say_so(
    home: HomeDir, model_server: ModelServer
) -> None:
    long_answer = "Restic runs nightly [S1]. " + "农" * 20_000
    model_server.answer = lambda body: json.dumps({"answer": long_answer, "citations": ["S1"]}, ensure_ascii=False)
    initialize(_with_generation(home, model_server))
    _add(home, "notes", "Backups", "Nightly backups run restic to the NAS.")
    token = grant(home, "notes", "ask")["token"]

    human = home.run("rag", "ask", "notes", "restic backups", "--mode", "bm25", json_output=False)
    cli = home.ok("rag", "ask", "notes", "restic backups", "--mode", "bm25")
    async with mcp_session(home, token) as session:
        error, tool = await call(session, "memory_ask", {"question": "restic backups", "mode": "bm25"})

    assert cli["answer_truncated"] is True and cli["answer"].startswith("Restic runs nightly [S1]. 农")
    assert cli["answer"].endswith("…") and cost_of(cli["answer"]).tokens == MAX_ANSWER_TOKENS
    assert not error and tool["answer"] == cli["answer"] and tool["answer_truncated"] is True
    assert tool["truncated"] is True and tool["citations"][0]["text"] == cli["citations"][0]["text"]
    assert human.code == 0 and human.stdout.startswith(cli["answer"] + "\n(answer cut: the service wrote more than ")


# -- acceptance 7: the process ends with its input ------------------------------------------------------------


def test_serve_with_empty_stdin_exits_zero(home: HomeDir) -> None:
    done = subprocess.run(
        [memories_executable(), "mcp", "serve"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env={**os.environ, "MEMORIES_HOME": str(home.path)},
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == b""


def test_closing_stdin_during_a_slow_memory_ask_cancels_its_job(home: HomeDir, model_server: ModelServer) -> None:
    initialize(_with_generation(home, model_server))
    _add(home, "notes", "slow", "a slow search")
    model_server.script("chat", Reply(delay=20))
    token = grant(home, "notes", "ask")["token"]
    server = RawServer(home, token)
    server.initialize()
    request = {"jsonrpc": "2.0", "id": 99, "method": "tools/call"}
    request["params"] = {"name": "memory_ask", "arguments": {"question": "slow search", "mode": "bm25"}}
    assert server.process.stdin is not None
    server.process.stdin.write(json.dumps(request).encode() + b"\n")
    server.process.stdin.flush()
    home.wait_for(lambda: model_server.calls("chat"), what="the generation request")
    code, _ = server.close(timeout=60)
    assert code == 0
    jobs = home.wait_for(
        lambda: [j for j in home.ok("jobs")["jobs"] if j["state"] == "cancelled"] or None, what="a cancelled job"
    )
    assert jobs[0]["kind"] == "ask"


async def test_the_client_cancelling_a_call_cancels_its_job(home: HomeDir) -> None:
    with_hooks(home, step_delay_seconds={"IndexQuery": 30})
    initialize(home)
    _add(home, "notes", "slow", "a slow search")
    token = grant(home, "notes", "search,read")["token"]
    async with mcp_session(home, token) as session, trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def slow() -> None:
            with scope:  # cancelling the call makes the SDK send notifications/cancelled
                await session.call_tool("memory_search", {"query": "slow"})

        nursery.start_soon(slow)
        running = lambda: any(j["state"] == "running" for j in home.ok("jobs")["jobs"])  # noqa: E731
        await trio.to_thread.run_sync(lambda: home.wait_for(running, timeout=60, what="the search job"))
        scope.cancel()
        cancelled = lambda: [j for j in home.ok("jobs")["jobs"] if j["state"] == "cancelled"]  # noqa: E731
        jobs = await trio.to_thread.run_sync(lambda: home.wait_for(cancelled, timeout=60, what="a cancelled job"))
        assert jobs[0]["kind"] == "search"
        error, line = await call(session, "memory_read", {"id": "0000000000000000"})  # the session goes on
        assert error and line.startswith("record_not_found: "), line


def test_killing_the_parent_leaves_no_server_behind(home: HomeDir) -> None:
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; child = subprocess.Popen([sys.argv[1], 'mcp', 'serve'], stdin=subprocess.PIPE);"
            " print(child.pid, flush=True); child.wait()",
            memories_executable(),
        ],
        stdout=subprocess.PIPE,
        env={**os.environ, "MEMORIES_HOME": str(home.path)},
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


# -- the SDK loads for mcp serve only ------------------------------------------------------------------------

_PROBE = (
    "import atexit, sys\n"
    "heavy = ('numpy', 'rjieba', 'jieba', 'onnxruntime', 'tokenizers', 'opencc')\n"
    "atexit.register(lambda: sys.stderr.write(' '.join(m for m in heavy if m in sys.modules)))\n"
    "atexit.register(lambda: sys.stderr.write('MCP-LOADED' if 'mcp' in sys.modules else 'MCP-ABSENT'))\n"
    "sys.argv = ['memories', *sys.argv[1:]]\n"
    "from memories.cli import main\n"
    "main()\n"
)


@pytest.mark.parametrize(
    "args",
    [
        ["vault", "list", "--json"],
        ["grant", "list", "--json"],
        ["memory", "search", "notes", "x", "--json"],
        ["inject", "--help"],
        ["mcp", "--help"],
        ["daemon", "status", "--json"],
    ],
)
def test_other_commands_never_import_the_sdk(vault: HomeDir, args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        env={**os.environ, "MEMORIES_HOME": str(vault.path)},
        timeout=60,
    )
    assert done.stderr.decode().endswith("MCP-ABSENT"), done.stderr


def test_mcp_serve_is_a_thin_client(home: HomeDir) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "mcp", "serve"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env={**os.environ, "MEMORIES_HOME": str(home.path)},
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == b""
    assert done.stderr.decode() == "MCP-LOADED", done.stderr  # and none of the heavy modules
