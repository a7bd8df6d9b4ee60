"""``memories inject`` against fake client homes (issue 9, acceptance 8): configs merged, never replaced."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import tomlkit

from memories.clients import TOKEN_ENV
from memories.skill import bundled_skill
from tests.fixtures.daemon import HomeDir, initialize
from tests.fixtures.mcp_client import call, mcp_session
from tests.fixtures.mcp_wire import HttpServer, HttpWire

START = {"mcpServers": {"other": {"command": "x"}}, "preferences": {"theme": "dark"}}

CODEX = """# my Codex settings
model = "o3"  # the model I use

[mcp_servers.other]  # another server
command = "x"
"""

VSCODE = """// VS Code user MCP servers
{
  "servers": {
    "other": {"type": "stdio", "command": "x"}, // keep me
  },
  /* inputs */ "inputs": []
}
"""


@pytest.fixture
def clients(vault: HomeDir, tmp_path: Path) -> tuple[HomeDir, Path]:
    """A fake HOME holding Claude Code, Codex, Cursor and VS Code configs (inject all finds them installed)."""
    fake = tmp_path / "fake-home"
    (fake / ".claude").mkdir(parents=True)
    (fake / ".cursor").mkdir()
    (fake / "codex").mkdir()
    (fake / "xdg" / "Code" / "User").mkdir(parents=True)
    (fake / ".claude.json").write_text(json.dumps(START))
    (fake / "codex" / "config.toml").write_text(CODEX)
    (fake / "xdg" / "Code" / "User" / "mcp.json").write_text(VSCODE)
    vault.env.update(HOME=str(fake), CODEX_HOME=str(fake / "codex"), XDG_CONFIG_HOME=str(fake / "xdg"))
    return vault, fake


def _inject(home: HomeDir, *extra: str) -> dict:
    return home.ok("inject", "all", "--vault", "notes", "--scope", "search,read", *extra)


def test_two_forced_runs_keep_everything_else_and_one_entry(clients: tuple[HomeDir, Path]) -> None:
    home, fake = clients
    first = _inject(home, "--force")
    second = _inject(home, "--force")
    statuses = {row["client"]: row["status"] for row in second["clients"]}
    assert statuses == {
        "claude-code": "configured",
        "codex": "configured",
        "cursor": "configured",
        "vscode": "configured",
        "claude-desktop": "skipped",
    }
    claude = json.loads((fake / ".claude.json").read_text())
    assert claude["preferences"] == {"theme": "dark"}
    assert claude["mcpServers"]["other"] == {"command": "x"}
    assert sorted(claude["mcpServers"]) == ["memories", "other"]
    entry = claude["mcpServers"]["memories"]
    assert entry["type"] == "stdio" and entry["args"] == ["mcp", "serve"]
    assert os.path.isabs(entry["command"]) and os.access(entry["command"], os.X_OK)
    assert entry["env"]["MEMORIES_HOME"] == str(home.path)
    assert stat.S_IMODE((fake / ".claude.json").stat().st_mode) == 0o600
    assert (fake / ".claude.json.memories-backup").exists()

    codex = (fake / "codex" / "config.toml").read_text()
    assert "# my Codex settings" in codex and "# the model I use" in codex and "# another server" in codex
    parsed = tomlkit.parse(codex).unwrap()
    assert sorted(parsed["mcp_servers"]) == ["memories", "other"]
    assert parsed["mcp_servers"]["memories"]["env"][TOKEN_ENV].startswith("mem_")

    vscode = (fake / "xdg" / "Code" / "User" / "mcp.json").read_text()
    for comment in ("// VS Code user MCP servers", "// keep me", "/* inputs */"):
        assert comment in vscode
    assert vscode.count('"memories"') == 1 and '"type": "stdio"' in vscode

    # Each run made one grant per client and revoked the one it replaced.
    grants = home.ok("grant", "list")["grants"]
    first_ids = {row["grant"] for row in first["clients"] if row.get("grant")}
    second_ids = {row["grant"] for row in second["clients"] if row.get("grant")}
    states = {g["id"]: g["state"] for g in grants}
    assert all(states[i] == "revoked" for i in first_ids) and all(states[i] == "active" for i in second_ids)
    assert {g["client"] for g in grants} == {"claude-code", "codex", "cursor", "vscode"}
    for folder in (".claude", ".agents", ".cursor", ".copilot"):
        assert (fake / folder / "skills" / "memories" / "SKILL.md").read_text() == bundled_skill()


def test_a_relative_codex_home_is_refused_and_nothing_is_written_where_inject_runs(
    clients: tuple[HomeDir, Path], tmp_path: Path
) -> None:
    home, fake = clients
    home.env["CODEX_HOME"] = "codex"  # Codex would resolve it from the folder it starts in, not this one
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    result = home.run("inject", "all", "--vault", "notes", "--scope", "search", cwd=elsewhere)

    assert result.code == 3, result.stderr  # the other clients were configured
    rows = {row["client"]: row for row in result.doc["clients"]}
    assert rows["codex"]["status"] == "failed" and rows["codex"]["error"]["code"] == "invalid_environment"
    assert rows["codex"]["error"]["message"].startswith("CODEX_HOME is a relative path (codex); ")
    assert {rows[name]["status"] for name in ("claude-code", "cursor", "vscode")} == {"configured"}
    assert list(elsewhere.iterdir()) == [] and (fake / "codex" / "config.toml").read_text() == CODEX
    assert {g["client"] for g in home.ok("grant", "list")["grants"]} == {"claude-code", "cursor", "vscode"}
    assert (
        "error: invalid_environment: CODEX_HOME is a relative path"
        in home.run("inject", "codex", "--vault", "notes", "--scope", "search", json_output=False, cwd=elsewhere).stderr
    )


def test_an_invalid_json_file_is_left_untouched_and_named(clients: tuple[HomeDir, Path]) -> None:
    home, fake = clients
    broken = '{\n  "mcpServers": {\n    "other": {"command": "x"},,\n  }\n}\n'
    (fake / ".cursor" / "mcp.json").write_text(broken)
    result = home.run("inject", "cursor", "--vault", "notes", "--scope", "search")
    assert result.code == 1
    row = result.doc["clients"][0]
    assert row["status"] == "failed" and row["error"]["code"] == "client_config_invalid"
    assert str(fake / ".cursor" / "mcp.json") in row["error"]["message"] and "line 3" in row["error"]["message"]
    assert (fake / ".cursor" / "mcp.json").read_text() == broken
    assert not (fake / ".cursor" / "mcp.json.memories-backup").exists()
    assert home.ok("grant", "list")["grants"] == []  # no grant left behind for a client that was not configured


def test_a_symlinked_config_stays_a_symlink(clients: tuple[HomeDir, Path]) -> None:
    home, fake = clients
    dotfiles = fake / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "claude.json"
    real.write_text(json.dumps(START))
    (fake / ".claude.json").unlink()
    (fake / ".claude.json").symlink_to(real)
    home.ok("inject", "claude-code", "--vault", "notes", "--scope", "search")
    assert (fake / ".claude.json").is_symlink()
    assert "memories" in json.loads(real.read_text())["mcpServers"]


def test_without_force_an_existing_entry_and_an_older_skill_are_kept(clients: tuple[HomeDir, Path]) -> None:
    home, fake = clients
    skill = fake / ".claude" / "skills" / "memories" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    older = bundled_skill().replace('version: "1"', 'version: "0"')
    skill.write_text(older)
    first = home.ok("inject", "claude-code", "--vault", "notes", "--scope", "search")
    assert first["clients"][0]["status"] == "configured" and first["clients"][0]["skill_status"] == "kept"
    assert skill.read_text() == older
    config = (fake / ".claude.json").read_text()
    again = home.ok("inject", "claude-code", "--vault", "notes", "--scope", "search")
    assert again["clients"][0]["status"] == "kept"
    assert (fake / ".claude.json").read_text() == config
    forced = home.ok("inject", "claude-code", "--vault", "notes", "--scope", "search", "--force")
    row = forced["clients"][0]
    assert row["skill_status"] == "updated" and Path(row["skill_backup"]).read_text() == older
    assert skill.read_text() == bundled_skill()


def test_a_skill_folder_that_is_not_ours_is_never_replaced(clients: tuple[HomeDir, Path]) -> None:
    home, fake = clients
    skill = fake / ".cursor" / "skills" / "memories" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: memories\ndescription: my own notes skill\n---\nmine\n")
    row = home.ok("inject", "cursor", "--vault", "notes", "--scope", "search", "--force")["clients"][0]
    assert row["skill_status"] == "foreign"
    assert skill.read_text().endswith("mine\n")


def test_inject_all_skips_clients_that_are_not_installed(vault: HomeDir, tmp_path: Path) -> None:
    fake = tmp_path / "empty-home"
    fake.mkdir()
    vault.env.update(HOME=str(fake), CODEX_HOME=str(fake / "codex"), XDG_CONFIG_HOME=str(fake / "xdg"))
    rows = vault.ok("inject", "all", "--vault", "notes", "--scope", "search")["clients"]
    assert {row["status"] for row in rows} == {"skipped"}
    assert list(fake.iterdir()) == []


async def test_the_token_written_into_a_config_works_for_mcp_serve(clients: tuple[HomeDir, Path]) -> None:
    home, fake = clients
    home.ok("memory", "add", "notes", "--title", "inject", "--body", "reachable through the injected entry")
    _inject(home)
    entry = json.loads((fake / ".claude.json").read_text())["mcpServers"]["memories"]
    async with mcp_session(home, entry["env"][TOKEN_ENV], command=entry["command"]) as session:
        error, found = await call(session, "memory_search", {"query": "injected"})
        assert not error and found["results"][0]["title"] == "inject"


def test_the_http_form_reaches_a_running_endpoint_and_replacing_a_form_revokes_the_old_grant(
    clients: tuple[HomeDir, Path],
) -> None:
    """inject --http PORT writes the URL and the bearer header (Codex: http_headers) instead of the command; the
    token works against mcp serve --http on that port; --force from stdio to HTTP revokes the stdio entry's grant."""
    home, fake = clients
    home.ok("memory", "add", "notes", "--title", "inject", "--body", "reachable through the HTTP entry")
    stdio = _inject(home)
    with HttpServer(home) as server:
        http = _inject(home, "--force", "--http", str(server.port))
        entry = json.loads((fake / ".claude.json").read_text())["mcpServers"]["memories"]
        assert entry == {"type": "http", "url": server.url, "headers": entry["headers"]}
        scheme, token = entry["headers"]["Authorization"].split(" ")
        assert scheme == "Bearer" and token.startswith("mem_")
        codex = tomlkit.parse((fake / "codex" / "config.toml").read_text()).unwrap()["mcp_servers"]["memories"]
        assert set(codex) == {"url", "http_headers"} and codex["url"] == server.url
        assert codex["http_headers"]["Authorization"].startswith("Bearer mem_")
        vscode = (fake / "xdg" / "Code" / "User" / "mcp.json").read_text()
        assert '"type": "http"' in vscode and "// keep me" in vscode
        wire = HttpWire(server.url, token)
        wire.open("2025-11-25")
        found = wire.request("tools/call", {"name": "memory_search", "arguments": {"query": "HTTP"}})
        assert found["structuredContent"]["results"][0]["title"] == "inject"
        assert all("mcp serve --http" in row["note"] for row in http["clients"] if row["status"] == "configured")
    states = {g["id"]: g["state"] for g in home.ok("grant", "list")["grants"]}
    assert all(states[row["grant"]] == "revoked" for row in stdio["clients"] if row.get("grant"))
    assert all(states[row["grant"]] == "active" for row in http["clients"] if row.get("grant"))
    refused = home.run("inject", "cursor", "--vault", "notes", "--scope", "search", "--http", "0.0.0.0:8765")
    assert refused.code == 1 and refused.error_code == "invalid_argument"


def test_force_revokes_the_replaced_grant_in_the_home_that_issued_it(
    clients: tuple[HomeDir, Path], tmp_path: Path
) -> None:
    """Issue 29, item 5: ``inject --force`` run against another home replaced the entry and left the old grant
    active without a word. The grant is revoked in the home that issued it when that home's daemon answers;
    otherwise the note names the grant's home and client and how to revoke it."""
    first, _ = clients
    (tmp_path / "other").mkdir(mode=0o700)
    second = HomeDir(tmp_path / "other", dict(first.env))
    second.config.write_text(first.config.read_text())
    try:
        initialize(second)
        issued = first.ok("inject", "claude-code", "--vault", "notes", "--scope", "search")["clients"][0]["grant"]
        row = second.ok("inject", "claude-code", "--vault", "notes", "--scope", "search", "--force")["clients"][0]
        assert "still active" not in row["note"]
        states = {g["id"]: g["state"] for g in first.ok("grant", "list")["grants"]}
        assert states[issued] == "revoked"

        second.stop()  # the entry now holds the second home's grant, and that home's daemon is down
        row = first.ok("inject", "claude-code", "--vault", "notes", "--scope", "search", "--force")["clients"][0]
        other = str((tmp_path / "other").resolve())
        assert (
            f"the replaced entry's grant, issued by the home {other}, is still active (daemon_not_running)"
            in (row["note"])
        )
        assert f"memories --home {other} grant revoke ID" in row["note"] and "client claude-code" in row["note"]
    finally:
        second.stop()
