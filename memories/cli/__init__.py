"""The ``memories`` command line: a thin client of the daemon (imports click, msgspec and the protocol only)."""

from __future__ import annotations

import click

from memories import __version__
from memories.cli.output import common_options


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memories")
@common_options
def cli(json_mode: bool, home: str | None, config: str | None) -> None:
    """Memories: a local-first, encrypted personal memory vault."""


def main() -> None:
    """Console-script entry point."""
    from memories.cli import daemon, jobs, keys, memory, rag, vault  # noqa: F401  (they register commands)

    cli(prog_name="memories")
