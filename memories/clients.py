"""The AI clients ``memories inject`` configures: where each keeps its MCP servers and its skills, and the entry.

- ``claude-code``: ``~/.claude.json`` (``mcpServers``; ``$CLAUDE_CONFIG_DIR/.claude.json`` when that is set),
  skill in ``~/.claude/skills/memories``.
- ``codex``: ``$CODEX_HOME/config.toml`` (``[mcp_servers.memories]``; ``CODEX_HOME`` defaults to ``~/.codex``),
  skill in ``~/.agents/skills/memories``.
- ``cursor``: ``~/.cursor/mcp.json`` (``mcpServers``), skill in ``~/.cursor/skills/memories``.
- ``vscode``: ``$XDG_CONFIG_HOME/Code/User/mcp.json`` (``servers`` with ``"type": "stdio"``, JSONC;
  ``XDG_CONFIG_HOME`` defaults to ``~/.config``, also when it is relative), skill in ``~/.copilot/skills/memories``.

Claude Code's user config is written directly rather than through ``claude mcp add-json``, which would put the
grant token on a command line (visible to every process of the user) and cannot merge. Claude Desktop has no
Linux build, so it is skipped with a note.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

SERVER_NAME = "memories"
"""The one entry ``inject`` owns in each client's server table."""

TOKEN_ENV = "MEMORIES_GRANT_TOKEN"

ConfigFormat = Literal["json", "jsonc", "toml"]


@dataclass(frozen=True)
class ClientTarget:
    """One AI client: its config file, format and server table, whether its entries name ``"type": "stdio"``,
    its skills folder, and the folder whose presence says it is installed (for ``inject all``)."""

    name: str
    title: str
    config_path: str
    format: ConfigFormat
    table: str
    typed: bool
    skills_dir: str
    marker: str

    def installed(self) -> bool:
        return os.path.exists(self.marker)

    def entry(self, command: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
        """The MCP server entry in this client's shape."""
        entry: dict[str, Any] = {"type": "stdio"} if self.typed else {}
        entry.update(command=command, args=args, env=env)
        return entry


def targets(environ: dict[str, str] | None = None) -> dict[str, ClientTarget]:
    """Every supported client, keyed by its ``inject`` name, with paths from ``HOME``, ``CODEX_HOME``,
    ``XDG_CONFIG_HOME`` and ``CLAUDE_CONFIG_DIR`` of ``environ`` (default: this process's environment)."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    claude_dir = env.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude")
    claude_config = (
        os.path.join(env["CLAUDE_CONFIG_DIR"], ".claude.json")
        if env.get("CLAUDE_CONFIG_DIR")
        else os.path.join(home, ".claude.json")
    )
    codex_home = env.get("CODEX_HOME") or os.path.join(home, ".codex")
    # The XDG base directory spec: a relative path in the variable is invalid and ignored (VS Code does the same).
    xdg_config = env.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(xdg_config):
        xdg_config = os.path.join(home, ".config")
    vscode_user = os.path.join(xdg_config, "Code", "User")
    found = [
        ClientTarget(
            "claude-code", "Claude Code", claude_config, "json", "mcpServers", True,
            os.path.join(claude_dir, "skills", SERVER_NAME), claude_dir,
        ),
        ClientTarget(
            "codex", "Codex", os.path.join(codex_home, "config.toml"), "toml", "mcp_servers", False,
            os.path.join(home, ".agents", "skills", SERVER_NAME), codex_home,
        ),
        ClientTarget(
            "cursor", "Cursor", os.path.join(home, ".cursor", "mcp.json"), "json", "mcpServers", False,
            os.path.join(home, ".cursor", "skills", SERVER_NAME), os.path.join(home, ".cursor"),
        ),
        ClientTarget(
            "vscode", "VS Code", os.path.join(vscode_user, "mcp.json"), "jsonc", "servers", True,
            os.path.join(home, ".copilot", "skills", SERVER_NAME), vscode_user,
        ),
    ]  # fmt: skip
    return {target.name: target for target in found}
