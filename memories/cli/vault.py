"""``vault create|list|show|policy|rename|delete``. Every VAULT argument is a vault id or its unique name."""

from __future__ import annotations

import sys

import click

from memories import protocol as p
from memories.cli import render
from memories.cli.output import Session, command, common_options, counted
from memories.cli.terminal import escape
from memories.errors import MemoriesError


@click.group()
@common_options
def vault(json_mode: bool, home: str | None, config: str | None) -> None:
    """Create, inspect, rename and delete vaults."""


@command(vault)
@click.argument("name")
@click.option("--device-only", is_flag=True, help="Never send this vault's data to a non-loopback model endpoint.")
def create(session: Session, name: str, device_only: bool) -> None:
    """Create a vault with its own data key."""
    session.emit(*session.call(p.VaultCreate(name=name, device_only=device_only)), render.vault)


@command(vault, name="list")
def list_(session: Session) -> None:
    """List vaults."""
    session.emit(*session.call(p.VaultList()), render.vault_listing)


@command(vault)
@click.argument("vault_ref", metavar="VAULT")
def show(session: Session, vault_ref: str) -> None:
    """Show one vault."""
    session.emit(*session.call(p.VaultShow(vault=vault_ref)), render.vault_detail)


@command(vault)
@click.argument("vault_ref", metavar="VAULT")
@click.option("--device-only", "device_only", type=click.Choice(["on", "off"]), required=True)
def policy(session: Session, vault_ref: str, device_only: str) -> None:
    """Turn the device-only policy on or off."""
    request = p.VaultPolicy(vault=vault_ref, device_only=device_only == "on")
    session.emit(*session.call(request), render.vault_policy)


@command(vault)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("name")
def rename(session: Session, vault_ref: str, name: str) -> None:
    """Give a vault a new name (its id and records stay)."""
    session.emit(*session.call(p.VaultRename(vault=vault_ref, name=name)), render.vault)


@command(vault)
@click.argument("vault_ref", metavar="VAULT")
@click.option("--yes", is_flag=True, help="Do not ask (needed when standard input is not a terminal).")
def delete(session: Session, vault_ref: str, yes: bool) -> None:
    """Delete a vault, its key and every record in it; this cannot be undone. Asks first on a terminal."""
    if not yes:
        if not sys.stdin.isatty():
            raise MemoriesError(
                "confirmation_required", f"deleting vault {vault_ref!r} cannot be undone; give --yes to confirm"
            )
        shown, _ = session.call(p.VaultShow(vault=vault_ref))
        name, records = escape(shown.name), counted(shown.records, "record")
        question = f"Delete vault {name} ({escape(shown.id)}) and its {records}? This cannot be undone"
        if not click.confirm(question, err=True):
            raise MemoriesError("cancelled", "nothing was deleted")
        vault_ref = shown.id  # the vault that was confirmed, even if a name changed meanwhile
    session.emit(*session.call(p.VaultDelete(vault=vault_ref)), render.vault_deleted)
