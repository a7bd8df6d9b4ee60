"""``jobs`` and ``jobs cancel ID``."""

from __future__ import annotations

import click

from memories import protocol as p
from memories.cli import render
from memories.cli.output import Session, command, common_options


@click.group(invoke_without_command=True)
@common_options
@click.pass_context
def jobs(ctx: click.Context, json_mode: bool, home: str | None, config: str | None) -> None:
    """Queued, running and recent jobs (`jobs list`, the default) and `jobs cancel ID`."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_jobs)


@command(jobs, name="list")
def list_jobs(session: Session) -> None:
    """List queued, running and recently finished jobs."""
    session.emit(*session.call(p.Jobs()), render.jobs)


@command(jobs)
@click.argument("job_id", type=click.IntRange(1, 2**62))
def cancel(session: Session, job_id: int) -> None:
    """Cancel a queued or running job and show its new state."""
    session.emit(*session.call(p.JobCancel(job_id=job_id)), render.jobs)
