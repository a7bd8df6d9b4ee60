"""Which files are notes, as ``rag ingest`` and ``rag watch`` take them (R-03, R-04), and reading one.

A folder gives the ``.md``/``.txt`` files directly in it, and with ``--recursive`` those of every subfolder;
other files are reported ``skipped``; names starting with ``.`` (``.git``, ``.obsidian``) and a sync tool's or an
editor's temporary and conflict files (:func:`is_temporary`) are not walked; a symbolic link whose target is outside
the folder is ``skipped`` (a link is never followed out of the folder), one to another note of the folder is read
where it points; a note is read from its folder without following any link (a link swapped in after the walk is
``refused``, :func:`memories.files.read_inside`); a subfolder that cannot be listed is
``refused``; ``--exclude`` patterns are gitignore-style, matched against the path relative to the folder (a bare
name matches at any depth). A file named explicitly must be text.

Refused files (``unsupported_file``: PDF, Office documents, images, archives, NUL bytes, invalid UTF-8; or
``body_too_large``) store nothing. A UTF-8 BOM is accepted and removed, so byte offsets count from the first byte
after it.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pathspec

from memories import protocol as p
from memories.errors import MemoriesError
from memories.files import UTF8_BOM, FileTooLarge, NotRegularFile, SwappedFile, read_inside
from memories.limits import MAX_BODY_BYTES, body_too_large

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
    """A file to import: its path as found, its ``source`` (relative to the folder given, or its name), whether
    it was named explicitly, and where it is read (:func:`memories.files.read_inside`): the resolved ``folder``
    it is read inside, that folder's ``(device, inode)`` as the walk saw it, and the file's path in it
    (``parts``: the link's target, for a symbolic link of the folder to another of its notes)."""

    path: Path
    source: str
    explicit: bool
    folder: str
    folder_identity: tuple[int, int]
    parts: tuple[str, ...]

    @property
    def target(self) -> str:
        """The resolved absolute path read (a card's origin path)."""
        return os.path.join(self.folder, *self.parts)


def named_file(path: Path) -> Candidate:
    """A file named explicitly (``rag ingest VAULT FILE``): the links on its path are the person's choice and are
    resolved now; the read then follows none (see :class:`Candidate`).

    Raises:
        OSError: its folder cannot be reached.
    """
    resolved = os.path.realpath(path)
    folder, name = os.path.split(resolved)
    return Candidate(path, path.name, explicit=True, folder=folder, folder_identity=_identity(folder), parts=(name,))


def _identity(folder: str) -> tuple[int, int]:
    found = os.stat(folder)
    return found.st_dev, found.st_ino


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
    identity = _identity(inside)
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
            parts = Path(relative).parts
            if (real := _link_target(path)) is not None:
                if os.path.commonpath([inside, real]) != inside:
                    found.append(p.IngestResult(path=str(path), source=relative, status="skipped"))
                    continue
                parts = Path(os.path.relpath(real, inside)).parts  # read where it points, never through it
            if not _is_utf8(str(path)):
                shown = os.fsencode(path).decode("utf-8", "replace")
                error = p.ErrorInfo(code="invalid_utf8", message=f"{shown}: the file name is not valid UTF-8")
                found.append(p.IngestResult(path=shown, source=None, status="refused", error=error))
                continue
            if path.suffix.lower() in TEXT_SUFFIXES:
                found.append(Candidate(path, relative, False, inside, identity, parts))
            else:
                found.append(p.IngestResult(path=str(path), source=relative, status="skipped"))
    return found


def _link_target(path: Path) -> str | None:
    """The resolved target of ``path`` when it is a symbolic link, else ``None``.

    A link swapped for a file between the check and the resolution (``os.path.realpath`` reads the link it saw,
    and Python 3.11's raises ``EINVAL`` when a file stands there by then) is no link: what is there now is read
    as a file, with ``O_NOFOLLOW`` (:func:`read_note`), which refuses it should a link be back by then.
    """
    if not os.path.islink(path):
        return None
    try:
        return os.path.realpath(path)
    except OSError:
        return None


def _is_utf8(name: str) -> bool:
    """A name from the file system decoded without loss (undecodable bytes come back as lone surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_note(candidate: Candidate) -> tuple[str, str, float]:
    """The file's resolved path, text and modification time (Unix seconds), read and checked (in a thread),
    inside its folder without following a link (:func:`memories.files.read_inside`).

    Raises:
        MemoriesError: ``unsupported_file`` (binary or not UTF-8, not a regular file), ``body_too_large``,
            ``invalid_argument`` (unreadable, or a symbolic link or another folder took its place).
    """
    path = candidate.path
    suffix = path.suffix.lower()
    if suffix in _BINARY_SUFFIXES:
        raise _unsupported(path, f"a {suffix} file is not text")
    data, mtime = _read_inside(candidate, MAX_BODY_BYTES + len(UTF8_BOM))
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
    return candidate.target, text, mtime


def _read_inside(candidate: Candidate, limit: int) -> tuple[bytes, float]:
    """:func:`memories.files.read_inside`, with its failures as ingest refusals.

    Raises:
        MemoriesError: ``unsupported_file`` (not a regular file), ``body_too_large``, ``invalid_argument``
            (cannot be opened or read; a link or another folder took its place).
    """
    path = candidate.path
    try:
        return read_inside(candidate.folder, candidate.folder_identity, candidate.parts, limit)
    except SwappedFile:
        raise MemoriesError(
            "invalid_argument",
            f"cannot read {path}: a symbolic link (or another folder) took its place after the folder was listed; "
            "a link is never followed when a note is read",
        ) from None
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
