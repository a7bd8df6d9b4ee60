"""The AI clients ``memories inject`` configures: where each keeps its MCP servers and its skills, and the entry.

- ``claude-code``: ``~/.claude.json`` (``mcpServers``; ``$CLAUDE_CONFIG_DIR/.claude.json`` when that is set),
  skill in ``~/.claude/skills/memories``.
- ``codex``: ``$CODEX_HOME/config.toml`` (``[mcp_servers.memories]``; ``CODEX_HOME`` defaults to ``~/.codex``),
  skill in ``~/.agents/skills/memories``.
- ``cursor``: ``~/.cursor/mcp.json`` (``mcpServers``), skill in ``~/.cursor/skills/memories``.
- ``vscode``: ``$XDG_CONFIG_HOME/Code/User/mcp.json`` (``servers`` with ``"type": "stdio"``, JSONC;
  ``XDG_CONFIG_HOME`` defaults to ``~/.config``, also when it is relative), skill in ``~/.copilot/skills/memories``.

Each entry is the stdio form by default (the client starts ``memories mcp serve`` with the token in ``env``), or
with ``inject --http`` the HTTP form for a running ``memories mcp serve --http``: its URL and the header
``Authorization: Bearer <token>`` (``"type": "http"``, ``url``, ``headers`` in Claude Code, VS Code and Cursor;
``url`` and ``http_headers`` in Codex).

``~`` is ``HOME``. A relative ``HOME``, ``CLAUDE_CONFIG_DIR`` or ``CODEX_HOME`` is refused for the clients whose
paths come from it (``invalid_environment``); an unset or empty one means its default.

Claude Code's user config is written directly rather than through ``claude mcp add-json``, which would put the
grant token on a command line (visible to every process of the user) and cannot merge. Claude Desktop has no
Linux build, so it is skipped with a note.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from memories.errors import MemoriesError

SERVER_NAME = "memories"
"""The one entry ``inject`` owns in each client's server table."""

TOKEN_ENV = "MEMORIES_GRANT_TOKEN"

ConfigFormat = Literal["json", "jsonc", "toml"]


@dataclass(frozen=True)
class ClientTarget:
    """One AI client: its config file, format and server table, whether its entries name their ``"type"``,
    its skills folder, the folder whose presence says it is installed (for ``inject all``), and the key of an HTTP
    entry's headers."""

    name: str
    title: str
    config_path: str
    format: ConfigFormat
    table: str
    typed: bool
    skills_dir: str
    marker: str
    headers_key: str = "headers"

    def installed(self) -> bool:
        return os.path.exists(self.marker)

    def entry(self, command: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
        """The stdio MCP server entry in this client's shape."""
        entry: dict[str, Any] = {"type": "stdio"} if self.typed else {}
        entry.update(command=command, args=args, env=env)
        return entry

    def http_entry(self, url: str, token: str) -> dict[str, Any]:
        """The HTTP MCP server entry in this client's shape: ``url`` and the grant token as a bearer header."""
        entry: dict[str, Any] = {"type": "http"} if self.typed else {}
        entry.update({"url": url, self.headers_key: {"Authorization": f"Bearer {token}"}})
        return entry


class _Environment:
    """The variables client paths come from. A folder variable that is unset or empty means its default; a relative
    one is refused: the client resolves it against the folder it starts in, which is not the one ``inject`` runs
    in, so no file ``inject`` could write is the one the client reads."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def folder(self, name: str) -> str | None:
        """The absolute folder ``name`` holds, or ``None`` when it is unset or empty.

        Raises:
            MemoriesError: ``invalid_environment`` when it holds a relative path.
        """
        value = self._environ.get(name)
        if not value:
            return None
        if not os.path.isabs(value):
            raise MemoriesError(
                "invalid_environment",
                f"{name} is a relative path ({value}); the AI client would resolve it from another folder: set it "
                "to an absolute path, or unset it, and run inject again",
                {"variable": name},
            )
        return value

    def home(self) -> str:
        """``HOME``, else the user's home folder from the password database."""
        return self.folder("HOME") or pwd.getpwuid(os.getuid()).pw_dir

    def xdg_config_home(self) -> str:
        """``XDG_CONFIG_HOME``, else ``~/.config``. The XDG base directory spec makes a relative value invalid, to
        be ignored, and VS Code ignores it, so here it is ignored too rather than refused."""
        value = self._environ.get("XDG_CONFIG_HOME", "")
        return value if os.path.isabs(value) else os.path.join(self.home(), ".config")


def _claude_code(env: _Environment) -> ClientTarget:
    config_dir = env.folder("CLAUDE_CONFIG_DIR")
    claude_dir = config_dir or os.path.join(env.home(), ".claude")
    config = os.path.join(config_dir or env.home(), ".claude.json")
    skills = os.path.join(claude_dir, "skills", SERVER_NAME)
    return ClientTarget("claude-code", "Claude Code", config, "json", "mcpServers", True, skills, claude_dir)


def _codex(env: _Environment) -> ClientTarget:
    codex_home = env.folder("CODEX_HOME") or os.path.join(env.home(), ".codex")
    config = os.path.join(codex_home, "config.toml")
    skills = os.path.join(env.home(), ".agents", "skills", SERVER_NAME)
    return ClientTarget("codex", "Codex", config, "toml", "mcp_servers", False, skills, codex_home, "http_headers")


def _cursor(env: _Environment) -> ClientTarget:
    cursor = os.path.join(env.home(), ".cursor")
    skills = os.path.join(cursor, "skills", SERVER_NAME)
    return ClientTarget(
        "cursor", "Cursor", os.path.join(cursor, "mcp.json"), "json", "mcpServers", False, skills, cursor
    )


def _vscode(env: _Environment) -> ClientTarget:
    user = os.path.join(env.xdg_config_home(), "Code", "User")
    skills = os.path.join(env.home(), ".copilot", "skills", SERVER_NAME)
    return ClientTarget("vscode", "VS Code", os.path.join(user, "mcp.json"), "jsonc", "servers", True, skills, user)


_TARGETS = {"claude-code": _claude_code, "codex": _codex, "cursor": _cursor, "vscode": _vscode}

CLIENTS = tuple(_TARGETS)
"""The clients ``inject`` configures, by their ``inject`` names."""


def target(name: str, environ: Mapping[str, str] | None = None) -> ClientTarget:
    """The client ``name`` (one of :data:`CLIENTS`), with paths from ``HOME``, ``CLAUDE_CONFIG_DIR``,
    ``CODEX_HOME`` and ``XDG_CONFIG_HOME`` of ``environ`` (default: this process's environment); only the variables
    this client's paths come from are read.

    >>> target("codex", {"HOME": "/home/u"}).config_path
    '/home/u/.codex/config.toml'

    Raises:
        MemoriesError: ``invalid_environment`` when one of those variables holds a relative path
            (``XDG_CONFIG_HOME`` excepted: a relative value is ignored, see :meth:`_Environment.xdg_config_home`).
    """
    return _TARGETS[name](_Environment(os.environ if environ is None else environ))
