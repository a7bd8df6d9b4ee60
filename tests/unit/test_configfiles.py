"""Merging one MCP entry into client configs: everything else kept byte for byte, one entry, errors with lines."""

from __future__ import annotations

import json
import os
import pwd
import stat
from pathlib import Path

import pytest
import tomlkit

from memories.clients import CLIENTS, target
from memories.configfiles import json_entry, merge_json, merge_toml, read_config, toml_entry, write_config
from memories.errors import MemoriesError

ENTRY = {"command": "/bin/memories", "args": ["mcp", "serve"], "env": {"MEMORIES_GRANT_TOKEN": "t"}}


@pytest.mark.parametrize(
    "text",
    [
        '{"mcpServers":{"other":{"command":"x"}},"preferences":{"theme":"dark"}}',
        '{\n  "preferences": {"theme": "dark"}\n}\n',
        "{}",
        '{\n\t"mcpServers": {\n\t\t"other": 1 // a comment\n\t}\n}\n',
        '{"mcpServers": {"memories": {"command": "old"}, "x": 1, "memories": {"command": "older"}}}',
    ],
)
def test_json_merge_keeps_the_rest_and_leaves_one_entry(text: str) -> None:
    strict = "//" not in text
    once = merge_json(text, "f", "mcpServers", "memories", ENTRY, strict=strict)
    twice = merge_json(once, "f", "mcpServers", "memories", {**ENTRY, "command": "/new"}, strict=strict)
    assert json_entry(twice, "f", "mcpServers", "memories", strict=strict)["command"] == "/new"
    assert twice.count('"memories"') == 1
    if strict:
        document = json.loads(twice)
        original = json.loads(text)
        for key, value in original.items():
            if key != "mcpServers":
                assert document[key] == value
        assert {k for k in document["mcpServers"]} == {*original.get("mcpServers", {}), "memories"}
    else:
        assert "// a comment" in twice and "\t\t" in twice


@pytest.mark.parametrize(
    ("text", "line"),
    [('{"mcpServers": ', 1), ('{\n  "a": 1,\n  b c\n}', 3), ("[1, 2]", 1), ('{"mcpServers": []}', 1)],
)
def test_an_unparsable_json_file_names_its_line(text: str, line: int) -> None:
    with pytest.raises(MemoriesError) as caught:
        merge_json(text, "/x/mcp.json", "mcpServers", "memories", ENTRY, strict=True)
    assert caught.value.code == "client_config_invalid"
    assert caught.value.details == {"path": "/x/mcp.json", "line": line}


def test_toml_merge_keeps_comments_and_replaces_only_our_table() -> None:
    text = (
        '# top\nmodel = "o3"  # why\n\n[mcp_servers.memories]\ncommand = "old"\n\n[mcp_servers.other]\ncommand = "x"\n'
    )
    merged = merge_toml(text, "c.toml", "mcp_servers", "memories", ENTRY)
    assert "# top" in merged and "# why" in merged and 'command = "x"' in merged and '"old"' not in merged
    assert toml_entry(merged, "c.toml", "mcp_servers", "memories") == ENTRY
    with pytest.raises(MemoriesError) as caught:
        merge_toml("a = 1\nb = \n", "c.toml", "mcp_servers", "memories", ENTRY)
    assert caught.value.details["line"] == 2


def test_write_goes_through_a_symlink_with_a_backup_and_mode_0600(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("{}")
    real.chmod(0o644)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    backup = write_config(str(link), '{"a": 1}\n')
    assert link.is_symlink() and real.read_text() == '{"a": 1}\n'
    assert backup == str(real) + ".memories-backup" and Path(backup).read_text() == "{}"
    assert stat.S_IMODE(real.stat().st_mode) == 0o600 and stat.S_IMODE(os.stat(backup).st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json", "real.json.memories-backup"]


def test_the_users_original_survives_every_later_write(tmp_path: Path) -> None:
    """Issue 29, item 8: the backup kept one generation, so a second inject overwrote the user's original."""
    config = tmp_path / "mcp.json"
    config.write_text("original")
    assert write_config(str(config), "first") == str(config) + ".memories-backup"
    assert write_config(str(config), "second") == str(config) + ".memories-previous"
    assert write_config(str(config), "third") == str(config) + ".memories-previous"
    assert (tmp_path / "mcp.json.memories-backup").read_text() == "original"
    assert (tmp_path / "mcp.json.memories-previous").read_text() == "second"
    assert stat.S_IMODE((tmp_path / "mcp.json.memories-previous").stat().st_mode) == 0o600


@pytest.mark.parametrize("replacing", [False, True])
def test_a_toml_entry_is_followed_by_a_blank_line_before_the_users_next_table(replacing: bool) -> None:
    """Issue 29, item 8: Codex's config.toml got ``[profiles.work]`` on the line after the entry's last key."""
    text = '[mcp_servers.other]\ncommand = "x"\n\n[profiles.work]\nmodel = "y"\n'
    if replacing:
        text = merge_toml(text, "c.toml", "mcp_servers", "memories", {"command": "old"})
    merged = merge_toml(text, "c.toml", "mcp_servers", "memories", ENTRY)
    assert "\n\n[profiles.work]\n" in merged and "\n\n\n" not in merged
    assert merge_toml(merged, "c.toml", "mcp_servers", "memories", ENTRY) == merged  # idempotent
    assert tomlkit.parse(merged).unwrap()["profiles"] == {"work": {"model": "y"}}
    alone = merge_toml('model = "o3"\n', "c.toml", "mcp_servers", "memories", ENTRY)
    assert not alone.endswith("\n\n")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_config_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "mcp.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    with pytest.raises(MemoriesError) as caught:
        read_config(str(path))
    assert caught.value.code == "client_config_invalid"
    assert "not a regular file" in str(caught.value)


@pytest.mark.parametrize("strict", [True, False])
def test_a_config_nested_deeper_than_the_parser_goes_is_invalid_not_a_crash(strict: bool) -> None:
    deep = '{"a":' * 5_000 + "1" + "}" * 5_000  # Python's recursion limit is 1,000
    with pytest.raises(MemoriesError) as caught:
        merge_json(deep, "/x/.claude.json", "mcpServers", "memories", ENTRY, strict=strict)
    assert caught.value.code == "client_config_invalid" and "/x/.claude.json" in caught.value.message


def test_a_relative_xdg_config_home_is_ignored() -> None:
    """The XDG base directory spec: a relative path is invalid; inject must not create ``rel/Code/User`` in
    whatever folder it runs from."""
    for value in ("rel", "", "./x"):
        vscode = target("vscode", {"HOME": "/home/u", "XDG_CONFIG_HOME": value})
        assert vscode.config_path == "/home/u/.config/Code/User/mcp.json"
    assert target("vscode", {"HOME": "/home/u", "XDG_CONFIG_HOME": "/x"}).config_path == "/x/Code/User/mcp.json"


@pytest.mark.parametrize(
    ("variable", "clients"),
    [("HOME", CLIENTS), ("CODEX_HOME", ("codex",)), ("CLAUDE_CONFIG_DIR", ("claude-code",))],
)
@pytest.mark.parametrize("value", ["rel", "./x", "~/.codex", "../up"])
def test_a_relative_client_folder_is_refused_for_the_clients_it_places(
    variable: str, clients: tuple[str, ...], value: str
) -> None:
    """Every other folder variable inject reads: the client would resolve a relative value from the folder it
    starts in, so no file inject writes is the one it reads. ``~`` is not expanded in a variable's value."""
    environ = {"HOME": "/home/u", variable: value}
    for name in clients:
        with pytest.raises(MemoriesError) as refused:
            target(name, environ)
        assert refused.value.code == "invalid_environment" and refused.value.details == {"variable": variable}
        assert refused.value.message.startswith(f"{variable} is a relative path ({value}); ")
    for name in set(CLIENTS) - set(clients):  # the other clients do not read it
        assert target(name, environ).config_path.startswith("/home/u/")


def test_an_empty_client_folder_variable_means_its_default() -> None:
    environ = {"HOME": "/home/u", "CODEX_HOME": "", "CLAUDE_CONFIG_DIR": ""}
    assert target("codex", environ).config_path == "/home/u/.codex/config.toml"
    assert target("claude-code", environ).config_path == "/home/u/.claude.json"
    user = pwd.getpwuid(os.getuid()).pw_dir
    assert target("cursor", {"HOME": ""}).config_path == os.path.join(user, ".cursor", "mcp.json")


def test_the_http_entry_of_each_client_names_the_url_and_the_bearer_header() -> None:
    """Claude Code and VS Code type their entries; Codex calls its static headers ``http_headers``."""
    url, bearer = "http://127.0.0.1:8765/mcp", {"Authorization": "Bearer mem_t"}
    entries = {name: target(name, {"HOME": "/home/u"}).http_entry(url, "mem_t") for name in CLIENTS}
    assert entries == {
        "claude-code": {"type": "http", "url": url, "headers": bearer},
        "codex": {"url": url, "http_headers": bearer},
        "cursor": {"url": url, "headers": bearer},
        "vscode": {"type": "http", "url": url, "headers": bearer},
    }
    codex = tomlkit.parse(merge_toml(None, "c.toml", "mcp_servers", "memories", entries["codex"])).unwrap()
    assert codex["mcp_servers"]["memories"]["http_headers"] == bearer
