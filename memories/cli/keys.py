"""``init``, ``unlock`` and ``lock``: the passphrase is prompted on a terminal or read as one line from stdin."""

from __future__ import annotations

import sys

import click

from memories import protocol as p
from memories.cli.output import Session, command
from memories.errors import MemoriesError
from memories.limits import MAX_PASSPHRASE_BYTES

_STDIN_HELP = "Read the passphrase as one line from standard input (never from an argument)."


def read_passphrase(from_stdin: bool, confirm: bool) -> str:
    """The passphrase from one line of stdin (without its line ending) or a hidden terminal prompt.

    Raises:
        MemoriesError: ``invalid_passphrase`` when stdin is empty or the two entries differ; ``invalid_argument``
            when there is no terminal to prompt on and ``--passphrase-stdin`` was not given.
    """
    if from_stdin:
        line = sys.stdin.buffer.readline(MAX_PASSPHRASE_BYTES + 2)  # never more than a passphrase and its newline
        if not line:
            raise MemoriesError("invalid_passphrase", "standard input held no passphrase line")
        if len(line.rstrip(b"\r\n")) > MAX_PASSPHRASE_BYTES:
            raise MemoriesError("invalid_passphrase", f"the passphrase is longer than {MAX_PASSPHRASE_BYTES} bytes")
        return line.rstrip(b"\r\n").decode("utf-8", "surrogateescape")
    if not sys.stdin.isatty():
        raise MemoriesError("invalid_argument", "no terminal to prompt for a passphrase; use --passphrase-stdin")
    first = click.prompt("Passphrase", hide_input=True, err=True)
    if confirm and click.prompt("Repeat passphrase", hide_input=True, err=True) != first:
        raise MemoriesError("invalid_passphrase", "the two passphrases differ")
    return first


def _state(document: dict) -> None:
    click.echo("locked" if document.get("locked") else "unlocked")


@command(None)
@click.option("--passphrase-stdin", is_flag=True, help=_STDIN_HELP)
def init(session: Session, passphrase_stdin: bool) -> None:
    """Create the key hierarchy of this home from a passphrase (the daemon must be running)."""
    passphrase = read_passphrase(passphrase_stdin, confirm=True)
    session.emit(*session.call(p.Init(passphrase=passphrase)), _state)


@command(None)
@click.option("--passphrase-stdin", is_flag=True, help=_STDIN_HELP)
def unlock(session: Session, passphrase_stdin: bool) -> None:
    """Unlock the home in the running daemon."""
    passphrase = read_passphrase(passphrase_stdin, confirm=False)
    session.emit(*session.call(p.Unlock(passphrase=passphrase)), _state)


@command(None)
def lock(session: Session) -> None:
    """Drop every key and cancel every vault job; workers that saw plaintext are restarted."""
    session.emit(*session.call(p.Lock()), _state)
