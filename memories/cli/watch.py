"""``rag watch VAULT DIR``, ``rag watch list [VAULT]``, ``rag unwatch VAULT DIR``: folders the daemon keeps
imported while the home is unlocked."""

from __future__ import annotations

import os

import click

from memories import protocol as p
from memories.cli import render
from memories.cli.output import Session, command, import_exit_status


@command(None, name="watch")
@click.argument("vault_ref", metavar="VAULT")
@click.argument("folder", metavar="DIR", required=False)
@click.option("--recursive/--no-recursive", default=None, help="Watch subfolders too (default: as registered; no).")
@click.option("--exclude", multiple=True, metavar="GLOB", help="gitignore-style pattern to leave out (repeatable).")
@click.option(
    "--on-delete",
    type=click.Choice(["delete", "keep"]),
    help="A file that is gone: delete its card after the deletion rules (default), or keep it, marked missing.",
)
@click.option(
    "--resume", is_flag=True, help="Resume a paused watch: what is still absent is deleted (within the rules)."
)
@click.option("--accept-deletions", is_flag=True, help="Resume a paused watch and delete what is absent, however much.")
def watch(
    session: Session,
    vault_ref: str,
    folder: str | None,
    recursive: bool | None,
    exclude: tuple[str, ...],
    on_delete: str | None,
    resume: bool,
    accept_deletions: bool,
) -> int:
    """Watch DIR: import it now as `rag ingest` would, then keep VAULT current while the home is unlocked.

    `rag watch list [VAULT]` lists the watched folders (so a vault named `list` is watched through its id). A file
    counts as deleted only when two scans 10 s apart miss it; a folder that vanishes, is replaced or unreadable, or
    more deletions than max(5, 25 % of its cards) within ten minutes pause the watch, and nothing is deleted until
    --resume or --accept-deletions.

    Exit status 3 when some files were refused or the vault is now over an index limit.
    """
    if vault_ref == "list":  # whatever the current folder holds: a folder named like the vault is no reason to watch
        return _list(session, folder)
    if folder is None:
        raise click.UsageError("give the folder to watch (DIR), or `rag watch list`")
    if not os.path.isdir(folder):
        raise click.BadParameter(f"{folder!r} is not a folder", param_hint="DIR")
    request = p.RagWatch(
        vault=vault_ref,
        folder=os.path.abspath(folder),
        recursive=recursive,
        exclude=list(exclude) if exclude else None,
        on_delete=on_delete,  # type: ignore[arg-type]
        resume=resume,
        accept_deletions=accept_deletions,
    )
    report, warnings = session.call(request, progress=True)
    session.emit(report, warnings, render.watch_report)
    # The watch is registered whatever its files did: any file not refused counts as in (skipped, deleted too).
    return import_exit_status(report, went_in={"added", "updated", "moved", "unchanged", "skipped", "deleted"})


def _list(session: Session, vault_ref: str | None) -> int:
    session.emit(*session.call(p.RagWatchList(vault=vault_ref)), render.watch_listing)
    return 0


@command(None, name="unwatch")
@click.argument("vault_ref", metavar="VAULT")
@click.argument("folder", metavar="DIR")
def unwatch(session: Session, vault_ref: str, folder: str) -> None:
    """Stop watching DIR (its cards stay in VAULT)."""
    request = p.RagUnwatch(vault=vault_ref, folder=os.path.abspath(folder))
    session.emit(*session.call(request), lambda done: render.unwatched(done, request.folder))
