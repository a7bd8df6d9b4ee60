"""``inject all|CLIENT``: give AI clients a grant and the Memories MCP server entry and skill.

For each client (see :mod:`memories.clients` for the files): one grant of its own, the ``memories`` entry in its
MCP config (the absolute path of this ``memories`` executable, ``mcp serve``, and ``MEMORIES_HOME`` and the grant
token in the entry's ``env``, because GUI clients start servers with a reduced environment; ``--config`` when the
daemon's config is not the default), merged into the file, and the bundled skill where the client loads skills.

With ``--http [127.0.0.1:]PORT`` the entries are the HTTP form instead, for a ``memories mcp serve --http`` the
user runs (the URL and ``Authorization: Bearer <token>``; see :mod:`memories.clients`).

Without ``--force`` an existing ``memories`` entry and an installed skill that differs are kept; with it they are
replaced (the skill backed up first) and the grant the old entry held is revoked, in the home that issued it (the
old entry's ``MEMORIES_HOME``); when that home's daemon cannot be reached the note says which grant in which home
is still active and how to revoke it. ``all`` configures the clients
that are installed (their folder exists) and says which it skipped.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

import click

from memories import protocol as p
from memories.cli import render
from memories.cli.grant import EXPIRES_HELP, SCOPE_HELP, parse_scope
from memories.cli.output import Session, command
from memories.client import Client, RequestFailed
from memories.clients import CLIENTS, SERVER_NAME, TOKEN_ENV, ClientTarget, target
from memories.configfiles import json_entry, merge_json, merge_toml, read_config, toml_entry, write_config
from memories.errors import EXIT_ERROR, EXIT_PARTIAL, MemoriesError
from memories.mcp.endpoint import parse_listen, url_of
from memories.mcp.listener import listener_uids, refuse_foreign
from memories.paths import CONFIG_NAME, HOME_ENV, Home
from memories.skill import install_skill

_DESKTOP_NOTE = "Claude Desktop has no Linux build; nothing to configure"


def _executable() -> str:
    """The absolute path of this ``memories`` console script (beside the interpreter, else on PATH)."""
    beside = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "memories")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("memories")
    if found is None:
        raise MemoriesError("invalid_argument", "cannot find the memories executable to name in the client configs")
    return os.path.abspath(found)


def _current_entry(target: ClientTarget, text: str | None) -> Any:
    if target.format == "toml":
        return toml_entry(text, target.config_path, target.table, SERVER_NAME)
    return json_entry(text, target.config_path, target.table, SERVER_NAME, strict=target.format == "json")


def _merged(target: ClientTarget, text: str | None, entry: dict[str, Any]) -> str:
    if target.format == "toml":
        return merge_toml(text, target.config_path, target.table, SERVER_NAME, entry)
    return merge_json(text, target.config_path, target.table, SERVER_NAME, entry, strict=target.format == "json")


def _old_token(entry: Any) -> str | None:
    """The grant token of an entry ``inject`` wrote: in the stdio form's ``env``, or the HTTP form's header."""
    if not isinstance(entry, dict):
        return None
    env = entry.get("env")
    if isinstance(env, dict) and isinstance(env.get(TOKEN_ENV), str):
        return str(env[TOKEN_ENV])
    for key in ("headers", "http_headers"):
        headers = entry.get(key)
        value = headers.get("Authorization") if isinstance(headers, dict) else None
        if isinstance(value, str) and value.startswith("Bearer "):
            return value.removeprefix("Bearer ")
    return None


def _old_home(entry: Any) -> Home | None:
    """The home a stdio entry names (its ``env``'s ``MEMORIES_HOME``, its ``--config``); ``None`` for the HTTP form
    or an entry without one."""
    env = entry.get("env") if isinstance(entry, dict) else None
    root = env.get(HOME_ENV) if isinstance(env, dict) else None
    if not isinstance(root, str) or not root:
        return None
    args = entry.get("args")
    config = None
    if isinstance(args, list) and "--config" in args[:-1]:
        config = args[args.index("--config") + 1]
    root = os.path.realpath(os.path.expanduser(root))
    return Home(root, config if isinstance(config, str) else os.path.join(root, CONFIG_NAME))


class _Injector:
    """One ``inject`` run: the grant request's terms and the entry's command line."""

    def __init__(
        self, session: Session, vault: str, scope: list[str], expires: str, force: bool, url: str | None
    ) -> None:
        self.session = session
        self.vault = vault
        self.scope = scope
        self.expires = expires
        self.force = force
        self.url = url
        home = session.home
        self.command = _executable() if url is None else None  # the HTTP form names no executable
        self.args = ["mcp", "serve"]
        if home.config_path != home.default_config_path:
            self.args += ["--config", home.config_path]

    def entry(self, target: ClientTarget, token: str) -> dict[str, Any]:
        """The entry for ``target`` holding ``token``: the HTTP form with ``--http``, else the stdio form."""
        if self.url is not None:
            return target.http_entry(self.url, token)
        assert self.command is not None
        env = {"MEMORIES_HOME": self.session.home.root, TOKEN_ENV: token}
        return target.entry(self.command, self.args, env)

    def run(self, target: ClientTarget) -> dict[str, Any]:
        row: dict[str, Any] = {"client": target.name, "config": target.config_path, "grant": None, "restart": False}
        try:
            text = read_config(target.config_path)
            current = _current_entry(target, text)
            if current is not None and not self.force:
                row.update(status="kept", note=f"{target.title} already has a {SERVER_NAME} entry; --force replaces it")
            else:
                row.update(self._configure(target, text, current))
            skill_status, skill_backup = install_skill(target.skills_dir, self.force)
        except MemoriesError as exc:
            row.update(status="failed", error={"code": exc.code, "message": exc.message})
            return row
        row.update(skill=os.path.join(target.skills_dir, "SKILL.md"), skill_status=skill_status)
        if skill_backup:
            row["skill_backup"] = skill_backup
        if skill_status == "kept":
            row["skill_note"] = "the installed skill differs from this release's; --force replaces it (after a backup)"
        return row

    def _configure(self, target: ClientTarget, text: str | None, current: Any) -> dict[str, Any]:
        request = p.GrantCreate(vault=self.vault, client=target.name, scope=self.scope, expires=self.expires)  # type: ignore[arg-type]
        grant = self.session.client.request(request).result
        try:
            backup = write_config(target.config_path, _merged(target, text, self.entry(target, grant.token)))
        except MemoriesError:
            self._revoke(self.session.client, p.GrantRevoke(id=grant.id))
            raise
        note = f"restart {target.title} to load the {SERVER_NAME} server"
        if self.url is not None:
            note += f" (at {self.url}: keep `memories mcp serve --http` running on that port)"
        old = _old_token(current)
        if old is not None and old != grant.token:
            still_active = self._revoke_replaced(old, _old_home(current), target.name)
            if still_active:
                note += f"; {still_active}"
        return {"status": "configured", "grant": grant.id, "backup": backup, "restart": True, "note": note}

    def _revoke_replaced(self, token: str, issuer: Home | None, client: str) -> str | None:
        """Revoke the grant of the replaced entry's ``token`` in the home that issued it (``issuer``, the entry's
        ``MEMORIES_HOME``; this home when the entry names none or names this one). ``None`` when it is revoked (or
        was gone already), else what the user must do: that home's daemon cannot be reached, or (the HTTP form
        names no home) no grant of this home holds the token."""
        if issuer is None or issuer.root == self.session.home.root:
            if self._revoke(self.session.client, p.GrantRevoke(token=token)) or issuer is not None:
                return None
            return (
                "the replaced entry's grant is not one of this home's: if another home issued it, it is still "
                f"active there (`memories --home HOME grant list` shows it as client {client}; `grant revoke ID`)"
            )
        try:
            self._revoke(Client(issuer), p.GrantRevoke(token=token))
        except MemoriesError as exc:
            return (
                f"the replaced entry's grant, issued by the home {issuer.root}, is still active ({exc.code}): "
                f"start and unlock that home's daemon, then `memories --home {issuer.root} grant list` shows it as "
                f"client {client} and `memories --home {issuer.root} grant revoke ID` ends it"
            )
        return None

    @staticmethod
    def _revoke(client: Client, request: p.GrantRevoke) -> bool:
        """Whether ``client``'s home revoked the grant; ``False`` when it holds no such grant (``grant_invalid``:
        already purged, or another home's)."""
        try:
            client.request(request)
        except RequestFailed as exc:
            if exc.code != "grant_invalid":
                raise
            return False
        return True


@command(None, name="inject")
@click.argument("client", type=click.Choice(["all", *CLIENTS]))
@click.option("--vault", "vault_ref", required=True, metavar="VAULT", help="The vault the grants give access to.")
@click.option("--scope", required=True, help=SCOPE_HELP)
@click.option("--expires", default="30d", show_default=True, help=EXPIRES_HELP)
@click.option("--force", is_flag=True, help="Replace an existing memories entry and skill; revoke the old grant.")
@click.option(
    "--http",
    "listen",
    metavar="[127.0.0.1:]PORT",
    help="Write the HTTP form (URL and bearer token) for a `memories mcp serve --http PORT` you run, instead of "
    "the stdio form.",
)
def inject(
    session: Session, client: str, vault_ref: str, scope: str, expires: str, force: bool, listen: str | None
) -> int:
    """Configure AI clients (claude-code, codex, cursor, vscode, or all installed ones) for MCP."""
    scopes = parse_scope(scope)
    url = None
    if listen is not None:
        address, port = parse_listen(listen)
        if port == 0:
            raise MemoriesError("invalid_argument", "--http: give the port `memories mcp serve --http` listens on")
        url = url_of(address, port)
        refuse_foreign(port, listener_uids(port))
    session.call(p.VaultShow(vault=vault_ref))  # the daemon runs, the home is unlocked and the vault exists
    injector = _Injector(session, vault_ref, scopes, expires, force, url)
    rows: list[dict[str, Any]] = []
    for name in CLIENTS:
        if client not in ("all", name):
            continue
        try:
            found = target(name)
        except MemoriesError as exc:  # a relative HOME, CODEX_HOME or CLAUDE_CONFIG_DIR
            error = {"code": exc.code, "message": exc.message}
            rows.append({"client": name, "status": "failed", "config": None, "grant": None, "error": error})
            continue
        if client == "all" and not found.installed():
            rows.append({"client": name, "status": "skipped", "note": f"not installed (no {found.marker})"})
            continue
        rows.append(injector.run(found))
    if client == "all":
        rows.append({"client": "claude-desktop", "status": "skipped", "note": _DESKTOP_NOTE})
    session.emit({"clients": rows}, [], render.injected)
    failed = sum(row["status"] == "failed" for row in rows)
    if not failed:
        return 0
    return EXIT_PARTIAL if any(row["status"] == "configured" for row in rows) else EXIT_ERROR
