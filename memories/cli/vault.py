"""``vault create|list|show|policy|rename|delete``. Every VAULT argument is a vault id or its unique name."""

from __future__ import annotations

import sys

import click

from memories import protocol as p
from memories.cli.output import Session, command, common_options, counted, local_time, table
from memories.cli.terminal import escape
from memories.errors import MemoriesError


@click.group()
@common_options
def vault(json_mode: bool, home: str | None, config: str | None) -> None:
    """Create, inspect, rename and delete vaults."""


def _show_vault(document: dict) -> None:
    """``ID  NAME``, and ``(device-only)`` for a vault that is (a vault that is not needs no word: models are used
    only when the config names them)."""
    click.echo(f"{document['id']}  {document['name']}{'  (device-only)' if document['device_only'] else ''}")


@command(vault)
@click.argument("name")
@click.option("--device-only", is_flag=True, help="Never send this vault's data to a non-loopback model endpoint.")
def create(session: Session, name: str, device_only: bool) -> None:
    """Create a vault with its own data key."""
    session.emit(*session.call(p.VaultCreate(name=name, device_only=device_only)), _show_vault)


@command(vault, name="list")
def list_(session: Session) -> None:
    """List vaults."""

    def human(document: dict) -> None:
        rows = [[v["id"], v["name"], "yes" if v["device_only"] else "no"] for v in document["vaults"]]
        table(rows, ["id", "name", "device-only"])

    session.emit(*session.call(p.VaultList()), human)


@command(vault)
@click.argument("vault_ref", metavar="VAULT")
def show(session: Session, vault_ref: str) -> None:
    """Show one vault."""

    def human(document: dict) -> None:
        _show_vault(document)
        created = local_time(document["created"])
        click.echo(f"created {created}, {counted(document['records'], 'record')}")

    session.emit(*session.call(p.VaultShow(vault=vault_ref)), human)


@command(vault)
@click.argument("vault_ref", metavar="VAULT")
@click.option("--device-only", "device_only", type=click.Choice(["on", "off"]), required=True)
def policy(session: Session, vault_ref: str, device_only: str) -> None:
    """Turn the device-only policy on or off."""
    request = p.VaultPolicy(vault=vault_ref, device_only=device_only == "on")
    session.emit(
        *session.call(request),
        lambda d: click.echo(f"{d['id']}  {d['name']}  device-only: {'on' if d['device_only'] else 'off'}"),
    )


@command(vault)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("name")
def rename(session: Session, vault_ref: str, name: str) -> None:
    """Give a vault a new name (its id and records stay)."""
    session.emit(*session.call(p.VaultRename(vault=vault_ref, name=name)), _show_vault)


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
        name, records = escape(shown["name"]), counted(shown["records"], "record")
        question = f"Delete vault {name} ({escape(shown['id'])}) and its {records}? This cannot be undone"
        if not click.confirm(question, err=True):
            raise MemoriesError("cancelled", "nothing was deleted")
        vault_ref = shown["id"]  # the vault that was confirmed, even if a name changed meanwhile
    session.emit(
        *session.call(p.VaultDelete(vault=vault_ref)),
        lambda d: click.echo(
            f"deleted vault {d['name']} ({d['id']}) with {counted(d['records'], 'record')}; "
            f"{counted(d['revoked_grants'], 'grant')} revoked"
        ),
    )
