"""``memories mcp serve`` driven by MCP clients this project did not write (issue 23, acceptance 2): the official MCP
Inspector CLI over stdio (and HTTP with a bearer header, and in the 2026-07-28 era), and the official conformance
suite's scenarios that apply to a tools-only server, against the HTTP endpoint.

The clients are Node packages pinned by ``tests/package.json`` and its lock, with Node 22 itself; ``.ci/run``
installs them with ``npm ci`` into a temporary folder and names its ``node_modules/.bin`` in
``MEMORIES_MCP_CLIENTS``. Without it these tests are skipped (a developer's ``pytest`` needs no Node).

Conformance scenarios run (docs/guide/mcp.md, "Tested with independent clients"): ``server-initialize``,
``ping``, ``tools-list``, ``tools-call-error`` (an unknown tool answered as a tool error),
``dns-rebinding-protection`` and ``server-sse-multiple-streams``. The suite cannot send a bearer token and the
endpoint answers a token-less ``initialize`` 401, so it talks through a loopback proxy that adds the grant's
(:class:`~tests.fixtures.mcp_wire.BearerProxy`, transparent to ``Host`` and ``Origin``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import FAST_KDF, HomeDir, initialize, memories_executable
from tests.fixtures.mcp_client import grant
from tests.fixtures.mcp_wire import BearerProxy, HttpServer
from tests.fixtures.model_servers import ModelServer

CLIENTS = os.environ.get("MEMORIES_MCP_CLIENTS", "")

pytestmark = pytest.mark.skipif(
    not CLIENTS, reason="MEMORIES_MCP_CLIENTS is not set: .ci/run installs the Node clients (tests/package.json)"
)

SCENARIOS = (
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-error",
    "dns-rebinding-protection",
    "server-sse-multiple-streams",
)
"""The conformance scenarios that apply to a tools-only server; docs/guide/mcp.md lists the others and why not."""

TOOLS = ["memory_search", "memory_read", "memory_retrieve", "memory_ask"]


@dataclass
class Clients:
    home: HomeDir
    http: HttpServer
    token: str
    note: str
    scratch: Path

    def run(self, program: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``program`` of the installed clients, with Node 22 first on PATH and a scratch HOME (the Inspector keeps
        a catalog and secrets there)."""
        env = {
            "PATH": f"{CLIENTS}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(self.scratch),
            "NO_COLOR": "1",
        }
        return subprocess.run(
            [os.path.join(CLIENTS, program), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.scratch,
            timeout=timeout,
        )

    def inspect(self, *args: str, era: str = "legacy") -> tuple[int, Any]:
        """The Inspector CLI against ``memories mcp serve`` on stdio: its exit status and its JSON output."""
        done = self.run(
            "mcp-inspector",
            "--cli",
            "--format",
            "json",
            "--protocol-era",
            era,
            "-e",
            f"MEMORIES_HOME={self.home.path}",
            "-e",
            f"MEMORIES_GRANT_TOKEN={self.token}",
            *args,
            memories_executable(),
            "mcp",
            "serve",
        )
        return done.returncode, json.loads(done.stdout or "null")


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clients]:
    model_server = ModelServer()
    root = tmp_path_factory.mktemp("clients")
    (root / "home").mkdir(mode=0o700)
    (root / "scratch").mkdir()
    home = HomeDir(root / "home")
    home.config.write_text(
        FAST_KDF + f"[rag.generation]\nprotocol = 'compatible'\nurl = '{model_server.url('chat')}'\nmodel = 'm'\n"
    )
    try:
        initialize(home)
        note = home.ok("memory", "add", "notes", "--title", "备份", "--body", "Nightly backups run restic 到 NAS。")
        token = grant(home, "notes", "search,read,retrieve,ask")["token"]
        with HttpServer(home) as http:
            yield Clients(home, http, token, note["id"], root / "scratch")
    finally:
        home.stop()
        model_server.close()


def test_the_inspector_cli_lists_and_calls_every_tool_and_reads_an_error(clients: Clients) -> None:
    """``--strict`` also checks each tool schema's portability across clients (exit 6 for an error)."""
    code, listing = clients.inspect("--method", "tools/list", "--strict")
    assert code == 0, listing
    assert [tool["name"] for tool in listing["result"]["tools"]] == TOOLS
    calls = {
        "memory_search": {"query": "restic"},
        "memory_read": {"id": clients.note},
        "memory_retrieve": {"query": "backups", "mode": "bm25"},
        "memory_ask": {"question": "when do backups run", "mode": "bm25"},
    }
    for name, arguments in calls.items():
        code, called = clients.inspect(
            "--method", "tools/call", "--tool-name", name, "--tool-args-json", json.dumps(arguments)
        )
        assert code == 0 and called["result"]["isError"] is False, (name, called)
        assert called["result"]["structuredContent"] == json.loads(called["result"]["content"][0]["text"])
    code, refused = clients.inspect(
        "--method", "tools/call", "--tool-name", "memory_read", "--tool-args-json", '{"id": "x", "colour": "red"}'
    )
    assert code == 5 and refused["result"]["isError"] is True  # 5: the tool returned isError
    assert refused["result"]["content"][0]["text"].startswith("invalid_argument: colour: unknown argument")


def test_the_inspector_cli_speaks_2026_07_28_and_http_with_a_bearer_header(clients: Clients) -> None:
    code, listing = clients.inspect("--method", "tools/list", era="modern")
    assert code == 0 and [tool["name"] for tool in listing["result"]["tools"]] == TOOLS
    for era in ("legacy", "modern"):
        done = clients.run(
            "mcp-inspector",
            "--cli",
            "--format",
            "json",
            "--protocol-era",
            era,
            "--header",
            f"Authorization: Bearer {clients.token}",
            "--method",
            "tools/call",
            "--tool-name",
            "memory_search",
            "--tool-args-json",
            '{"query": "restic"}',
            clients.http.url,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["result"]["structuredContent"]["results"][0]["id"] == clients.note


def test_the_conformance_scenarios_of_a_tools_only_server_pass(clients: Clients) -> None:
    with BearerProxy(clients.http, clients.token) as proxy:
        for scenario in SCENARIOS:
            out = clients.scratch / "conformance" / scenario
            done = clients.run(
                "conformance", "server", "--url", proxy.url, "--scenario", scenario, "--output-dir", str(out)
            )
            assert done.returncode == 0, (scenario, done.stdout[-3000:], done.stderr[-3000:])
            checks = [check for path in out.rglob("checks.json") for check in json.loads(path.read_text())]
            assert checks and all(check["status"] == "SUCCESS" for check in checks), (scenario, checks)
