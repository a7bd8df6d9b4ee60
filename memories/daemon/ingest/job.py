"""``rag ingest``: UTF-8 Markdown and text files become general, encrypted knowledge cards (R-03, R-04, R-05).

Which files of a folder are notes, and how one is read, is :mod:`memories.daemon.ingest.note_files`; a file reached
twice in one run is read once (see :func:`_walk`). Each file's ``source`` is its path relative to the folder
given (``/``-separated), or its file name when named directly, as of the ingest that stored the card's latest
revision (an unchanged note ingested through another folder keeps its revision, and its ``source``). A card is its
file: its resolved path is sealed in the card's header (:class:`~memories.vault.sealing.Origin`), so a later ingest
of the same file updates that card, and a different file with the same name never does (see
:meth:`memories.vault.cards.Cards.find_card`).

A refused file (see :mod:`~memories.daemon.ingest.note_files`; or ``internal_error`` when reading or storing that
one file failed unexpectedly) stores nothing; the other files of the run still go in.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.core.context import Handlers, RequestContext
from memories.daemon.core.jobs import Epochs, JobManager, VaultJob
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.core.workers import WorkerHandle
from memories.daemon.index.feed import IndexFeed
from memories.daemon.ingest import note_files
from memories.daemon.ingest.note_files import Candidate, exclusions, named_file, walk_folder
from memories.errors import MemoriesError
from memories.logs import log_failure
from memories.vault.store import VaultRow
from memories.vault.views import Note

log = logging.getLogger("memories.ingest")

STEP_FILES = 64
"""Files per ingest step. The vault's epoch is bumped once per step that stored something (and when the job ends),
not once per file, so a search during a long ingest brings the index up to date once per step and answers."""

PARSE_CHARS = 8 * 1024 * 1024
"""Most note text (code points) sent to the index worker in one parse call: a call holds at most :data:`STEP_FILES`
notes, and stops growing once its notes reach this size (a note is at most 2 MiB)."""

STORAGE_CODES = frozenset({"disk_full", "home_read_only"})
"""Failures of the home's disk, not of one file: an ingest stops at the first one (every later file would fail the
same way, each with its own line), keeping the cards it stored."""


@dataclass(frozen=True)
class _Read:
    """A file read and checked, waiting for its parse."""

    candidate: Candidate
    path: str  # resolved, absolute
    text: str
    mtime: float  # Unix seconds


@dataclass(frozen=True)
class _Unreadable:
    """A file refused when it was read (counted among the files done, unlike the walk's own results)."""

    result: p.IngestResult


class _Run:
    """How far one ingest job got: its results in order, the cards it stored (the job's ``details["stored"]``, kept
    when it is cut), the files done, and whether it wrote (this step, at all)."""

    def __init__(self, job: VaultJob, total: int) -> None:
        self.job = job
        self.total = total
        self.results: list[p.IngestResult] = []
        self.stored: list[dict[str, object]] = job.details.setdefault("stored", [])
        self.done = 0
        self.step_changed = False
        self.any_changed = False

    def finished(self, result: p.IngestResult, wrote: bool) -> None:
        """One counted file is done: ``result``, and whether a revision was written."""
        self.results.append(result)
        if result.id is not None:
            self.stored.append(
                {"path": result.path, "id": result.id, "revision": result.revision, "status": result.status}
            )
        self.step_changed |= wrote
        self.any_changed |= wrote
        self.done += 1
        self.job.progress(self.done, self.total, "files")


class Ingest:
    """The ingest job of the daemon.

    Args:
        store: the store gate; jobs: the job queue; index_feed: the index worker's caches, refreshed after an
        ingest; epochs: bumped for every card stored; index: the index worker, which parses the notes' titles and
        front matter (never the supervisor: a note is hostile input); changed: "a vault changed, keep it embedded"
        (:meth:`memories.daemon.index.indexing.Indexing.start_reindex`), told once an ingest job ends having written.
    """

    def __init__(
        self,
        store: StoreGate,
        jobs: JobManager,
        index_feed: IndexFeed,
        epochs: Epochs,
        index: WorkerHandle,
        changed: Callable[[VaultRow], Awaitable[object]],
    ) -> None:
        self._changed = changed
        self._store = store
        self._jobs = jobs
        self._index_feed = index_feed
        self._epochs = epochs
        self._index = index

    def handlers(self) -> Handlers:
        """The requests this module answers."""
        return {p.RagIngest: self.run}

    async def run(self, request: p.RagIngest, ctx: RequestContext) -> p.IngestReport:
        """``rag ingest``: one result per path found.

        A job stopped mid-way (cancel, lock, budget) keeps the cards it stored; its error's ``details`` list them
        (``stored``: ``path``, ``id``, ``revision``, ``status`` of each).
        """
        vault = await self._store.resolve_unlocked(request.vault)
        if request.title is not None and (
            len(request.paths) != 1 or await trio.to_thread.run_sync(os.path.isdir, request.paths[0])
        ):
            raise MemoriesError("invalid_argument", "--title needs exactly one file")
        relative = [path for path in request.paths if not os.path.isabs(path)]
        if relative:
            raise MemoriesError("invalid_argument", f"paths must be absolute, not {relative[0]!r}")
        exclusions(request.exclude)  # a malformed pattern is the caller's error, before any work
        job = self._jobs.new_job("ingest", vault.id, vault.name, epoch_checked=False)
        ctx.attach(job)

        async def work(job: VaultJob) -> p.IngestReport:
            walked = await trio.to_thread.run_sync(_walk, request, abandon_on_cancel=True)
            results, changed = await self.import_items(job, vault, walked, title=request.title)
            over_limit = None
            if changed:
                try:
                    await self._index_feed.refresh(job, vault)
                except MemoriesError as exc:  # the cards are stored; the index is rebuilt at the next search
                    if exc.code != "vault_too_large":
                        ctx.warnings.append(
                            f"the cards are stored, but the search index is not up to date: {exc.message}"
                        )
                    else:
                        over_limit = p.ErrorInfo(code=exc.code, message=exc.message, details=exc.details)
            return p.IngestReport(results=results, over_limit=over_limit)

        try:
            return await self._jobs.run(job, work)
        finally:  # also after a cut or a budget stop: the cards it wrote are a change of the vault
            wrote = any(card["status"] != "unchanged" for card in job.details.get("stored", []))
            if wrote and not self._store.locked:
                with trio.CancelScope(shield=True):  # a moment's work, even for a client that hung up
                    await self._changed(vault)

    async def import_items(
        self,
        job: VaultJob,
        vault: VaultRow,
        items: Sequence[Candidate | p.IngestResult],
        *,
        title: str | None = None,
        known: dict[str, str] | None = None,
    ) -> tuple[list[p.IngestResult], bool]:
        """Import ``items`` as part of ``job``: each :class:`Candidate` is read, parsed (in the index worker, up to
        :data:`STEP_FILES` at a time) and stored; a result already made (a file the walk skipped or refused) is
        passed on. ``known`` maps a candidate's ``source`` to the card a watch remembers for it. The vault's epoch
        is bumped once per step that stored something, and when the run ends or is cut.

        Returns:
            ``(results in order, whether any revision was written)``.
        """
        run = _Run(job, sum(isinstance(item, Candidate) for item in items))
        job.progress(0, run.total, "files")
        batch: list[p.IngestResult | _Read | _Unreadable] = []
        notes = size = 0  # the batch's notes to parse, and their code points
        try:
            for item in items:  # results in the order the paths were given and walked
                if isinstance(item, Candidate):
                    job.check_budget({"done": run.done, "total": run.total})
                    read = await _read(item)
                    if isinstance(read, _Read):
                        notes, size = notes + 1, size + len(read.text)
                    batch.append(read)
                else:
                    batch.append(item)
                if notes == STEP_FILES or size >= PARSE_CHARS:
                    await self._ingest_batch(run, vault, batch, title, known or {})
                    batch, notes, size = [], 0, 0
            await self._ingest_batch(run, vault, batch, title, known or {})
        except MemoriesError as exc:
            if exc.code not in STORAGE_CODES:
                raise
            raise _stopped_by_storage(exc, run) from None
        finally:  # also when the job is cut mid-step: the cards stored so far are a change of the vault
            if run.step_changed:
                self._epochs.bump(vault.id)
        return run.results, run.any_changed

    async def _ingest_batch(
        self,
        run: _Run,
        vault: VaultRow,
        batch: list[p.IngestResult | _Read | _Unreadable],
        title: str | None,
        known: dict[str, str],
    ) -> None:
        """Parse the batch's notes in the index worker (one call), then store them one by one, in order."""
        parsed = iter(await self._parse(run, [entry.text for entry in batch if isinstance(entry, _Read)]))
        for entry in batch:
            if isinstance(entry, _Read):
                run.job.check_budget({"done": run.done, "total": run.total})
                known_card = known.get(entry.candidate.source)
                result, wrote = await self._ingest_one(vault, entry, next(parsed), title, known_card)
            elif isinstance(entry, _Unreadable):
                result, wrote = entry.result, False
            else:  # a file the walk reported: not one of the files counted
                run.results.append(entry)
                continue
            run.finished(result, wrote)
            if run.step_changed and run.done % STEP_FILES == 0:
                self._epochs.bump(vault.id)  # one step of cards: searches meanwhile catch up once per step
                run.step_changed = False

    async def _parse(self, run: _Run, texts: list[str]) -> list[w.ParsedNote | MemoriesError]:
        """Titles and tags of ``texts`` from the index worker; when the worker fails the call (it crashed on one of
        them, or cannot serve), that failure for each."""
        if not texts:
            return []
        run.job.check_budget({"done": run.done, "total": run.total})
        try:
            reply = await run.job.call(self._index, w.ParseNotes(texts=texts), budget=False, epoch=False)
        except MemoriesError as exc:
            return [exc] * len(texts)
        return list(reply.notes)

    async def _ingest_one(
        self,
        vault: VaultRow,
        read: _Read,
        parsed: w.ParsedNote | MemoriesError,
        title: str | None,
        known: str | None,
    ) -> tuple[p.IngestResult, bool]:
        """One file's result, and whether a revision was written."""
        candidate = read.candidate
        path = str(candidate.path)
        if isinstance(parsed, MemoriesError):
            return _refused(
                candidate, parsed.code, f"{path}: reading its title and tags failed: {parsed.message}"
            ), False
        if parsed.failure is not None:  # a parser bug one note ran into: that file is refused, the others go in
            message = f"{path}: importing it failed unexpectedly ({parsed.failure}); see the daemon log"
            return _refused(candidate, "internal_error", message), False
        # A heading over the title limit was cut by the parser; a file name is never over it (255 bytes at most).
        note = Note(
            path=read.path,
            source=candidate.source,
            title=title or parsed.title or candidate.path.name,
            body=read.text,
            tags=parsed.tags,
            date=parsed.date or _local_iso(read.mtime),
        )
        try:
            stored = await self._store.store_card(vault, note, known)
        except MemoriesError as exc:
            if exc.code in STORAGE_CODES:  # no later file would go in either: the job stops here
                raise
            return _refused(candidate, exc.code, exc.message), False
        except Exception as exc:  # a bug one file ran into: that file is refused, the others still go in
            log_failure(log, "ingest: one file failed", exc)  # its type only: a path can say what a note is
            message = f"{path}: importing it failed unexpectedly ({type(exc).__name__}); see the daemon log"
            return _refused(candidate, "internal_error", message), False
        result = p.IngestResult(
            path=path, source=candidate.source, status=stored.status, id=stored.id, revision=stored.revision
        )
        return result, stored.wrote


def _walk(request: p.RagIngest) -> list[Candidate | p.IngestResult]:
    """Expand the paths of a request into files to read and files reported as skipped or refused.

    A file reached more than once (a symbolic link to another note of the run, a path given twice) is read once,
    where it is first found; the later ones are ``skipped``. Read twice, it would update its card twice, to each
    name in turn, on every run.
    """
    spec = exclusions(request.exclude)
    found: list[Candidate | p.IngestResult] = []
    for raw in request.paths:
        root = Path(raw)
        if root.is_dir():
            unlisted: list[str] = []
            try:
                found.extend(walk_folder(root, spec, request.recursive, unlisted))
            except OSError as exc:
                error = p.ErrorInfo(code="invalid_argument", message=f"cannot read the folder {root}: {exc.strerror}")
                found.append(p.IngestResult(path=raw, source=None, status="refused", error=error))
            for folder in unlisted:  # said, not skipped in silence: its notes were not imported
                path = str(root / folder)
                error = p.ErrorInfo(code="invalid_argument", message=f"cannot read the folder {path}")
                found.append(p.IngestResult(path=path, source=None, status="refused", error=error))
        elif root.exists():
            try:
                found.append(named_file(root))
            except OSError as exc:
                error = p.ErrorInfo(code="invalid_argument", message=f"cannot read {root}: {exc.strerror}")
                found.append(p.IngestResult(path=raw, source=None, status="refused", error=error))
        else:
            error = p.ErrorInfo(code="invalid_argument", message=f"{root} does not exist")
            found.append(p.IngestResult(path=raw, source=None, status="refused", error=error))
    seen: set[str] = set()
    for index, item in enumerate(found):
        if isinstance(item, Candidate):
            if item.target in seen:
                found[index] = p.IngestResult(path=str(item.path), source=item.source, status="skipped")
            seen.add(item.target)
    return found


async def _read(candidate: Candidate) -> _Read | _Unreadable:
    """Read and check one file in a thread, abandoned on cancel: a read stuck on a hung file system must not hold
    the job (or the daemon)."""
    try:
        path, text, mtime = await trio.to_thread.run_sync(note_files.read_note, candidate, abandon_on_cancel=True)
    except MemoriesError as exc:
        return _Unreadable(_refused(candidate, exc.code, exc.message))
    except Exception as exc:  # a bug one file ran into: that file is refused, the others still go in
        log_failure(log, "ingest: one file failed", exc)  # its type only: a path can say what a note is
        message = f"{candidate.path}: importing it failed unexpectedly ({type(exc).__name__}); see the daemon log"
        return _Unreadable(_refused(candidate, "internal_error", message))
    return _Read(candidate, path, text, mtime)


def _stopped_by_storage(exc: MemoriesError, run: _Run) -> MemoriesError:
    """``exc`` (``disk_full``, ``home_read_only``) as the ingest's failure: how far it got, and the cards it stored
    (``details.stored``, as for a cut ingest; they are kept)."""
    stored = len(run.stored)
    return MemoriesError(
        exc.code,
        f"{exc.message}; the ingest stopped after {run.done:,} of {run.total:,} files, with "
        f"{stored:,} card{'' if stored == 1 else 's'} stored (kept; run the ingest again to go on)",
        {**exc.details, "done": run.done, "total": run.total, "stored": run.stored},
    )


def _local_iso(seconds: float) -> str:
    """A file's modification time as a note's date: ISO 8601 in local time with its offset, to the second."""
    return datetime.datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="seconds")


def _refused(candidate: Candidate, code: str, message: str) -> p.IngestResult:
    error = p.ErrorInfo(code=code, message=message)
    return p.IngestResult(path=str(candidate.path), source=candidate.source, status="refused", error=error)
