"""Watched folders: ``rag watch|unwatch``, ``rag watch list``, and the watches that keep vaults current while the
home is unlocked.

A registration (:class:`memories.vault.watches.Watch`) is sealed in the home and survives restarts. At every unlock
each active watch scans its folder at once (the catch-up: changes made while locked or stopped), then waits for
file system events from watchfiles (inotify, FSEvents, ReadDirectoryChangesW through the Rust ``notify`` crate),
debounced there (a burst ends after 50 ms without an event, or after 1.6 s), and scans again. Events only say
*that* something changed: each scan compares the whole folder with what the watch imported (size, modification
time, inode per file), so a missed event, a folder moved within, or a ``git pull`` of a thousand files is one
correct scan. A scan is a background job of kind ``watch`` (``memories jobs``, unless it found nothing to do: the
quiet scan every 5 minutes would push every other job out of the list): the changed files go through the
ingest job's own import (:meth:`memories.daemon.ingest.job.Ingest.import_items`: the same rules, the same card
identity, the ``moved`` rule for renames), gone files through the deletion rules
(:mod:`memories.daemon.ingest.folder_scan`), then the index is brought up to date and the background index embeds
the new chunks (:meth:`memories.daemon.index.indexing.Indexing.start_reindex`).

A watcher that cannot start (the inotify watch limit, or a network file system, which sends no events for changes
made on other machines) falls back to a scan every :data:`POLL_SECONDS`, and says why and how to raise the limit.
Lock stops every watch; a paused watch waits for ``rag watch VAULT DIR --resume``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
import trio

from memories import protocol as p
from memories.daemon.core.context import Handlers, RequestContext, StartSoon
from memories.daemon.core.jobs import Epochs, JobManager, VaultJob
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.index.feed import IndexFeed
from memories.daemon.index.indexing import Indexing
from memories.daemon.ingest import folder_scan
from memories.daemon.ingest.folder_events import Watchers, within
from memories.daemon.ingest.folder_scan import FolderProblem, Listing, Plan, identity
from memories.daemon.ingest.job import Ingest
from memories.daemon.ingest.note_files import exclusions
from memories.errors import MemoriesError
from memories.logs import log_failure, without_folder
from memories.testing import TestHooks, grant_clock, unreadable_folders
from memories.vault.rules import new_id
from memories.vault.store import VaultRow
from memories.vault.watches import Watch, WatchedFile

log = logging.getLogger("memories.watch")

Q = TypeVar("Q")
R = TypeVar("R")
_NOTHING_DONE = frozenset({"unchanged", "skipped"})
"""The results of a scan that changed nothing (a file touched with the same text, one the walk skips)."""
Status = Callable[[Q, RequestContext], Awaitable[R]]
"""A status request's handler (``daemon status``, ``rag status``)."""


class FolderWatches:
    """Watched folders (see the module's docstring).

    Args:
        store: the store gate; jobs: the job queue (each scan is a job); epochs: bumped by deletions;
        ingest: imports the changed files; index_feed: the index cache, brought up to date after a change;
        indexing: the background index that embeds the new chunks; start_soon: starts a watch in the daemon's nursery;
        home: the home's folder (it and what is inside it are refused); sync_folders: the sync folders (refused);
        hooks: the test hooks (``None`` outside the tests): the daemon's clock (``clock_offset_file``), folders
        treated as unreadable, a watcher that cannot start.

    Attributes:
        watchers: the running watches (:class:`~memories.daemon.ingest.folder_events.Watchers`).
    """

    def __init__(
        self,
        store: StoreGate,
        jobs: JobManager,
        epochs: Epochs,
        ingest: Ingest,
        index_feed: IndexFeed,
        indexing: Indexing,
        start_soon: StartSoon,
        home: str,
        sync_folders: Callable[[], Awaitable[list[str]]],
        hooks: TestHooks | None = None,
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._epochs = epochs
        self._ingest = ingest
        self._index_feed = index_feed
        self._indexing = indexing
        self._home = home
        self._sync_folders = sync_folders
        self.clock = grant_clock(hooks)
        self._unreadable = unreadable_folders(hooks)
        self.watchers = Watchers(self._background_scan, start_soon)
        self.watchers.watcher_error = hooks.watcher_error if hooks else None

    def handlers(
        self, daemon_status: Status[p.Status, p.DaemonStatus], rag_status: Status[p.RagStatus, p.RagStatusReport]
    ) -> Handlers:
        """The requests this module answers, and the two statuses (``daemon status``, ``rag status``) as their
        handlers answer them, with the watched folders added (while locked, their number)."""

        async def daemon(request: p.Status, ctx: RequestContext) -> p.DaemonStatus:
            report = await daemon_status(request, ctx)
            if not report.initialized:
                return report
            count, watches = await self.infos(None)
            return msgspec.structs.replace(report, watch_count=count, watches=watches)

        async def vault(request: p.RagStatus, ctx: RequestContext) -> p.RagStatusReport:
            report = await rag_status(request, ctx)
            count, watches = await self.infos(await self._store.resolve(request.vault))
            return msgspec.structs.replace(report, watch_count=count, watches=watches)

        return {
            p.RagWatch: self.register,
            p.RagWatchList: self.listing,
            p.RagUnwatch: self.unregister,
            p.Status: daemon,
            p.RagStatus: vault,
        }

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def start_all(self) -> None:
        """At unlock: start every active watch; each scans its folder at once (the catch-up)."""
        for vault in await self._store.vaults():
            try:
                watches = await self._store.watches(vault)
            except MemoriesError as exc:
                log.warning("the watches of vault %s cannot be read: %s", vault.id, exc.code)
                continue
            for watch in watches:
                if watch.paused is None:
                    self.watchers.start(vault, watch)

    def stop_all(self) -> None:
        """At lock: stop every watch (their folders are scanned again at the next unlock)."""
        self.watchers.stop_all()

    async def _background_scan(self, vault: VaultRow, watch_id: str) -> bool | None:
        """One scan with no client (:data:`memories.daemon.ingest.folder_events.Scan`)."""
        try:
            _, follow_up = await self.scan(vault, watch_id, RequestContext())
        except MemoriesError as exc:
            if exc.code in ("watch_paused", "watch_not_found", "vault_not_found", "vault_locked", "cancelled"):
                return None
            log.warning("a scan of watch %s failed: %s", watch_id, exc.code)
            return False
        except Exception as exc:  # a bug must not end the daemon; the job shows internal_error
            log_failure(log, f"a scan of watch {watch_id} failed unexpectedly", exc)
            return False
        return follow_up

    # -- requests ------------------------------------------------------------------------------------------

    async def register(self, request: p.RagWatch, ctx: RequestContext) -> p.WatchReport:
        """``rag watch``: register a folder and import it, or resume (``--resume``, ``--accept-deletions``) or
        change (``--exclude``, ``--recursive``, ``--on-delete``) a registered one and scan it now.

        Raises:
            MemoriesError: ``invalid_argument`` (a relative path; not a folder; the home, a folder inside it, a sync
                folder or ``/``; a malformed ``--exclude``), ``watch_not_found`` (``--resume`` of a folder not
                watched), ``watch_paused`` (the folder is still gone or unreadable), ``vault_locked``.
        """
        vault = await self._store.resolve_unlocked(request.vault)
        if not os.path.isabs(request.folder):
            raise MemoriesError("invalid_argument", f"the folder must be an absolute path, not {request.folder!r}")
        if request.exclude is not None:
            exclusions(request.exclude)  # a malformed pattern is the caller's error, before any work
        folder = await trio.to_thread.run_sync(os.path.realpath, request.folder)
        watch = next((w for w in await self._store.watches(vault) if w.folder == folder), None)
        resuming = request.resume or request.accept_deletions
        if watch is None:
            if resuming:
                raise _not_watched(vault, request.folder)
            await _refuse(folder, self._home, await self._sync_folders())
            device, inode = await _identity(folder, "")
            watch = Watch(
                id=new_id(), vault_id=vault.id, folder=folder, device=device, inode=inode, created=self.clock()
            )
        elif resuming:
            watch.device, watch.inode = await _identity(folder, " and stays paused")
            watch.paused = None
        if request.recursive is not None:
            watch.recursive = request.recursive
        if request.exclude is not None:
            watch.exclude = list(request.exclude)
        if request.on_delete is not None:
            watch.on_delete = request.on_delete
        await self._store.put_watch(vault, watch)
        self.watchers.stop(watch.id)
        try:
            report, _ = await self.scan(
                vault, watch.id, ctx, accept_deletions=request.accept_deletions, resuming=request.resume
            )
        finally:
            current = await self._find(vault, watch.id)
            if current is not None and current.paused is None:
                self.watchers.start(vault, current)
        return msgspec.structs.replace(report, watch=self._info(vault, current or watch))

    async def unregister(self, request: p.RagUnwatch, ctx: RequestContext) -> p.Done:
        """``rag unwatch``: forget the folder's watch (its cards stay). Raises ``watch_not_found``."""
        vault = await self._store.resolve_unlocked(request.vault)
        folder = await trio.to_thread.run_sync(os.path.realpath, request.folder)
        watch = next((w for w in await self._store.watches(vault) if w.folder in (folder, request.folder)), None)
        if watch is None:
            raise _not_watched(vault, request.folder)
        self.watchers.stop(watch.id)
        await self._store.remove_watch(watch.id)
        return p.Done(ok=True)

    async def listing(self, request: p.RagWatchList, ctx: RequestContext) -> p.WatchListing:
        """``rag watch list``: every watch (of one vault); while locked only their number."""
        vault = await self._store.resolve(request.vault) if request.vault is not None else None
        count, infos = await self.infos(vault)
        return p.WatchListing(locked=self._store.locked, count=count, watches=infos)

    async def infos(self, vault: VaultRow | None) -> tuple[int, list[p.WatchInfo]]:
        """How many folders are watched (into ``vault`` when given), and each of them while unlocked."""
        count = await self._store.watch_count(vault)
        if self._store.locked:
            return count, []
        vaults = [vault] if vault is not None else await self._store.vaults()
        infos: list[p.WatchInfo] = []
        for row in vaults:
            try:
                watches = await self._store.watches(row)
            except MemoriesError as exc:  # a status must answer; the damaged registration is named in the log
                log.warning("the watches of vault %s cannot be read: %s", row.id, exc.code)
                continue
            infos.extend(self._info(row, watch) for watch in watches)
        return count, infos

    def _info(self, vault: VaultRow, watch: Watch) -> p.WatchInfo:
        return watch_info(vault, watch, self.watchers.state(watch.id))

    # -- one scan ------------------------------------------------------------------------------------------

    async def scan(
        self,
        vault: VaultRow,
        watch_id: str,
        ctx: RequestContext,
        *,
        accept_deletions: bool = False,
        resuming: bool = False,
    ) -> tuple[p.WatchReport, bool]:
        """Scan the watch's folder as one ``watch`` job: import what is new or changed, delete the cards of files
        gone for good, or pause the watch (``watch_paused``, nothing deleted). Returns the report and whether a
        follow-up scan should confirm an absence.

        Raises:
            MemoriesError: ``watch_paused``, ``watch_not_found``, and the job's failures (``vault_locked``, ...).
        """
        job = self._jobs.new_job("watch", vault.id, vault.name, epoch_checked=False)
        job.background = ctx.detached
        ctx.attach(job)

        async def work(job: VaultJob) -> tuple[p.WatchReport, bool]:
            watch = await self._find(vault, watch_id)
            if watch is None:
                raise MemoriesError("watch_not_found", "the folder is no longer watched")
            if watch.paused is not None:
                raise _paused(vault, watch)
            now = self.clock()
            try:
                listing = await trio.to_thread.run_sync(
                    folder_scan.scan, watch, self._unreadable, abandon_on_cancel=True
                )
            except FolderProblem as problem:
                raise await self._pause(vault, watch, str(problem)) from None
            planned = folder_scan.plan(watch, listing, now, accept_deletions=accept_deletions)
            if planned.pause is not None:
                watch.files = planned.files
                raise await self._pause(vault, watch, planned.pause, resumed=resuming)
            results, changed = await self._ingest.import_items(job, vault, planned.imports, known=planned.known)
            refusals = _remember(watch, planned, listing, results)
            deleted = await self._delete(vault, watch, planned.deletions, now)
            if deleted:  # the files a scan handled are those it imported and those whose cards it deleted
                job.progress(job.done + len(deleted), (job.total or 0) + len(deleted), "files")
            if watch.last_scan is None:  # a name the walk refuses (not UTF-8) is reported by the first scan only
                results.extend(listing.reported)
            results.extend(deleted)
            if refusals:  # said once, not at every event: the watch shows each file's refusal until it changes
                log.warning("watch %s: %d files refused", watch.id, len(refusals))
            if listing.unlisted and listing.unlisted != watch.unlisted:  # said once, not at every event
                log.warning("watch %s: %d subfolders cannot be read", watch.id, len(listing.unlisted))
            watch.unlisted = listing.unlisted
            over_limit = None
            if changed or deleted:
                watch.last_change = now
                over_limit = await self._refresh(job, vault, watch)
            watch.last_scan = now
            await self._store.put_watch(vault, watch)
            # A background scan is listed in ``memories jobs`` only when it did something: not for files touched
            # but unchanged (an editor's save of the same text, a sync tool's pass), which would fill the history.
            job.recorded = not job.background or any(result.status not in _NOTHING_DONE for result in results)
            return p.WatchReport(watch=self._info(vault, watch), results=results, over_limit=over_limit), bool(
                planned.follow_up
            )

        return await self._jobs.run(job, work)

    async def _pause(self, vault: VaultRow, watch: Watch, why: str, *, resumed: bool = False) -> MemoriesError:
        """Pause the watch (stored), log it without its folder, and return the ``watch_paused`` error its job ends
        with (``resumed``: a ``--resume`` found the deletions still over the limit)."""
        watch.paused = why
        await self._store.put_watch(vault, watch)
        log.warning("watch %s of vault %s paused: %s", watch.id, vault.id, without_folder(why, watch.folder))
        return _paused(vault, watch, resumed=resumed)

    async def _delete(self, vault: VaultRow, watch: Watch, sources: list[str], now: float) -> list[p.IngestResult]:
        """Delete the cards of ``sources`` (gone for good); a card already deleted is no error, and a card another
        file of the folder now holds (it was moved) is not deleted."""
        deleted = []
        for source in sources:
            entry = watch.files.pop(source, None)
            held = {e.card for e in watch.files.values() if e.absent_since is None}
            if entry is None or entry.card is None or entry.card in held:
                continue
            try:
                await self._store.delete(vault, entry.card)
            except MemoriesError as exc:
                if exc.code != "record_not_found":
                    watch.files[source] = entry
                    raise
            watch.deletions.append(now)
            deleted.append(
                p.IngestResult(path=os.path.join(watch.folder, source), source=source, status="deleted", id=entry.card)
            )
        if deleted:
            self._epochs.bump(vault.id)
        watch.deletions = [moment for moment in watch.deletions if now - moment < 600]
        return deleted

    async def _refresh(self, job: VaultJob, vault: VaultRow, watch: Watch) -> p.ErrorInfo | None:
        """Bring the index cache up to date (a search right after finds it current), then let the background
        index embed the new chunks; a vault now over the index limits says so, as ``rag ingest`` does."""
        watch.index_error = None
        try:
            await self._index_feed.refresh(job, vault)
        except MemoriesError as exc:  # the cards are stored; the index is rebuilt at the next search
            watch.index_error = f"the cards are stored, but the search index is not up to date: {exc.message}"
            if exc.code == "vault_too_large":
                return p.ErrorInfo(code=exc.code, message=exc.message, details=exc.details)
            return None
        await self._indexing.start_reindex(vault)  # joins the vault's background index job when one is queued
        return None

    # -- helpers -------------------------------------------------------------------------------------------

    async def _find(self, vault: VaultRow, watch_id: str) -> Watch | None:
        return next((w for w in await self._store.watches(vault) if w.id == watch_id), None)


async def _identity(folder: str, consequence: str) -> tuple[int, int]:
    try:
        return await trio.to_thread.run_sync(identity, folder)
    except FolderProblem as problem:
        raise MemoriesError("watch_paused", f"{problem}{consequence}", {"folder": folder}) from None


async def _refuse(folder: str, home: str, sync_folders: list[str]) -> None:
    """Raise ``invalid_argument`` for a folder no watch may take: ``/``, the home or a folder inside it, a
    vault's sync folder or a folder inside one, or not a folder."""
    if folder == os.path.sep:
        raise MemoriesError("invalid_argument", "/ cannot be watched; watch the folder of your notes")
    home = await trio.to_thread.run_sync(os.path.realpath, home)
    if within(folder, home):
        raise MemoriesError("invalid_argument", f"{folder} is the Memories home or inside it; it cannot be watched")
    for synced in sync_folders:
        if within(folder, synced):
            raise MemoriesError(
                "invalid_argument", f"{folder} is a vault's sync folder or inside one; it cannot be watched"
            )
    if not await trio.to_thread.run_sync(os.path.isdir, folder):
        raise MemoriesError("invalid_argument", f"{folder} is not a folder")


def watch_info(vault: VaultRow, watch: Watch, running: tuple[str, str | None] | None) -> p.WatchInfo:
    """A watch as ``rag watch list`` and the statuses show it; ``running``: its watcher's mode and note, ``None``
    when it does not run."""
    state = "paused" if watch.paused else "stopped" if running is None else running[0]
    files = watch.files.values()
    return p.WatchInfo(
        vault=vault.id,
        vault_name=vault.name,
        folder=watch.folder,
        recursive=watch.recursive,
        exclude=watch.exclude,
        on_delete=watch.on_delete,
        state=state,  # type: ignore[arg-type]
        cards=sum(entry.card is not None for entry in files),
        missing=sum(entry.card is not None and entry.absent_since is not None for entry in files),
        refused=sum(entry.refused is not None for entry in files),
        last_change=watch.last_change,
        last_scan=watch.last_scan,
        paused=watch.paused,
        error=(running[1] if running is not None else None) or _unlisted(watch) or watch.index_error or _refused(watch),
    )


def _refused(watch: Watch) -> str | None:
    """The first refusal of a file the watch still refuses (and how many more), or ``None``."""
    refusals = [entry.refused for entry in watch.files.values() if entry.refused is not None]
    if not refusals:
        return None
    return refusals[0] + (f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else "")


def _unlisted(watch: Watch) -> str | None:
    """What the subfolders the last scan could not list mean, or ``None``."""
    if not watch.unlisted:
        return None
    more = f" (and {len(watch.unlisted) - 1} more)" if len(watch.unlisted) > 1 else ""
    return (
        f"the subfolder {watch.unlisted[0]}{more} cannot be read: its notes are neither updated nor deleted until it "
        "can be"
    )


def _remember(watch: Watch, planned: Plan, listing: Listing, results: list[p.IngestResult]) -> list[str]:
    """Keep what the import did with each file in the watch's state; returns the refusals new since the last scan
    (each file's refusal is reported once, until the file changes)."""
    files = dict(planned.files)
    new_refusals = []
    for result in results:
        seen = listing.files.get(result.source or "")
        if seen is None:
            continue
        previous = files.get(seen.candidate.source)
        if result.status == "refused":
            message = f"{result.error.code}: {result.error.message}" if result.error else "refused"
            card = previous.card if previous is not None else None
            if previous is None or previous.refused != message:
                new_refusals.append(message)
            files[seen.candidate.source] = WatchedFile(card, seen.size, seen.mtime_ns, seen.inode, None, message)
        elif result.id is not None:
            files[seen.candidate.source] = WatchedFile(result.id, seen.size, seen.mtime_ns, seen.inode)
    # A file renamed or moved within the folder took its card along (the ``moved`` rule): its old name is not a
    # deletion of that card.
    present = {entry.card for entry in files.values() if entry.absent_since is None and entry.card is not None}
    files = {source: e for source, e in files.items() if e.absent_since is None or e.card not in present}
    watch.files = files
    return new_refusals


def _paused(vault: VaultRow, watch: Watch, *, resumed: bool = False) -> MemoriesError:
    """``watch_paused``: why, and the ways on; after a ``--resume`` that found the deletions still over the limit
    (``resumed``), only the ways that can help (``--resume`` again cannot)."""
    command = f"memories rag watch {vault.name} {watch.folder}"
    if resumed:
        advice = (
            f"--resume deletes nothing while that many are gone: put back the files that should stay and run "
            f"`{command} --resume` again, or delete their cards with `{command} --accept-deletions`"
        )
    else:
        advice = (
            f"nothing is deleted until `{command} --resume` (which deletes only what is still absent) or "
            "--accept-deletions"
        )
    return MemoriesError(
        "watch_paused",
        f"the watch of {watch.folder} is paused: {watch.paused}; {advice}",
        {"vault": vault.name, "folder": watch.folder},
    )


def _not_watched(vault: VaultRow, folder: str) -> MemoriesError:
    return MemoriesError(
        "watch_not_found",
        f"vault {vault.name!r} does not watch {folder}; `memories rag watch list` shows its watched folders",
        {"vault": vault.name, "folder": folder},
    )
