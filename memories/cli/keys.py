"""``init``, ``unlock`` and ``lock``: the passphrase is prompted on a terminal or read as one line from stdin."""

from __future__ import annotations

import sys

import click

from memories import protocol as p
from memories.cli import render
from memories.cli.output import Session, command
from memories.errors import MemoriesError
from memories.limits import MAX_PASSPHRASE_BYTES, check_passphrase_length

_STDIN_HELP = "Read the passphrase as one line from standard input (never from an argument)."

SHORT_OPTION = "--allow-short-passphrase"
"""``init``'s option that accepts a passphrase under 8 characters (named in the message only where it exists)."""


def read_passphrase(from_stdin: bool, confirm: bool, *, check_length: bool = False, override: str | None = None) -> str:
    """The passphrase from one line of stdin (without its line ending) or a hidden terminal prompt. On a terminal,
    an empty entry (and with ``check_length`` one that is too short) is asked for again, saying why; ``override``:
    the command's option that accepts a short passphrase, if it has one.

    Raises:
        MemoriesError: ``invalid_passphrase`` when stdin is empty or the two entries differ, or with
            ``check_length`` a passphrase from stdin is too short; ``invalid_argument`` when there is no terminal
            to prompt on and ``--passphrase-stdin`` was not given.
    """
    if from_stdin:
        line = sys.stdin.buffer.readline(MAX_PASSPHRASE_BYTES + 2)  # never more than a passphrase and its newline
        if not line:
            raise MemoriesError("invalid_passphrase", "standard input held no passphrase line")
        if len(line.rstrip(b"\r\n")) > MAX_PASSPHRASE_BYTES:
            raise MemoriesError("invalid_passphrase", f"the passphrase is longer than {MAX_PASSPHRASE_BYTES} bytes")
        passphrase = line.rstrip(b"\r\n").decode("utf-8", "surrogateescape")
        if check_length:
            check_passphrase_length(passphrase, override)
        return passphrase
    if not sys.stdin.isatty():
        raise MemoriesError("invalid_argument", "no terminal to prompt for a passphrase; use --passphrase-stdin")
    while True:
        first = click.prompt("Passphrase", hide_input=True, err=True, default="", show_default=False)
        try:
            if not first.strip():
                raise MemoriesError("invalid_passphrase", "the passphrase cannot be empty or only spaces")
            if check_length:
                check_passphrase_length(first, override)
            break
        except MemoriesError as exc:
            click.echo(f"{exc.message}; try again (Ctrl-C to stop)", err=True)
    if confirm and click.prompt("Repeat passphrase", hide_input=True, err=True) != first:
        raise MemoriesError("invalid_passphrase", "the two passphrases differ")
    return first


@command(None)
@click.option("--passphrase-stdin", is_flag=True, help=_STDIN_HELP)
@click.option(SHORT_OPTION, is_flag=True, help="Accept a passphrase shorter than 8 characters.")
def init(session: Session, passphrase_stdin: bool, allow_short_passphrase: bool) -> None:
    """Create the key hierarchy of this home from a passphrase (the daemon must be running)."""
    status, _ = session.call(p.Status())  # before asking for a passphrase that would be of no use
    if status.initialized:
        raise MemoriesError("already_initialized", "this home already has a key hierarchy; use `memories unlock`")
    passphrase = read_passphrase(
        passphrase_stdin, confirm=True, check_length=not allow_short_passphrase, override=SHORT_OPTION
    )
    session.emit(*session.call(p.Init(passphrase=passphrase, allow_short=allow_short_passphrase)), render.lock_state)


@command(None)
@click.option("--passphrase-stdin", is_flag=True, help=_STDIN_HELP)
def unlock(session: Session, passphrase_stdin: bool) -> None:
    """Unlock the home in the running daemon."""
    passphrase = read_passphrase(passphrase_stdin, confirm=False)
    session.emit(*session.call(p.Unlock(passphrase=passphrase)), render.lock_state)


@command(None)
def lock(session: Session) -> None:
    """Drop every key and cancel every vault job; workers that saw plaintext are restarted."""
    session.emit(*session.call(p.Lock()), render.lock_state)
