"""``daemon start|run|stop|status``."""

from __future__ import annotations

import click

from memories import protocol as p
from memories.cli.output import Session, command, common_options, table, to_document


@click.group()
@common_options
def daemon(json_mode: bool, home: str | None, config: str | None) -> None:
    """Run and inspect the daemon of a home."""


_CORE_DUMPS = {False: "off", True: "ON", None: "?"}
"""How a process's dumpable flag reads in ``daemon status``: ``off`` is what memories.hardening sets."""


def _show_status(document: dict) -> None:
    click.echo(f"pid       {document['pid']} (core dumps {_CORE_DUMPS[document.get('dumpable')]})")
    click.echo(f"uptime    {document['uptime']:.0f} s")
    click.echo(f"home      {document['home']}")
    click.echo(f"config    {document['config']} ({document['config_digest'][:12]})")
    if not document["initialized"]:
        click.echo("keys      not initialized (run `memories init`)")
    else:
        click.echo(f"keys      {'locked' if document['locked'] else 'unlocked'}")
    click.echo(f"jobs      {document['running_jobs']} running, {document['queued_jobs']} queued")
    if document["restart_needed"]:
        click.echo("restart   needed (settings on disk differ from the running ones)")
    if document.get("watch_count"):
        from memories.cli.watch import show_watches

        show_watches(document["watches"], document["watch_count"], document["locked"])
    table(
        [
            [
                w["name"],
                "-" if w["pid"] is None else str(w["pid"]),  # no process yet: starting, or between restarts
                w["state"],
                str(w["restarts"]),
                _CORE_DUMPS[w.get("dumpable")],
            ]
            for w in document["workers"]
        ],
        ["worker", "pid", "state", "restarts", "core dumps"],
    )


@command(daemon)
def start(session: Session) -> None:
    """Start a detached daemon and return once its socket answers (exit 0 if it already runs with this config)."""
    from memories.launcher import start_daemon

    started = start_daemon(session.home)

    def human(document: dict) -> None:
        if started.already_running:
            click.echo("already running; nothing was started")
        _show_status(document)

    document = {**to_document(started.status), "already_running": started.already_running}
    session.emit(document, [], human)


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
    session.emit(
        document,
        stopped.warnings,
        lambda d: click.echo("not running; nothing was stopped" if d["already_stopped"] else "stopped"),
    )


@command(daemon)
def status(session: Session) -> None:
    """Pid, uptime, home, config digest, lock state, workers and jobs of the running daemon."""
    session.emit(*session.call(p.Status()), _show_status)
