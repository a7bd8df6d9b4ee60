"""``daemon start|run|stop|status``."""

from __future__ import annotations

import click

from memories import protocol as p
from memories.cli import render
from memories.cli.output import Session, command, common_options


@click.group()
@common_options
def daemon(json_mode: bool, home: str | None, config: str | None) -> None:
    """Run and inspect the daemon of a home."""


@command(daemon)
def start(session: Session) -> None:
    """Start a detached daemon and return once its socket answers (exit 0 if it already runs with this config)."""
    from memories.launcher import start_daemon

    session.emit(start_daemon(session.home), [], render.daemon_started)


@command(daemon)
def run(session: Session) -> None:
    """Run the daemon in the foreground (logs on stderr) until Ctrl-C or `daemon stop`."""
    from memories.daemon.main import run_daemon

    run_daemon(session.home)


@command(daemon)
def stop(session: Session) -> None:
    """Stop the daemon of this home (cancels its jobs; exit 0 if none is running)."""
    from memories.launcher import stop_daemon

    stopped = stop_daemon(session.home)
    document = {"ok": True, "already_stopped": stopped.already_stopped}
    session.emit(document, stopped.warnings, render.daemon_stopped)


@command(daemon)
def status(session: Session) -> None:
    """Pid, uptime, home, config digest, lock state, workers and jobs of the running daemon."""
    session.emit(*session.call(p.Status()), render.daemon_status)
