"""A vault's sync folder on disk: what goes where, written so a folder sync tool never sees half a file.

::

    DIR/vault.msync              which vault, and its key wrapped under the sync passphrase (written once)
    DIR/payloads/<id>.rev        one immutable file per sealed revision, named by its revision id
    DIR/devices/<device>.dev     one mutable file per device (what it pushed, and when)

Only these: never the database, its ``-wal``/``-shm``, a lock or a socket. Every file is written as a temporary
file of this device (``.memories-<device>-<name>.tmp``), fsynced, renamed over its final name and the folder
fsynced, so a final name only ever holds a whole file; a device's stale temporary files are removed when it starts
a push. Since payloads are immutable and each device writes only its own metadata file, a conflict copy made by
the sync tool is a byte-identical payload or a copy of one device's file. Readers never trust a file name:
payloads are identified by their authenticated content (:mod:`memories.sync.payload`), so decorated copies
(``x.sync-conflict-20260301-101500-ABCDEFG.rev``, ``x (conflicted copy 2026-03-01).rev``) read like any other
(the engine only checks that a file named after a revision holds that one). The sync tools' own files
(``.stfolder``, ``.stversions``, Syncthing's ``.syncthing.*.tmp`` and ``~syncthing~*.tmp``) are skipped silently.
Symbolic links (Syncthing carries them) are never followed: one in ``payloads/`` or ``devices/``, or either folder
being one, is skipped and listed.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import NamedTuple

from memories.errors import MemoriesError
from memories.limits import MAX_BODY_BYTES
from memories.sync.payload import decode_vault_file

VAULT_FILE = "vault.msync"
PAYLOADS = "payloads"
DEVICES = "devices"
PAYLOAD_SUFFIX = ".rev"
DEVICE_SUFFIX = ".dev"

MAX_PAYLOAD_BYTES = 2 * MAX_BODY_BYTES + 1024 * 1024
"""Largest file read as a payload: a body of :data:`~memories.limits.MAX_BODY_BYTES` and its header, sealed twice,
with room to spare; a larger file is skipped unread."""

_SILENT = re.compile(
    r"^(\.stfolder|\.stversions|\.stignore|\.syncthing\..*\.tmp|~syncthing~.*\.tmp|\.memories-.*\.tmp)$"
)
"""Files of the sync tools (and our own temporary files) that are neither read nor reported."""

_DEVICE = re.compile(r"[0-9a-f]{16}")


class Entry(NamedTuple):
    """A file in ``payloads/``: its name, size in bytes, and modification and status-change times in nanoseconds
    (a sync tool may set the first to the sender's; no one can set the second)."""

    name: str
    size: int
    mtime_ns: int
    ctime_ns: int


class Skipped(NamedTuple):
    """A file not read, and why (shown by ``sync status``)."""

    name: str
    why: str


SYMLINK = "a symbolic link (not followed)"
"""Why a symbolic link in the folder is skipped: a sync tool such as Syncthing carries symlinks, so one in the folder
may point anywhere on this device."""


class NotAFolder(Exception):
    """``payloads/`` or ``devices/`` is a symbolic link or a file, not a folder: never followed nor written into."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"{name} is {why}")
        self.skipped = Skipped(name, why)


class Folder:
    """One vault's sync folder ``root``, as seen by device ``device`` (16 hex digits).

    ``payloads/`` and ``devices/`` are opened without following a symbolic link, and every file in them is opened,
    written, renamed and removed relative to that open folder, never through a link: a peer that put a symlink in
    the folder cannot make this device read or write elsewhere.

    Raises nothing on construction; every method raises ``OSError`` for failures of the file system itself and
    :class:`NotAFolder` when a method must use ``payloads/`` or ``devices/`` and it is not a real folder.
    """

    def __init__(self, root: Path, device: str) -> None:
        if not _DEVICE.fullmatch(device):
            raise ValueError(f"not a device id: {device!r}")
        self.root = root
        self.device = device

    # -- the vault file --------------------------------------------------------------------------------------

    def read_vault_file(self) -> bytes | None:
        """The vault file's bytes, or ``None`` when the folder holds no vault yet."""
        try:
            return _read_limited(None, str(self.root / VAULT_FILE), 64 * 1024)
        except FileNotFoundError:
            return None

    def create(self, vault_file: bytes, names: Mapping[str, str] | None = None) -> None:
        """Make the folder a sync folder: ``payloads/``, ``devices/`` and the vault file, written once (``names``:
        this home's vault names by id, for the error).

        Raises:
            MemoriesError: ``sync_folder_in_use`` when it already holds a vault file (another device's ``init``
                may have won the race: the file is linked into place, never over another).
        """
        for name in (PAYLOADS, DEVICES):
            (self.root / name).mkdir(mode=0o700, parents=True, exist_ok=True)
        temp = self._temp(self.root, VAULT_FILE)
        _write_synced(None, str(temp), vault_file)
        try:
            os.link(temp, self.root / VAULT_FILE)  # fails if it exists: never replaces another vault's file
        except FileExistsError:
            raise in_use(self.root, self.read_vault_file() or b"", names) from None
        finally:
            temp.unlink()
        _sync_folder(os.open(self.root, _ROOT_FLAGS))

    # -- payloads ----------------------------------------------------------------------------------------------

    def clean_stale(self) -> int:
        """Remove this device's temporary files left by an interrupted write; returns how many."""
        removed = 0
        prefix = f".memories-{self.device}-"
        for name in (None, PAYLOADS, DEVICES):
            try:
                with self._open(name) as fd:
                    for entry in _listing(fd):
                        if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                            _unlink(fd, entry.name)
                            removed += 1
            except (NotAFolder, FileNotFoundError):
                continue
        return removed

    def write_payload(self, revision_id: str, data: bytes) -> Entry:
        """Write ``payloads/<revision_id>.rev`` whole (temporary file, fsync, rename, fsync of the folder); returns
        the file as written."""
        with self._open(PAYLOADS, create=True) as fd:
            return self._replace(fd, revision_id + PAYLOAD_SUFFIX, data)

    def remove_payloads(self, names: list[str]) -> None:
        """Remove payload files by file name (those of deleted revisions, decorated copies included)."""
        if not names:
            return
        with self._open(PAYLOADS) as fd:  # names were listed there: it exists
            for name in names:
                _unlink(fd, name)
            os.fsync(fd)

    def scan(self) -> tuple[list[Entry], list[Skipped]]:
        """The files in ``payloads/`` that may be payloads, and those skipped with the reason (sync tools' own
        files are left out silently); a ``payloads/`` that is not a real folder is skipped whole."""
        entries, skipped = [], []
        try:
            with self._open(PAYLOADS) as fd:
                for entry in _listing(fd):
                    if _SILENT.match(entry.name):
                        continue
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if stat.S_ISLNK(info.st_mode):
                        skipped.append(Skipped(entry.name, SYMLINK))
                    elif not stat.S_ISREG(info.st_mode):
                        skipped.append(Skipped(entry.name, "not a regular file"))
                    elif info.st_size > MAX_PAYLOAD_BYTES:
                        skipped.append(Skipped(entry.name, f"larger than {MAX_PAYLOAD_BYTES} bytes"))
                    else:
                        entries.append(Entry(entry.name, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
        except NotAFolder as exc:
            skipped.append(exc.skipped)
        except FileNotFoundError:
            pass
        with self._open(None) as fd:
            for entry in _listing(fd):
                if entry.name not in (VAULT_FILE, PAYLOADS, DEVICES) and not _SILENT.match(entry.name):
                    skipped.append(Skipped(entry.name, "not part of a Memories sync folder"))
        return entries, skipped

    def read_payload(self, name: str) -> bytes:
        """The bytes of ``payloads/<name>`` (at most :data:`MAX_PAYLOAD_BYTES`); ``FileNotFoundError`` if gone or
        no longer a regular file."""
        with self._open(PAYLOADS) as fd:
            return _read_limited(fd, name, MAX_PAYLOAD_BYTES)

    # -- device files --------------------------------------------------------------------------------------

    def write_device(self, data: bytes) -> None:
        """Replace this device's ``devices/<device>.dev`` whole."""
        with self._open(DEVICES, create=True) as fd:
            self._replace(fd, self.device + DEVICE_SUFFIX, data)

    def device_files(self) -> tuple[dict[str, list[bytes]], list[Skipped]]:
        """Device id -> the bytes of its file and of any conflict copy of it (named ``<device>…``), and the files
        skipped (symbolic links, ``devices/`` itself when it is not a real folder)."""
        found: dict[str, list[bytes]] = {}
        skipped: list[Skipped] = []
        try:
            with self._open(DEVICES) as fd:
                for entry in _listing(fd):
                    device = entry.name[:16]
                    if not _DEVICE.fullmatch(device) or _SILENT.match(entry.name):
                        continue
                    if entry.is_symlink():
                        skipped.append(Skipped(f"{DEVICES}/{entry.name}", SYMLINK))
                        continue
                    try:
                        found.setdefault(device, []).append(_read_limited(fd, entry.name, MAX_PAYLOAD_BYTES))
                    except FileNotFoundError:  # gone, or not a regular file
                        continue
        except NotAFolder as exc:
            skipped.append(exc.skipped)
        except FileNotFoundError:
            pass
        return found, skipped

    # -- files relative to an open folder --------------------------------------------------------------------

    @contextmanager
    def _open(self, name: str | None, *, create: bool = False) -> Iterator[int]:
        """An open descriptor of the root (``None``) or of ``payloads/`` or ``devices/`` (made first when missing
        and ``create``), never through a link.

        Raises:
            NotAFolder: ``name`` is a symbolic link or not a folder. FileNotFoundError: it is missing.
        """
        if create and name is not None:
            with suppress(FileExistsError):
                (self.root / name).mkdir(mode=0o700)
        try:
            # The root is the folder the person chose (resolved at init): only the folders below it are checked.
            fd = os.open(self.root, _ROOT_FLAGS) if name is None else os.open(self.root / name, _FOLDER_FLAGS)
        except OSError as exc:
            if name is None or exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            link = (self.root / name).is_symlink()
            raise NotAFolder(name, SYMLINK if link else "not a folder") from None
        try:
            yield fd
        finally:
            os.close(fd)

    def _replace(self, fd: int, name: str, data: bytes) -> Entry:
        temp = self._temp(None, name).name
        _write_synced(fd, temp, data)
        os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)  # a symlink named ``name`` is replaced, not followed
        os.fsync(fd)
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        return Entry(name, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def _temp(self, folder: Path | None, name: str) -> Path:
        return Path(folder or "") / f".memories-{self.device}-{name}.tmp"


def in_use(root: Path, vault_file: bytes, names: Mapping[str, str] | None = None) -> MemoriesError:
    """``sync_folder_in_use`` for a folder that holds the vault file ``vault_file``: the vault by its name when it
    is one of this home's (``names``: vault id to name), else by its id (its name there is sealed under its key)."""
    try:
        vault_id: str | None = decode_vault_file(vault_file).vault_id
    except MemoriesError:
        vault_id = None
    name = (names or {}).get(vault_id or "")
    if vault_id is None:
        held = "another vault's file; choose another folder"
    elif name is not None:
        held = f"your vault {name!r} (id {vault_id}) already; choose another folder for this one"
    else:
        held = f"the vault {vault_id} of another home; join it (`memories sync join {root}`) or choose another folder"
    return MemoriesError("sync_folder_in_use", f"{root} holds {held}", {"folder": str(root), "vault_id": vault_id})


def check_placement(folder: Path, home: Path) -> list[str]:
    """Refuse a sync folder inside the home or a home inside the folder; returns warnings (a home inside a folder
    that a sync tool manages: a parent holds ``.stfolder`` or ``.dropbox``).

    Raises:
        MemoriesError: ``invalid_argument``.
    """
    folder, home = folder.resolve(), home.resolve()
    if folder == home or folder.is_relative_to(home):
        raise MemoriesError("invalid_argument", f"{folder} is inside the home {home}; choose a folder outside it")
    if home.is_relative_to(folder):
        raise MemoriesError("invalid_argument", f"the home {home} is inside {folder}; choose a folder outside it")
    for parent in (home, *home.parents):
        marker = next((m for m in (".stfolder", ".dropbox") if (parent / m).exists()), None)
        if marker is not None:
            return [
                f"the home {home} is inside a synced folder ({parent / marker}): a live database in a synced folder "
                "can be corrupted; move the home out of it"
            ]
    return []


_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY
_FOLDER_FLAGS = _ROOT_FLAGS | os.O_NOFOLLOW


def _listing(fd: int) -> list[os.DirEntry[str]]:
    with os.scandir(fd) as entries:
        return sorted(entries, key=lambda entry: entry.name)


def _unlink(fd: int, name: str) -> None:
    with suppress(FileNotFoundError):
        os.unlink(name, dir_fd=fd)


def _read_limited(fd: int | None, name: str, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of the regular file ``name`` (relative to the folder ``fd``), never through a
    symbolic link; ``FileNotFoundError`` when it is missing, a link or not a regular file."""
    try:
        file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileNotFoundError(name) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(file).st_mode):
            raise FileNotFoundError(name)
        chunks, total = [], 0
        while total <= limit and (chunk := os.read(file, 1 << 20)):
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)[: limit + 1]
    finally:
        os.close(file)


def _write_synced(fd: int | None, name: str, data: bytes) -> None:
    file = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600, dir_fd=fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(file, view) :]
        os.fsync(file)
    finally:
        os.close(file)


def _sync_folder(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
