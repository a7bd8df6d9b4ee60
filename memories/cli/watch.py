"""``rag watch VAULT DIR``, ``rag watch list [VAULT]``, ``rag unwatch VAULT DIR``: folders the daemon keeps
imported while the home is unlocked."""

from __future__ import annotations

import os

import click

from memories import protocol as p
from memories.cli.output import Session, command, counted, local_time
from memories.cli.terminal import escape
from memories.errors import EXIT_ERROR, EXIT_PARTIAL


def show_watches(watches: list[dict], count: int, locked: bool) -> None:
    """The watched folders as ``rag watch list``, ``rag status`` and ``daemon status`` print them."""
    if locked:
        click.echo(f"watches   {counted(count, 'folder')} (locked: unlock to see them)")
        return
    if not watches:
        click.echo("watches   none")
    for watch in watches:
        rules = ", ".join(
            [*(["recursive"] if watch["recursive"] else []), f"on delete: {watch['on_delete']}"]
            + [f"exclude {pattern}" for pattern in watch["exclude"]]
        )
        click.echo(f"watch     {watch['folder']} -> {watch['vault_name']} ({rules})")
        seen = local_time(watch["last_change"]) if watch["last_change"] else "none yet"
        line = f"          {watch['state']}, {counted(watch['cards'], 'card')}, last change {seen}"
        if watch["missing"]:
            line += f", {watch['missing']} files missing"
        if watch["refused"]:
            line += f", {counted(watch['refused'], 'file')} refused"
        click.echo(line)
        if watch["paused"]:
            click.echo(f"          paused: {watch['paused']}")
            click.echo(
                f"          resume: memories rag watch {watch['vault_name']} {watch['folder']} --resume "
                "(deletes only what is still absent) or --accept-deletions"
            )
        if watch["error"]:
            click.echo(f"          note: {watch['error']}")


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

    `rag watch list [VAULT]` lists the watched folders. A file counts as deleted only when two scans 10 s apart miss
    it; a folder that vanishes, is replaced or unreadable, or more deletions than max(5, 25 % of its cards) within
    ten minutes pause the watch, and nothing is deleted until --resume or --accept-deletions.

    Exit status 3 when some files were refused or the vault is now over an index limit.
    """
    if vault_ref == "list" and (folder is None or not os.path.isdir(folder)):
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
    document, warnings = session.call(request, progress=True)

    def human(document: dict) -> None:
        counts: dict[str, int] = {}
        for result in document["results"]:
            counts[result["status"]] = counts.get(result["status"], 0) + 1
            if result["status"] in ("skipped", "unchanged"):
                continue
            click.echo(f"{result['status']:<9} {result['source'] or result['path']}")
            if result["error"]:
                click.echo(f"          {result['error']['code']}: {result['error']['message']}")
        click.echo(", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing new to import")
        show_watches([document["watch"]], 1, False)

    session.emit(document, warnings, human)
    if document.get("over_limit"):
        over = document["over_limit"]
        click.echo(f"error: {escape(over['code'])}: the cards are stored, but {escape(over['message'])}", err=True)
        return EXIT_PARTIAL
    statuses = [r["status"] for r in document["results"]]
    if "refused" not in statuses:
        return 0
    return EXIT_PARTIAL if any(s != "refused" for s in statuses) else EXIT_ERROR


def _list(session: Session, vault_ref: str | None) -> int:
    document, warnings = session.call(p.RagWatchList(vault=vault_ref))
    session.emit(document, warnings, lambda d: show_watches(d["watches"], d["count"], d["locked"]))
    return 0


@command(None, name="unwatch")
@click.argument("vault_ref", metavar="VAULT")
@click.argument("folder", metavar="DIR")
def unwatch(session: Session, vault_ref: str, folder: str) -> None:
    """Stop watching DIR (its cards stay in VAULT)."""
    request = p.RagUnwatch(vault=vault_ref, folder=os.path.abspath(folder))
    session.emit(*session.call(request), lambda d: click.echo(f"no longer watching {os.path.abspath(folder)}"))
