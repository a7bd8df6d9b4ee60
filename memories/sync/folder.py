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
(``x.sync-conflict-20260301-101500-ABCDEFG.rev``, ``x (conflicted copy 2026-03-01).rev``) read like any other.
The sync tools' own files (``.stfolder``, ``.stversions``, Syncthing's ``.syncthing.*.tmp`` and
``~syncthing~*.tmp``) are skipped silently.
"""

from __future__ import annotations

import os
import re
import stat
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
    """A file in ``payloads/``: its name, size in bytes and modification time in nanoseconds."""

    name: str
    size: int
    mtime_ns: int


class Skipped(NamedTuple):
    """A file not read, and why (shown by ``sync status``)."""

    name: str
    why: str


class Folder:
    """One vault's sync folder ``root``, as seen by device ``device`` (16 hex digits).

    Raises nothing on construction; every method raises ``OSError`` for failures of the file system itself.
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
            return _read_limited(self.root / VAULT_FILE, 64 * 1024)
        except FileNotFoundError:
            return None

    def create(self, vault_file: bytes) -> None:
        """Make the folder a sync folder: ``payloads/``, ``devices/`` and the vault file, written once.

        Raises:
            MemoriesError: ``sync_folder_in_use`` when it already holds a vault file (another device's ``init``
                may have won the race: the file is linked into place, never over another).
        """
        for name in (PAYLOADS, DEVICES):
            (self.root / name).mkdir(mode=0o700, parents=True, exist_ok=True)
        temp = self._temp(self.root, VAULT_FILE)
        _write_synced(temp, vault_file)
        try:
            os.link(temp, self.root / VAULT_FILE)  # fails if it exists: never replaces another vault's file
        except FileExistsError:
            raise in_use(self.root, self.read_vault_file() or b"") from None
        finally:
            temp.unlink()
        _sync_folder(self.root)

    # -- payloads ----------------------------------------------------------------------------------------------

    def clean_stale(self) -> int:
        """Remove this device's temporary files left by an interrupted write; returns how many."""
        removed = 0
        prefix = f".memories-{self.device}-"
        for folder in (self.root, self.root / PAYLOADS, self.root / DEVICES):
            for path in _listing(folder):
                if path.name.startswith(prefix) and path.name.endswith(".tmp"):
                    path.unlink(missing_ok=True)
                    removed += 1
        return removed

    def payload_names(self) -> set[str]:
        """Revision ids that have a payload under their own name (decorated copies are not counted)."""
        return {
            path.name[: -len(PAYLOAD_SUFFIX)]
            for path in _listing(self.root / PAYLOADS)
            if path.name.endswith(PAYLOAD_SUFFIX)
        }

    def write_payload(self, revision_id: str, data: bytes) -> None:
        """Write ``payloads/<revision_id>.rev`` whole (temporary file, fsync, rename, fsync of the folder)."""
        folder = self.root / PAYLOADS
        name = revision_id + PAYLOAD_SUFFIX
        temp = self._temp(folder, name)
        _write_synced(temp, data)
        os.replace(temp, folder / name)
        _sync_folder(folder)

    def remove_payloads(self, names: list[str]) -> None:
        """Remove payload files by file name (those of deleted revisions, decorated copies included)."""
        for name in names:
            (self.root / PAYLOADS / name).unlink(missing_ok=True)
        if names:
            _sync_folder(self.root / PAYLOADS)

    def scan(self) -> tuple[list[Entry], list[Skipped]]:
        """The files in ``payloads/`` that may be payloads, and those skipped with the reason (sync tools' own
        files are left out silently)."""
        entries, skipped = [], []
        for path in _listing(self.root / PAYLOADS):
            if _SILENT.match(path.name):
                continue
            try:
                info = path.lstat()
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(info.st_mode):
                skipped.append(Skipped(path.name, "not a regular file"))
            elif info.st_size > MAX_PAYLOAD_BYTES:
                skipped.append(Skipped(path.name, f"larger than {MAX_PAYLOAD_BYTES} bytes"))
            else:
                entries.append(Entry(path.name, info.st_size, info.st_mtime_ns))
        for path in _listing(self.root):
            if path.name not in (VAULT_FILE, PAYLOADS, DEVICES) and not _SILENT.match(path.name):
                skipped.append(Skipped(path.name, "not part of a Memories sync folder"))
        return entries, skipped

    def read_payload(self, name: str) -> bytes:
        """The bytes of ``payloads/<name>`` (at most :data:`MAX_PAYLOAD_BYTES`); ``FileNotFoundError`` if gone."""
        return _read_limited(self.root / PAYLOADS / name, MAX_PAYLOAD_BYTES)

    # -- device files --------------------------------------------------------------------------------------

    def write_device(self, data: bytes) -> None:
        """Replace this device's ``devices/<device>.dev`` whole."""
        folder = self.root / DEVICES
        name = self.device + DEVICE_SUFFIX
        temp = self._temp(folder, name)
        _write_synced(temp, data)
        os.replace(temp, folder / name)
        _sync_folder(folder)

    def device_files(self) -> dict[str, list[bytes]]:
        """Device id -> the bytes of its file and of any conflict copy of it (named ``<device>…``)."""
        found: dict[str, list[bytes]] = {}
        for path in _listing(self.root / DEVICES):
            device = path.name[:16]
            if _DEVICE.fullmatch(device) and not _SILENT.match(path.name) and path.is_file():
                found.setdefault(device, []).append(_read_limited(path, MAX_PAYLOAD_BYTES))
        return found

    def _temp(self, folder: Path, name: str) -> Path:
        return folder / f".memories-{self.device}-{name}.tmp"


def in_use(root: Path, vault_file: bytes) -> MemoriesError:
    """``sync_folder_in_use`` for a folder that holds the vault file ``vault_file`` (its id when it decodes)."""
    try:
        held = f"vault {decode_vault_file(vault_file).vault_id}"
    except MemoriesError:
        held = "another vault"
    return MemoriesError(
        "sync_folder_in_use", f"{root} holds {held}; join it or choose another folder", {"folder": str(root)}
    )


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


def _listing(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except FileNotFoundError:
        return []


def _read_limited(path: Path, limit: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileNotFoundError(path)
        chunks, total = [], 0
        while total <= limit and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)[: limit + 1]
    finally:
        os.close(fd)


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
