"""Sync of one vault with its folder: ``init``, ``join``, ``push`` and ``pull``, blocking (the daemon runs them in
its store thread).

*Push* writes a payload for every stored revision (deletions included) whose file the folder lacks or holds
damaged or wrong: a file not seen whole since the last push or pull (its size and times differ) is checked against
what push would write, its size and then its authentication, and rewritten when it is not that revision (a
device never leaves a peer without an edit because a copy of it was damaged). Then it removes the payloads of
revisions a deletion erased (decorated copies too) and replaces this device's metadata file. *Pull* reads every
payload file whose size or times changed since the last pull (so one that does not authenticate yet is retried
only when it changes, and reported bad once a second pull saw it unchanged), keeps the revisions it has not seen
by id (never by time), and merges them in one transaction (:meth:`memories.vault.exchange.Exchange.merge`). A
file named after one revision that holds another is bad (``other_revision``), not a revision still on its way. One
bad file never blocks the others. An empty folder adds nothing and deletes nothing: only a deletion revision
erases. The device's own pushes are stored already, so a pull never counts them as changes. A failure of the
folder's file system (an ``OSError``; ``payloads/`` or ``devices/`` not a real folder when push must write there)
is ``sync_folder_error`` naming the folder.

The sync state (:class:`SyncState`, in the store's ``sync`` table) holds the folder, this device's id per vault
and what each payload file was when last read: names, sizes, times, revision ids, reasons. No content, but the
folder's path says something about the notes, so the state is sealed under the vault's key
(:func:`memories.crypto.sync_state_aad`; issue 29, item 15). A state a release before that wrote in clear is read
once more and sealed at its next write (the next push, pull or timed round).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from memories import crypto
from memories.config import CryptoConfig
from memories.errors import MemoriesError
from memories.limits import check_passphrase_length
from memories.sync.folder import PAYLOAD_SUFFIX, Entry, Folder, NotAFolder, Skipped, check_placement, in_use
from memories.sync.payload import (
    BadPayload,
    BadReason,
    DeviceFile,
    PayloadKeys,
    Revision,
    decode_vault_file,
    unwrap_vault_key,
    wrap_vault_key,
)
from memories.vault.record_store import RecordStore
from memories.vault.rules import new_id
from memories.vault.store import VaultRow


class FileSeen(msgspec.Struct, array_like=True):
    """A payload file as the last pull or push saw it: size (bytes), modification time (ns), the revision id it
    holds or why it could not be read, how many later pulls saw it unchanged since, and its status-change time
    (ns; ``0`` in states written before it was kept, which makes the next push check the file once)."""

    size: int
    mtime_ns: int
    revision_id: str | None
    reason: BadReason | None
    unchanged: int = 0
    ctime_ns: int = 0

    def same_file(self, entry: Entry) -> bool:
        """``entry`` is this file unchanged: same size, modification and status-change times."""
        return (self.size, self.mtime_ns, self.ctime_ns) == (entry.size, entry.mtime_ns, entry.ctime_ns)


def _seen(entry: Entry, revision_id: str | None, reason: BadReason | None) -> FileSeen:
    return FileSeen(entry.size, entry.mtime_ns, revision_id, reason, ctime_ns=entry.ctime_ns)


class TimerError(msgspec.Struct):
    """The last failure of the timed sync (``[sync] interval_seconds``) of a vault: its code and message, and when
    (Unix seconds). Cleared by the next pull or push that succeeds."""

    code: str
    message: str
    at: float


class BadFile(msgspec.Struct):
    """A file ``sync status`` reports: its name, the reason, and ``pending`` while it may still be arriving (it
    failed once and has not been seen unchanged by a second pull yet)."""

    file: str
    reason: str
    pending: bool


class SyncState(msgspec.Struct, forbid_unknown_fields=True):
    """One vault's sync state on this device. Times are Unix seconds."""

    folder: str
    device: str
    files: dict[str, FileSeen] = {}
    last_push: float | None = None
    last_pull: float | None = None
    imported: int = 0
    pushed: int = 0
    conflicts: list[str] = []
    bad: list[BadFile] = []
    skipped: list[tuple[str, str]] = []
    not_local: int = 0
    waiting: int = 0
    timer_error: TimerError | None = None


class Sync:
    """Sync of the home's vaults over its record store.

    Args:
        records: the daemon's record store.
        home: the home folder (a sync folder may be neither in it nor around it).
        between_writes: called after each payload a push writes (a test hook kills the daemon there).
    """

    def __init__(self, records: RecordStore, home: Path, between_writes: Callable[[], None] | None) -> None:
        self._store = records.store
        self._keys = records.keys
        self._vaults = records.vaults
        self._exchange = records.exchange
        self._home = home
        self._between_writes = between_writes

    def state(self, vault: VaultRow) -> SyncState:
        """Raises ``invalid_argument`` when the vault has no sync folder."""
        raw = self._store.sync_state(vault.id)
        if raw is None:
            raise MemoriesError(
                "invalid_argument", f"vault {vault.name!r} has no sync folder; run `memories sync init` first"
            )
        return self._open_state(vault, raw)

    def _open_state(self, vault: VaultRow, raw: bytes) -> SyncState:
        """The state stored as ``raw``: sealed, or in clear as releases before issue 29 wrote it.

        Raises:
            MemoriesError: ``vault_locked``; ``integrity_error`` when it neither opens nor is a state in clear.
        """
        key = self._keys.vault_key(vault)
        try:
            plain = crypto.open_sealed(key, raw, crypto.sync_state_aad(vault.id))
        except MemoriesError as sealed_error:
            try:
                return msgspec.msgpack.decode(raw, type=SyncState)
            except (msgspec.DecodeError, msgspec.ValidationError):
                raise sealed_error from None
        return msgspec.msgpack.decode(plain, type=SyncState)

    def synced(self) -> list[VaultRow]:
        """The vaults that have a sync folder."""
        return [vault for vault in self._vaults.all() if self._store.sync_state(vault.id) is not None]

    def init(self, vault: VaultRow, root: Path, passphrase: str, cost: CryptoConfig) -> list[str]:
        """Make ``root`` the vault's sync folder (its key wrapped under ``passphrase``); returns warnings.

        Raises:
            MemoriesError: ``device_only_vault``; ``sync_folder_in_use``; ``invalid_argument`` (the folder is in
                the home or around it, or the vault already syncs); ``invalid_passphrase`` (too short).
        """
        if vault.device_only:
            raise MemoriesError("device_only_vault", f"vault {vault.name!r} is device-only; it cannot be synced")
        if self._store.sync_state(vault.id) is not None:
            raise MemoriesError(
                "invalid_argument", f"vault {vault.name!r} already syncs with {self.state(vault).folder}"
            )
        warnings = check_placement(root, self._home)
        folder = Folder(root.resolve(), new_id())
        existing = folder.read_vault_file()
        names = {other.id: other.name for other in self._vaults.all()}
        if existing is not None:
            raise in_use(folder.root, existing, names)
        check_passphrase_length(passphrase)
        key = self._keys.vault_key(vault)
        params = crypto.new_kdf_params(cost.kdf_memory_kib, cost.kdf_iterations, cost.kdf_lanes)
        vault_file = wrap_vault_key(vault.id, key, vault.name, passphrase, params)
        folder.create(msgspec.msgpack.encode(vault_file), names)
        self._save(vault, SyncState(str(folder.root), folder.device))
        return warnings

    def join(self, root: Path, name: str | None, passphrase: str) -> tuple[VaultRow, list[str]]:
        """Add the vault of the sync folder ``root`` to this home, with its id and key (under ``name``, else the
        name it has in the folder); returns the vault and warnings. A pull then brings its records.

        Raises:
            MemoriesError: ``invalid_argument`` (no vault in the folder, the vault is here already, or placement);
                ``bad_passphrase``; ``integrity_error`` (the folder's key parameters); ``vault_name_taken``.
        """
        warnings = check_placement(root, self._home)
        folder = Folder(root.resolve(), new_id())
        raw = folder.read_vault_file()
        if raw is None:
            raise MemoriesError("invalid_argument", f"{folder.root} holds no vault; run `memories sync init` first")
        found = decode_vault_file(raw)
        if any(vault.id == found.vault_id for vault in self._vaults.all()):
            raise MemoriesError("invalid_argument", f"this home has vault {found.vault_id} already")
        key, folder_name = unwrap_vault_key(found, passphrase)
        vault = self._vaults.adopt(found.vault_id, name or folder_name, key)
        self._save(vault, SyncState(str(folder.root), folder.device))
        return vault, warnings

    def push(self, vault: VaultRow) -> SyncState:
        """Write what the folder lacks or holds damaged, remove what deletions erased, then this device's file.

        Raises:
            MemoriesError: ``sync_folder_error``; what :meth:`state` raises.
        """
        state = self.state(vault)
        folder, keys = self._open(vault, state)
        with _folder_errors(folder):
            folder.clean_stale()
            stored, erased = self._exchange.sync_index(vault)
            entries, _ = folder.scan()
            on_disk = {entry.name: entry for entry in entries}
            files = dict(state.files)
            unsure = [revision_id for revision_id in sorted(stored) if not _known(files, on_disk, revision_id)]
            written = 0
            for start in range(0, len(unsure), 64):
                for revision in self._exchange.sealed(vault, unsure[start : start + 64]):
                    name = revision.id + PAYLOAD_SUFFIX
                    data = keys.seal(revision)
                    entry = on_disk.get(name)
                    if entry is None or not _holds(folder, keys, entry, revision.id, len(data)):
                        entry = folder.write_payload(revision.id, data)
                        written += 1
                        if self._between_writes is not None:
                            self._between_writes()
                    files[name] = _seen(entry, revision.id, None)
            gone = {f"{revision_id}{PAYLOAD_SUFFIX}" for revision_id in erased} & on_disk.keys()
            gone |= {name for name, seen in state.files.items() if seen.revision_id in erased}
            folder.remove_payloads(sorted(gone))
            now = time.time()
            folder.write_device(keys.seal_device(DeviceFile(folder.device, now, sorted(stored))))
        files = {name: seen for name, seen in files.items() if name not in gone}
        state = msgspec.structs.replace(state, files=files, last_push=now, pushed=written, timer_error=None)
        self._save(vault, state)
        return state

    def pull(self, vault: VaultRow) -> tuple[SyncState, list[str]]:
        """Import what the folder holds and this vault has not seen; returns the state and the records changed.

        Raises:
            MemoriesError: ``sync_folder_error``; what :meth:`state` raises.
        """
        state = self.state(vault)
        folder, keys = self._open(vault, state)
        with _folder_errors(folder):
            entries, skipped = folder.scan()
            stored, erased = self._exchange.sync_index(vault)
            known = stored | erased
            files: dict[str, FileSeen] = {}
            arrived: dict[str, Revision] = {}
            for entry in entries:
                seen = state.files.get(entry.name)
                if seen is not None and seen.same_file(entry):
                    if seen.reason is not None:  # retried only when it changes
                        files[entry.name] = msgspec.structs.replace(seen, unchanged=seen.unchanged + 1)
                        continue
                    if seen.revision_id in known:
                        files[entry.name] = seen
                        continue
                try:
                    revision = keys.open(folder.read_payload(entry.name))
                except FileNotFoundError:
                    continue
                except BadPayload as exc:
                    files[entry.name] = _seen(entry, None, exc.reason)
                    continue
                if _named(entry.name) not in (None, revision.id):
                    files[entry.name] = _seen(entry, None, "other_revision")
                    continue
                files[entry.name] = _seen(entry, revision.id, None)
                if revision.id not in known:
                    arrived[revision.id] = revision
            merged = self._exchange.merge(vault, list(arrived.values()))
            for name, seen in files.items():
                if seen.revision_id in merged.invalid:  # it breaks a rule of the vault: bad, whatever comes later
                    files[name] = msgspec.structs.replace(seen, reason="invalid")
            devices, problems = self._devices(folder, keys)
        skipped.extend(problems)
        in_folder = {seen.revision_id for seen in files.values() if seen.revision_id is not None}
        in_folder |= {named for name, seen in files.items() if seen.reason is not None and (named := _named(name))}
        stored, erased = self._exchange.sync_index(vault)
        listed = {rid for device in devices for rid in device.revisions}
        state = msgspec.structs.replace(
            state,
            files=files,
            last_pull=time.time(),
            imported=merged.imported,
            conflicts=merged.conflicts,
            bad=[
                BadFile(name, seen.reason, seen.unchanged == 0 and seen.reason != "invalid")
                for name, seen in sorted(files.items())
                if seen.reason is not None
            ],
            skipped=[(s.name, s.why) for s in skipped],
            not_local=len(listed - stored - erased - in_folder),
            waiting=len(merged.waiting),
            timer_error=None,
        )
        self._save(vault, state)
        return state, merged.changed

    def _open(self, vault: VaultRow, state: SyncState) -> tuple[Folder, PayloadKeys]:
        if vault.device_only:
            raise MemoriesError("device_only_vault", f"vault {vault.name!r} is device-only now; it is not synced")
        root = Path(state.folder)
        if not root.is_dir():
            raise MemoriesError("invalid_argument", f"the sync folder {root} of vault {vault.name!r} is not there")
        return Folder(root, state.device), PayloadKeys(vault.id, self._keys.vault_key(vault))

    def record_timer_error(self, vault: VaultRow, error: MemoriesError) -> None:
        """Keep the failure of a timed sync in the vault's state (``sync status`` shows it); nothing when the vault
        no longer syncs."""
        raw = self._store.sync_state(vault.id)
        if raw is not None:
            state = self._open_state(vault, raw)
            timer_error = TimerError(error.code, error.message, time.time())
            self._save(vault, msgspec.structs.replace(state, timer_error=timer_error))

    def _devices(self, folder: Folder, keys: PayloadKeys) -> tuple[list[DeviceFile], list[Skipped]]:
        """Every device file (and conflict copy of one) that authenticates, and those that do not or were not
        read (symbolic links)."""
        files, problems = folder.device_files()
        found = []
        for device, copies in files.items():
            for data in copies:
                try:
                    found.append(keys.open_device(device, data))
                except BadPayload as exc:
                    problems.append(Skipped(f"devices/{device}", exc.reason))
        return found, problems

    def _save(self, vault: VaultRow, state: SyncState) -> None:
        sealed = crypto.seal(
            self._keys.vault_key(vault), msgspec.msgpack.encode(state), crypto.sync_state_aad(vault.id)
        )
        self._store.put_sync_state(vault.id, sealed)


_NAMED = re.compile(r"[0-9a-f]{64}(?![0-9a-f])")


def _named(file_name: str) -> str | None:
    """The revision id a payload file is named after (``<id>.rev`` and its decorated copies), else ``None``."""
    match = _NAMED.match(file_name)
    return match.group() if match else None


def _known(files: dict[str, FileSeen], on_disk: dict[str, Entry], revision_id: str) -> bool:
    """The folder holds the payload of ``revision_id`` as a pull or push last saw it whole, unchanged since."""
    entry = on_disk.get(revision_id + PAYLOAD_SUFFIX)
    seen = files.get(revision_id + PAYLOAD_SUFFIX)
    return (
        entry is not None
        and seen is not None
        and seen.same_file(entry)
        and seen.revision_id == revision_id
        and seen.reason is None
    )


def _holds(folder: Folder, keys: PayloadKeys, entry: Entry, revision_id: str, size: int) -> bool:
    """The file ``entry`` is the payload of ``revision_id``: the size push would write (bytes), then it
    authenticates as that revision."""
    if entry.size != size:
        return False
    try:
        return keys.open(folder.read_payload(entry.name)).id == revision_id
    except (FileNotFoundError, BadPayload):
        return False


@contextmanager
def _folder_errors(folder: Folder) -> Iterator[None]:
    """``sync_folder_error`` for a failure of the folder's file system, naming the folder and the file."""
    try:
        yield
    except NotAFolder as exc:
        raise MemoriesError(
            "sync_folder_error",
            f"{exc.skipped.name} in the sync folder {folder.root} is {exc.skipped.why}; make it a folder again",
            {"folder": str(folder.root), "file": exc.skipped.name},
        ) from None
    except OSError as exc:
        what = f" ({exc.filename})" if exc.filename is not None else ""
        raise MemoriesError(
            "sync_folder_error",
            f"the sync folder {folder.root} failed: {exc.strerror or exc}{what}",
            {"folder": str(folder.root), "errno": exc.errno},
        ) from None
