"""``vault create|list|show|policy``. Every VAULT argument is a vault id or its unique name."""

from __future__ import annotations

import datetime

import click

from memories import protocol as p
from memories.cli.output import Session, command, table


@click.group()
def vault() -> None:
    """Create and inspect vaults."""


def _show_vault(document: dict) -> None:
    policy = "device-only" if document["device_only"] else "may use configured models"
    click.echo(f"{document['id']}  {document['name']}  ({policy})")


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
        created = datetime.datetime.fromtimestamp(document["created"]).isoformat(timespec="seconds")
        click.echo(f"created {created}, {document['records']} records")

    session.emit(*session.call(p.VaultShow(vault=vault_ref)), human)


@command(vault)
@click.argument("vault_ref", metavar="VAULT")
@click.option("--device-only", "device_only", type=click.Choice(["on", "off"]), required=True)
def policy(session: Session, vault_ref: str, device_only: str) -> None:
    """Turn the device-only policy on or off."""
    request = p.VaultPolicy(vault=vault_ref, device_only=device_only == "on")
    session.emit(*session.call(request), _show_vault)
