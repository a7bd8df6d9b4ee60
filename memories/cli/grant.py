"""``grant create|list|revoke``: what an AI client may do with one vault over MCP, until when.

The token is printed once by ``grant create`` (the daemon keeps only its SHA-256); give it to the client as
``MEMORIES_GRANT_TOKEN`` in its MCP server entry (``memories inject`` writes that entry for you).
"""

from __future__ import annotations

from typing import get_args

import click

from memories import protocol as p
from memories.cli import render
from memories.cli.output import Session, command, common_options

SCOPE_HELP = "Comma-separated tools: search, read, retrieve, ask (memory_search ... memory_ask)."
EXPIRES_HELP = "30m, 12h, 7d, an ISO-8601 time or never (default: 30d)."


SCOPES: tuple[str, ...] = get_args(p.GrantScope)


def parse_scope(text: str) -> list[str]:
    """``search,read`` -> ``["search", "read"]``; a usage error for an empty list or an unknown name."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in SCOPES]
    if unknown or not names:
        raise click.BadParameter(f"expected a comma-separated list of {', '.join(SCOPES)}", param_hint="--scope")
    return names


@click.group()
@common_options
def grant(json_mode: bool, home: str | None, config: str | None) -> None:
    """Grants: which vault and tools an AI client may use over MCP, until when."""


@command(grant)
@click.argument("vault_ref", metavar="VAULT")
@click.option("--client", required=True, help="A name for the AI client (a label; it authorizes nothing).")
@click.option("--scope", required=True, help=SCOPE_HELP)
@click.option("--expires", default="30d", show_default=True, help=EXPIRES_HELP)
def create(session: Session, vault_ref: str, client: str, scope: str, expires: str) -> None:
    """Create a grant and print its token once."""
    request = p.GrantCreate(vault=vault_ref, client=client, scope=parse_scope(scope), expires=expires)  # type: ignore[arg-type]
    session.emit(*session.call(request), render.grant_created)


@command(grant, name="list")
@click.argument("vault_ref", metavar="[VAULT]", required=False)
def list_grants(session: Session, vault_ref: str | None) -> None:
    """List grants (never their tokens)."""
    session.emit(*session.call(p.GrantList(vault=vault_ref)), render.grants)


@command(grant)
@click.argument("grant_id", metavar="ID")
def revoke(session: Session, grant_id: str) -> None:
    """Revoke a grant: its next MCP call fails, and a call in flight is dropped."""
    session.emit(*session.call(p.GrantRevoke(id=grant_id)), render.grants)
