"""``rag ingest``: UTF-8 Markdown and text files become general, encrypted knowledge cards (R-03, R-04, R-05).

A folder gives the ``.md``/``.txt`` files directly in it, and with ``--recursive`` those of every subfolder;
other files are reported ``skipped``; names starting with ``.`` (``.git``, ``.obsidian``) and a sync tool's or an
editor's temporary and conflict files (:func:`is_temporary`) are not walked; a symbolic link whose target is outside
the folder is ``skipped`` (a link is never followed out of the folder); a subfolder that cannot be listed is
``refused``; a file reached twice in one run is read once (see :func:`_walk`);
``--exclude`` patterns are gitignore-style, matched against the path relative to the folder (a bare name matches
at any depth). A file named explicitly must be text. Each file's ``source`` is its path relative to the folder
given (``/``-separated), or its file name when named directly, as of the ingest that stored the card's latest
revision (an unchanged note ingested through another folder keeps its revision, and its ``source``). A card is its
file: its resolved path is sealed in the card's header (:class:`~memories.vault.sealing.Origin`), so a later ingest
of the same file updates that card, and a different file with the same name never does (see
:meth:`memories.vault.cards.Cards.find_card`).

Refused files (``unsupported_file``: PDF, Office documents, images, archives, NUL bytes, invalid UTF-8; or
``body_too_large``; or ``internal_error`` when reading or storing that one file failed unexpectedly) store
nothing; the other files of the run still go in. A UTF-8 BOM is accepted and removed,
so byte offsets count from the first byte after it.
"""

from __future__ import annotations

import datetime
import fnmatch
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pathspec
import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.context import Handlers, RequestContext
from memories.daemon.index_feed import IndexFeed
from memories.daemon.jobs import Epochs, JobManager, VaultJob
from memories.daemon.store_gate import StoreGate
from memories.daemon.workers import WorkerHandle
from memories.errors import MemoriesError
from memories.files import UTF8_BOM, FileTooLarge, NotRegularFile, read_regular_file
from memories.limits import MAX_BODY_BYTES, body_too_large
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

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt"})

_BINARY_SUFFIXES = frozenset(  # documents, images, archives, executables, databases, media
    (
        ".pdf .doc .docx .xls .xlsx .ppt .pptx .odt .ods .odp .rtf .epub .png .jpg .jpeg .gif .webp .bmp .tif "
        ".tiff .heic .zip .gz .tgz .bz2 .xz .7z .rar .tar .zst .exe .dll .so .dylib .bin .sqlite .db .mp3 .mp4 "
        ".mov .wav .flac .ogg"
    ).split()
)
_MAGIC = (
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive or Office document"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!", "a RAR archive"),
    (b"BZh", "a bzip2 archive"),
    (b"\xfd7zXZ\x00", "an XZ archive"),
    (b"\xd0\xcf\x11\xe0", "an old Office document"),
)


TEMPORARY_NAMES = (
    "*.tmp",  # many editors' and sync tools' files being written (Syncthing's ~syncthing~*.tmp too)
    "~$*",  # Office's owner files
    ".#*",  # Emacs's lock links
    "#*#",  # Emacs's auto-saves
    "*.sync-conflict-*",  # Syncthing's conflict copies
    "* (conflicted copy *",  # Dropbox's conflict copies
    ".~lock*",  # LibreOffice's locks
    "4913",  # the file Vim writes to test a folder before it saves
    "*~",  # backups
    "*.swp",  # Vim's swap files
)
"""A sync tool's or an editor's temporary and conflict files (``fnmatch`` patterns of a file name, case-sensitive):
never notes, never walked."""


def is_temporary(name: str) -> bool:
    """The file name is one of :data:`TEMPORARY_NAMES`.

    >>> [is_temporary(n) for n in ("note.md", "note.sync-conflict-20250301-101500-ABCDEFG.md", "~$note.md", "4913")]
    [False, True, True, True]
    """
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in TEMPORARY_NAMES)


@dataclass(frozen=True)
class Candidate:
    """A file to import: its path as found, its ``source`` (relative to the folder given, or its name), and
    whether it was named explicitly."""

    path: Path
    source: str
    explicit: bool


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
        (:meth:`memories.daemon.indexing.Indexing.start_reindex`), told once an ingest job ends having written.
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
            found.append(Candidate(root, root.name, explicit=True))
        else:
            error = p.ErrorInfo(code="invalid_argument", message=f"{root} does not exist")
            found.append(p.IngestResult(path=raw, source=None, status="refused", error=error))
    seen: set[str] = set()
    for index, item in enumerate(found):
        if isinstance(item, Candidate):
            resolved = os.path.realpath(item.path)
            if resolved in seen:
                found[index] = p.IngestResult(path=str(item.path), source=item.source, status="skipped")
            seen.add(resolved)
    return found


def exclusions(patterns: list[str]) -> pathspec.PathSpec:
    """The ``--exclude`` patterns (gitignore syntax); raises ``invalid_argument`` for one git would not accept."""
    try:
        return pathspec.GitIgnoreSpec.from_lines(patterns)
    except Exception as exc:  # pathspec's pattern errors have no common public base class
        raise MemoriesError("invalid_argument", f"an --exclude pattern is malformed: {exc}") from None


def walk_folder(
    root: Path,
    spec: pathspec.PathSpec,
    recursive: bool,
    unlisted: list[str] | None = None,
    unreadable: Callable[[str], bool] | None = None,
) -> list[Candidate | p.IngestResult]:
    """The files of the folder ``root`` as ``rag ingest`` takes them (see the module's docstring): candidates in
    walk order (folders sorted, names sorted), and the files reported ``skipped`` or ``refused``.

    A subfolder that cannot be listed is left out, as ``os.walk`` does; its path relative to ``root``
    (``/``-separated) is appended to ``unlisted`` when given (a watched folder must not take its files for
    deleted). ``unreadable`` (test hooks: root ignores ``chmod``) names subfolders to treat as unlistable.

    Raises:
        OSError: only when ``root`` itself cannot be listed.
    """
    found: list[Candidate | p.IngestResult] = []
    os.scandir(root).close()  # the folder itself must be listable: its failure is the caller's to report
    inside = os.path.realpath(root)
    left_out = unlisted if unlisted is not None else []

    def unlistable(error: OSError) -> None:
        if error.filename == os.fspath(root):  # the folder itself, since the check above: the caller's to report
            raise error
        left_out.append(Path(os.path.relpath(error.filename, root)).as_posix())

    for folder, dirs, files in os.walk(root, onerror=unlistable):
        relative_folder = Path(folder).relative_to(root)
        if unreadable is not None and folder != str(root) and unreadable(folder):
            left_out.append(relative_folder.as_posix())
            dirs[:] = []
            continue
        dirs[:] = sorted(
            d
            for d in dirs
            if recursive and not d.startswith(".") and not spec.match_file(f"{(relative_folder / d).as_posix()}/")
        )
        for name in sorted(files):
            relative = (relative_folder / name).as_posix()
            if name.startswith(".") or is_temporary(name) or spec.match_file(relative):
                continue
            path = Path(folder) / name
            if os.path.islink(path) and os.path.commonpath([inside, os.path.realpath(path)]) != inside:
                found.append(p.IngestResult(path=str(path), source=relative, status="skipped"))
                continue
            if not _is_utf8(str(path)):
                shown = os.fsencode(path).decode("utf-8", "replace")
                error = p.ErrorInfo(code="invalid_utf8", message=f"{shown}: the file name is not valid UTF-8")
                found.append(p.IngestResult(path=shown, source=None, status="refused", error=error))
                continue
            if path.suffix.lower() in TEXT_SUFFIXES:
                found.append(Candidate(path, relative, explicit=False))
            else:
                found.append(p.IngestResult(path=str(path), source=relative, status="skipped"))
    return found


def _is_utf8(name: str) -> bool:
    """A name from the file system decoded without loss (undecodable bytes come back as lone surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def _read(candidate: Candidate) -> _Read | _Unreadable:
    """Read and check one file in a thread, abandoned on cancel: a read stuck on a hung file system must not hold
    the job (or the daemon)."""
    try:
        path, text, mtime = await trio.to_thread.run_sync(_read_text, candidate, abandon_on_cancel=True)
    except MemoriesError as exc:
        return _Unreadable(_refused(candidate, exc.code, exc.message))
    except Exception as exc:  # a bug one file ran into: that file is refused, the others still go in
        log_failure(log, "ingest: one file failed", exc)  # its type only: a path can say what a note is
        message = f"{candidate.path}: importing it failed unexpectedly ({type(exc).__name__}); see the daemon log"
        return _Unreadable(_refused(candidate, "internal_error", message))
    return _Read(candidate, path, text, mtime)


def _read_text(candidate: Candidate) -> tuple[str, str, float]:
    """The file's resolved path, text and modification time (Unix seconds), read and checked (in a thread).

    Raises:
        MemoriesError: ``unsupported_file`` (binary or not UTF-8), ``body_too_large``, ``invalid_argument``
            (unreadable).
    """
    path = candidate.path
    suffix = path.suffix.lower()
    if suffix in _BINARY_SUFFIXES:
        raise _unsupported(path, f"a {suffix} file is not text")
    data = _read_regular_file(path, MAX_BODY_BYTES + len(UTF8_BOM))
    for magic, what in _MAGIC:
        if data.startswith(magic):
            raise _unsupported(path, f"it is {what}")
    if b"\x00" in data:
        raise _unsupported(path, "it contains NUL bytes")
    data = data.removeprefix(UTF8_BOM)
    if len(data) > MAX_BODY_BYTES:
        raise body_too_large(str(path), len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _unsupported(path, f"it is not valid UTF-8 (byte {exc.start})") from None
    try:
        mtime = os.stat(path).st_mtime
    except OSError:  # gone since it was read: its time is now
        mtime = datetime.datetime.now().timestamp()
    return os.path.realpath(path), text, mtime


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


def _read_regular_file(path: Path, limit: int) -> bytes:
    """:func:`memories.files.read_regular_file`, with its failures as ingest refusals.

    Raises:
        MemoriesError: ``unsupported_file`` (not a regular file), ``body_too_large``, ``invalid_argument``
            (cannot be opened or read).
    """
    try:
        return read_regular_file(path, limit)
    except NotRegularFile:
        raise _unsupported(path, "it is not a regular file (a device, pipe or socket)") from None
    except FileTooLarge:
        raise body_too_large(str(path)) from None
    except OSError as exc:
        raise MemoriesError("invalid_argument", f"cannot read {path}: {exc.strerror}") from None


def _unsupported(path: Path, reason: str) -> MemoriesError:
    return MemoriesError(
        "unsupported_file",
        f"{path}: {reason}; only UTF-8 text and Markdown can be imported — convert it to text first, then import it",
        {"path": str(path)},
    )
