"""One scan of a watched folder, and what it means for the vault: which files to import, which cards to delete, or
why the watch must pause instead. Blocking (run in a thread) and otherwise pure: the daemon part
(:mod:`memories.daemon.ingest.folder_watch`) runs the imports and deletions as a job.

**Deletions without disasters.** A deleted card is erased on every synced device, so a file counts as deleted only
when two scans at least :data:`CONFIRM_SECONDS` apart found it absent (an editor's unlink-and-rename, a sync tool
replacing a file, is not a deletion). Before anything is deleted the folder itself is checked: gone, not a folder,
another folder in its place (its device or inode changed: renamed away and replaced, or a drive unmounted under
it), or unreadable, and the watch pauses, deleting nothing. So does a scan whose deletions, with those of the last
:data:`WINDOW_SECONDS`, would be more than :func:`deletion_limit` of the folder's cards (a ``git checkout`` of
another branch, a sync tool emptying the folder): nothing is deleted until the person resumes the watch.
"""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from memories import protocol as p
from memories.daemon.ingest.note_files import Candidate, exclusions, walk_folder
from memories.vault.watches import Watch, WatchedFile

CONFIRM_SECONDS = 10.0
"""A file is deleted only when scans at least this far apart both found it absent (issue 20)."""

WINDOW_SECONDS = 600.0
"""Deletions within this window count together against :func:`deletion_limit` (ten minutes, issue 20)."""


def deletion_limit(cards: int) -> int:
    """How many of a folder's ``cards`` may be deleted within :data:`WINDOW_SECONDS` before its watch pauses:
    ``max(5, 25 %)`` (issue 20: a slow delete of many files pauses too).

    >>> deletion_limit(4), deletion_limit(100), deletion_limit(5000)
    (5, 25, 1250)
    """
    return max(5, cards // 4)


@dataclass(frozen=True)
class Seen:
    """A file found by a scan: what to import it as, and its size, modification time (ns) and inode."""

    candidate: Candidate
    size: int
    mtime_ns: int
    inode: int


@dataclass
class Listing:
    """What a scan found: the folder's notes by relative path, the other files it reports (skipped, refused by
    the walk: a name that is not UTF-8), the subfolders it could not list (relative paths) and the notes a cloud
    drive evicted (relative paths): what those hold is neither changed nor absent."""

    files: dict[str, Seen] = field(default_factory=dict)
    reported: list[p.IngestResult] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)
    evicted: set[str] = field(default_factory=set)

    def hides(self, source: str) -> bool:
        """Whether ``source`` is evicted or inside a subfolder this scan could not list."""
        return source in self.evicted or any(source.startswith(folder.rstrip("/") + "/") for folder in self.unlisted)


@dataclass
class Plan:
    """What a scan means: ``imports`` (new or changed files, with the card each is known as), ``deletions``
    (relative paths whose cards go), ``pause`` (why the watch pauses instead of deleting; ``None``), and the new
    state of every file (``files``)."""

    imports: list[Candidate] = field(default_factory=list)
    known: dict[str, str] = field(default_factory=dict)
    deletions: list[str] = field(default_factory=list)
    pause: str | None = None
    files: dict[str, WatchedFile] = field(default_factory=dict)
    follow_up: bool = False
    """Some file is absent and not yet confirmed: scan again in :data:`CONFIRM_SECONDS`."""


class FolderProblem(Exception):
    """The watched folder itself is gone, replaced or unreadable: the watch pauses (the message says why)."""


def identity(folder: str) -> tuple[int, int]:
    """``(device, inode)`` of the folder; raises :class:`FolderProblem` when it is not a readable folder."""
    try:
        stat = os.stat(folder)
    except FileNotFoundError:
        raise FolderProblem(f"the folder {folder} is gone (moved, deleted, or its drive unmounted)") from None
    except OSError as exc:
        raise FolderProblem(f"the folder {folder} cannot be read: {exc.strerror}") from None
    if not os.path.isdir(folder):
        raise FolderProblem(f"{folder} is no longer a folder")
    return stat.st_dev, stat.st_ino


def scan(watch: Watch, unreadable: Callable[[str], bool]) -> Listing:
    """List the watched folder as ``rag ingest`` would walk it, with each note's size, time and inode.

    ``unreadable`` says whether a folder is to be treated as unreadable (test hooks stand in for ``chmod``, which
    root ignores). A subfolder that cannot be listed (its permissions changed, a mount under it failed) is named in
    :attr:`Listing.unlisted`, and a note that iCloud Drive evicted to free space (``note.md`` replaced by its
    placeholder ``.note.md.icloud`` until it is opened) in :attr:`Listing.evicted`: their notes are not absent,
    only unseen.

    Raises:
        FolderProblem: the folder is gone, not a folder, another one than was registered, or unreadable.
    """
    if identity(watch.folder) != (watch.device, watch.inode):
        raise FolderProblem(
            f"the folder {watch.folder} is another folder than the one registered (it was renamed away and replaced, "
            "or a drive was mounted or unmounted there)"
        )
    listing = Listing()
    try:
        if unreadable(watch.folder):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        walked = walk_folder(
            Path(watch.folder), exclusions(watch.exclude), watch.recursive, listing.unlisted, unreadable
        )
    except OSError as exc:
        raise FolderProblem(f"the folder {watch.folder} cannot be read: {exc.strerror}") from None
    resolved: set[str] = set()
    for item in walked:
        if not isinstance(item, Candidate):
            if item.status == "refused":
                listing.reported.append(item)
            continue
        # A file reached twice (a link to another note of the folder) is read once, where it is first found, as
        # ``rag ingest`` reads it: read under both names, its card would take each name in turn at every change.
        if item.target in resolved:
            continue
        resolved.add(item.target)
        try:
            stat = os.stat(item.path)
        except OSError:  # gone between the walk and now: the next scan sees it absent
            continue
        listing.files[item.source] = Seen(item, stat.st_size, stat.st_mtime_ns, stat.st_ino)
    for source in watch.files.keys() - listing.files.keys():
        folder, name = posixpath.split(source)
        if os.path.lexists(os.path.join(watch.folder, folder, f".{name}.icloud")):
            listing.evicted.add(source)
    return listing


def plan(watch: Watch, listing: Listing, now: float, *, accept_deletions: bool = False) -> Plan:
    """What ``listing`` (a scan at Unix time ``now``) means for ``watch``.

    A file new or changed since it was imported (size, modification time or inode) is imported again; a file absent
    is marked absent at its first scan and deleted at a scan at least :data:`CONFIRM_SECONDS` later, with
    ``--on-delete delete``; ``keep`` never deletes. A file the scan could not see (:meth:`Listing.hides`: inside a
    subfolder it could not list, or evicted by iCloud Drive) is kept as it was (unseen is not absent). Deletions
    beyond :func:`deletion_limit` within :data:`WINDOW_SECONDS` pause the watch instead, unless
    ``accept_deletions``.
    """
    result = Plan()
    unseen = {source: entry for source, entry in watch.files.items() if listing.hides(source)}
    result.files.update(unseen)
    # A file renamed or moved within the folder keeps its inode, size and modification time: it keeps its card. The
    # inode alone is no proof: a file system gives a deleted file's inode to the next file made (ext4 at once), so a
    # note deleted and another made in one burst (a git pull, a sync tool, while locked) would become that card.
    gone = {
        (entry.inode, entry.size, entry.mtime_ns): entry.card
        for source, entry in watch.files.items()
        if source not in listing.files and source not in unseen
    }
    for source, seen in listing.files.items():
        entry = watch.files.get(source)
        unchanged = (
            entry is not None
            and (entry.size, entry.mtime_ns, entry.inode) == (seen.size, seen.mtime_ns, seen.inode)
            and entry.absent_since is None
        )
        if unchanged and entry is not None:
            result.files[source] = entry
            continue
        result.imports.append(seen.candidate)
        if entry is not None and entry.card is not None:
            result.known[source] = entry.card
        elif entry is None and (card := gone.get((seen.inode, seen.size, seen.mtime_ns))) is not None:
            result.known[source] = card
        if entry is not None:  # kept until the import says what became of it
            result.files[source] = WatchedFile(entry.card, entry.size, entry.mtime_ns, entry.inode, None, entry.refused)
    for source, entry in watch.files.items():
        if source in listing.files or source in unseen:
            continue
        if entry.card is None:  # a refused file that is gone: nothing to delete, nothing to remember
            continue
        absent_since = entry.absent_since if entry.absent_since is not None else now
        result.files[source] = WatchedFile(entry.card, entry.size, entry.mtime_ns, entry.inode, absent_since)
        if watch.on_delete == "keep":
            continue
        if now - absent_since >= CONFIRM_SECONDS:
            result.deletions.append(source)
        else:
            result.follow_up = True
    if result.deletions and not accept_deletions:
        cards = sum(entry.card is not None for entry in watch.files.values())
        recent = [moment for moment in watch.deletions if now - moment < WINDOW_SECONDS]
        limit = deletion_limit(cards)
        if len(recent) + len(result.deletions) > limit:
            result.pause = (
                f"{len(result.deletions)} files of {watch.folder} are gone"
                + (
                    f" ({len(recent)} more {'was' if len(recent) == 1 else 'were'} deleted in the last ten minutes)"
                    if recent
                    else ""
                )
                + f", more than the {limit} the deletion rules allow at once (max(5, 25 % of {cards} cards)); "
                "nothing was deleted"
            )
            result.deletions = []
    return result
