"""The ``memories`` command line: a thin client of the daemon.

Start-up cost matters (every search is a new process), so the root group loads a subcommand's module only when
that subcommand runs (click's documented lazy-loading pattern), and nothing on this path imports more than click,
msgspec and the protocol.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click
import msgspec

from memories import __version__
from memories.cli.output import common_options

COMMANDS = {
    "daemon": "memories.cli.daemon:daemon",
    "init": "memories.cli.keys:init",
    "unlock": "memories.cli.keys:unlock",
    "lock": "memories.cli.keys:lock",
    "vault": "memories.cli.vault:vault",
    "memory": "memories.cli.memory:memory",
    "rag": "memories.cli.rag:rag",
    "jobs": "memories.cli.jobs:jobs",
    "grant": "memories.cli.grant:grant",
    "inject": "memories.cli.inject:inject",
    "mcp": "memories.cli.mcp:mcp",
    "sync": "memories.cli.sync:sync",
    "web": "memories.cli.web:web",
}
"""Subcommand name -> ``module:attribute`` of its click command."""


class LazyGroup(click.Group):
    """A group whose subcommands are imported from :data:`COMMANDS` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attribute = target.split(":")
        command: Any = getattr(importlib.import_module(module), attribute)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memories")
@common_options
def cli(json_mode: bool, home: str | None, config: str | None) -> None:
    """Memories: a local-first, encrypted personal memory vault."""


def main() -> None:
    """Console-script entry point.

    A usage error is one line on stderr, ``error: usage_error: MESSAGE (see `memories CMD --help`)``, exit status 2
    (click's, for its own errors too); with ``--json`` also the one JSON document (code ``usage_error``, the same
    one-line message). A group given no subcommand prints its help on stderr (what its subcommands are) and says
    ``Missing command.``. Ctrl-C exits 130; a closed stdout pipe (``memories ... | head``) ends the command
    quietly (click exits 1 without a message). SIGPIPE stays ignored, as Python sets it: the daemon runs through
    this entry point too, and a client hanging up must never kill it.
    """
    try:
        cli.main(prog_name="memories", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("error: cancelled: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        _usage_error(exc)
        sys.exit(exc.exit_code)


def _usage_error(exc: click.ClickException) -> None:
    """Report a click error in one line (and one JSON document with ``--json``), never click's four-line block."""
    from memories.cli.terminal import escape

    missing = isinstance(exc, click.exceptions.NoArgsIsHelpError)  # its message is the group's whole help
    # Click lays some messages out on lines of their own ("Choose from:\n\ton,\n\toff"): one line here.
    message = "Missing command." if missing else exc.format_message().replace("\n\t", " ")
    if "--json" in sys.argv[1:]:
        error = {"error": {"code": "usage_error", "message": message}}
        click.echo(msgspec.json.encode(error).decode())
    ctx = exc.ctx if isinstance(exc, click.UsageError) else None
    if missing and ctx is not None:
        click.echo(ctx.get_help(), err=True)
    hint = f" (see `{ctx.command_path} --help`)" if ctx is not None and not missing else ""
    click.echo(f"error: usage_error: {escape(message)}{hint}", err=True)
