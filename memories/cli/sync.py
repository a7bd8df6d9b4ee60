"""``sync init|join|push|pull|status``: a vault carried between devices through a folder a sync tool shares.

The sync passphrase is asked twice on a terminal for ``init`` (once for ``join``) or read as one line from
stdin; it has the same minimum length as ``init``'s. Folders are sent to the daemon as absolute paths.
"""

from __future__ import annotations

import os

import click

from memories import protocol as p
from memories.cli import render
from memories.cli.keys import read_passphrase
from memories.cli.output import Session, command
from memories.errors import EXIT_PARTIAL

_STDIN_HELP = "Read the sync passphrase as one line from standard input (never from an argument)."


@click.group()
def sync() -> None:
    """Carry a vault between devices through a shared folder (Syncthing, Dropbox, a NAS)."""


def _failed_authentication(report: p.SyncReport) -> int:
    """Exit status 3 when some payload files failed authentication (bad, not still arriving), else 0."""
    return EXIT_PARTIAL if any(not bad.pending for bad in report.bad) else 0


@command(sync, name="init")
@click.argument("vault_ref", metavar="VAULT")
@click.option("--to", "folder", required=True, type=click.Path(file_okay=False), help="The sync folder.")
@click.option("--passphrase-stdin", is_flag=True, help=_STDIN_HELP)
def init(session: Session, vault_ref: str, folder: str, passphrase_stdin: bool) -> None:
    """Make FOLDER the vault's sync folder (asks for a new sync passphrase)."""
    passphrase = read_passphrase(passphrase_stdin, confirm=True, check_length=True)
    request = p.SyncInit(vault=vault_ref, folder=os.path.abspath(folder), passphrase=passphrase)
    session.emit(*session.call(request), render.sync)


@command(sync)
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--name", help="The vault's name here (when this home has a vault of its name already).")
@click.option("--passphrase-stdin", is_flag=True, help=_STDIN_HELP)
def join(session: Session, folder: str, name: str | None, passphrase_stdin: bool) -> None:
    """Add the vault of FOLDER to this home, with its id and key (asks for its sync passphrase)."""
    passphrase = read_passphrase(passphrase_stdin, confirm=False)
    request = p.SyncJoin(folder=os.path.abspath(folder), passphrase=passphrase, name=name)
    session.emit(*session.call(request), render.joined)


@command(sync)
@click.argument("vault_ref", metavar="VAULT")
def push(session: Session, vault_ref: str) -> None:
    """Write the vault's revisions the sync folder lacks."""
    session.emit(*session.call(p.SyncPush(vault=vault_ref)), render.sync)


@command(sync)
@click.argument("vault_ref", metavar="VAULT")
def pull(session: Session, vault_ref: str) -> int:
    """Import what the sync folder holds and this vault has not seen.

    Exit status 3 when some payload files failed authentication (listed as bad; the rest was imported).
    """
    document, warnings = session.call(p.SyncPull(vault=vault_ref))
    session.emit(document, warnings, render.sync)
    return _failed_authentication(document)


@command(sync)
@click.argument("vault_ref", metavar="VAULT")
def status(session: Session, vault_ref: str) -> None:
    """The vault's last push and pull: payloads imported, conflicts, files skipped and why."""
    session.emit(*session.call(p.SyncStatus(vault=vault_ref)), render.sync)
