"""Vaults and records: validation, encryption and the in-memory catalog of decrypted headers.

The catalog holds, per vault and only while unlocked, the latest header (kind, sensitivity, title, metadata) of
every record. It decides retrieval eligibility (R-01, R-02) in the supervisor: only a record of kind ``memory``
or ``card`` with sensitivity ``general`` is ever turned into an :class:`~memories.protocol.IndexRecord` for a
worker. Reads of a record always decrypt from the store, so tampering is caught on every read.

A record whose latest header or body fails authentication is *damaged*: it is kept out of the catalog's eligible
set (so searches leave it out and warn about it, :meth:`Vaults.damaged`), marked in listings, and every read of
it is ``integrity_error`` naming the vault, record and revision in ``details``; deleting it works. One bad
record never makes the rest of a vault unreadable or unsearchable.
"""

from __future__ import annotations

import functools
import re
import secrets
import sqlite3
import time
import unicodedata

import msgspec

from memories import crypto
from memories.daemon.keyring import Keyring
from memories.errors import MemoriesError
from memories.limits import MAX_BODY_BYTES, MAX_META_ENTRIES, MAX_META_VALUE_BYTES, MAX_TITLE_BYTES, body_too_large
from memories.protocol import RecordKind, RecordSummary, RecordView, Sensitivity
from memories.store import RevisionRow, Store, VaultRow
from memories.worker_protocol import IndexRecord

_META_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class Origin(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Where an ingested card came from: the file's resolved absolute path and the SHA-256 (hex) of the text
    stored from it at the last ingest (UTF-8, after BOM removal). Sealed in the header and kept apart from
    ``meta``, so ``memory update --meta`` cannot lose it; never indexed, embedded, shown in search or sent to a
    worker or model."""

    path: str
    sha256: str


class RecordHeader(msgspec.Struct, forbid_unknown_fields=True):
    """The sealed ``header`` field of a revision (``origin`` is ``None`` for records not ingested from a file, and
    for cards ingested by releases before it existed)."""

    kind: RecordKind
    sensitivity: Sensitivity
    title: str
    meta: dict[str, str]
    origin: Origin | None = None


class CatalogEntry(msgspec.Struct):
    revision: int
    header: RecordHeader


def is_eligible(header: RecordHeader) -> bool:
    """R-01/R-02: general memories and knowledge cards only; never private records, credentials or files."""
    return header.kind in ("memory", "card") and header.sensitivity == "general"


def split_tags(value: str | None) -> list[str]:
    """Metadata ``tags`` is a comma-separated list."""
    return [t.strip() for t in (value or "").split(",") if t.strip()]


def new_id() -> str:
    """A random 64-bit id as 16 lowercase hex digits."""
    return secrets.token_hex(8)


class Vaults:
    """Vault and record operations over the store, sealed with the keyring's keys. Blocking (runs in a thread)."""

    def __init__(self, store: Store, keyring: Keyring) -> None:
        self._store = store
        self._keys = keyring
        self._catalog: dict[str, dict[str, CatalogEntry]] = {}
        self._damaged: dict[str, dict[str, int]] = {}

    def forget(self) -> None:
        """Drop every decrypted header, and what is known of damaged records (on lock)."""
        self._catalog.clear()
        self._damaged.clear()

    # -- vaults --------------------------------------------------------------------------------------------

    def resolve(self, ref: str) -> VaultRow:
        """The vault whose id or unique name is ``ref``.

        Raises:
            MemoriesError: ``vault_not_found``; ``ambiguous_vault`` when ``ref`` is one vault's id and another's
                name (``create`` prevents this, so only a store written otherwise can hold such a pair).
        """
        ref = unicodedata.normalize("NFC", ref)
        matches = [v for v in self._store.vaults() if ref in (v.id, v.name)]
        if not matches:
            raise MemoriesError("vault_not_found", f"no vault has the id or name {ref!r}")
        if len(matches) > 1:
            raise MemoriesError("ambiguous_vault", f"{ref!r} names more than one vault; use the id")
        return matches[0]

    def create(self, name: str, device_only: bool) -> VaultRow:
        """Raises ``invalid_vault_name``, ``vault_name_taken``, ``vault_locked``. Names are kept in Unicode NFC, so
        two names that look the same are the same name."""
        name = _check_name(name)
        existing = self._store.vaults()
        if any(name == vault.id for vault in existing):
            raise MemoriesError("vault_name_taken", f"{name!r} is the id of another vault; choose another name")
        vault_id = new_id()
        while any(vault_id in (vault.id, vault.name) for vault in existing):
            vault_id = new_id()
        wrapped = self._keys.wrap_vault_key(vault_id, crypto.new_key(), device_only)
        row = VaultRow(vault_id, name, device_only, time.time(), wrapped)
        try:
            self._store.insert_vault(row)
        except sqlite3.IntegrityError:
            raise MemoriesError("vault_name_taken", f"a vault named {name!r} already exists") from None
        return row

    def rename(self, vault: VaultRow, name: str) -> VaultRow:
        """Give a vault another name (its id, keys and records stay).

        Raises:
            MemoriesError: ``invalid_vault_name``, ``vault_name_taken``, ``vault_locked``.
        """
        self._keys.master()
        name = _check_name(name)
        if any(name == other.id for other in self._store.vaults() if other.id != vault.id):
            raise MemoriesError("vault_name_taken", f"{name!r} is the id of another vault; choose another name")
        try:
            self._store.rename_vault(vault.id, name)
        except sqlite3.IntegrityError:
            raise MemoriesError("vault_name_taken", f"a vault named {name!r} already exists") from None
        return vault._replace(name=name)

    def delete_vault(self, vault: VaultRow) -> int:
        """Delete a vault with its key and every record and revision; returns how many records it held. Raises
        ``vault_locked``."""
        self._keys.master()
        count = self._store.count_records(vault.id)
        self._store.delete_vault(vault.id)
        self._store.checkpoint()
        self._keys.forget_vault(vault.id)
        self._catalog.pop(vault.id, None)
        self._damaged.pop(vault.id, None)
        return count

    def list(self) -> list[VaultRow]:
        return self._store.vaults()

    def count_records(self, vault: VaultRow) -> int:
        return self._store.count_records(vault.id)

    def set_policy(self, vault: VaultRow, device_only: bool) -> VaultRow:
        """Set the device-only policy, sealed with the vault key (R-41); raises ``vault_locked``,
        ``integrity_error``."""
        wrapped = self._keys.wrap_vault_key(vault.id, self._keys.vault_key(vault), device_only)
        self._store.set_policy(vault.id, device_only, wrapped)
        return vault._replace(device_only=device_only, wrapped_key=wrapped)

    def seal_policies(self) -> int:
        """At unlock: wrap the key of every vault made before policies were sealed again, bound to the policy as
        stored now; returns how many. (That stored policy is trusted once: a change made to it before this first
        unlock cannot be told from the user's own.)"""
        sealed = 0
        for vault in self._store.vaults():
            key = self._keys.legacy_vault_key(vault)
            if key is not None:
                wrapped = self._keys.wrap_vault_key(vault.id, key, vault.device_only)
                self._store.set_policy(vault.id, vault.device_only, wrapped)
                sealed += 1
        return sealed

    # -- records -------------------------------------------------------------------------------------------

    def add(
        self,
        vault: VaultRow,
        kind: RecordKind,
        sensitivity: Sensitivity,
        title: str,
        body: bytes,
        meta: dict[str, str],
        origin: Origin | None = None,
    ) -> tuple[str, int]:
        """Store a new record as revision 1; returns ``(id, 1)``. ``origin`` is set by ingest only.

        Raises:
            MemoriesError: ``body_too_large``, ``invalid_utf8``, ``invalid_argument`` (title, metadata),
                ``vault_locked``.
        """
        header = RecordHeader(kind, sensitivity, _check_title(title), _check_meta(meta), origin)
        text = decode_body(body)
        key = self._keys.vault_key(vault)
        record_id = new_id()
        while self._store.record_exists(vault.id, record_id):
            record_id = new_id()
        self._write(vault, key, record_id, 1, header, text)
        return record_id, 1

    def update(
        self,
        vault: VaultRow,
        record_id: str,
        *,
        title: str | None,
        body: bytes | None,
        sensitivity: Sensitivity | None,
        meta: dict[str, str] | None,
        origin: Origin | None = None,
    ) -> tuple[str, int]:
        """Add a revision; fields left ``None`` keep the latest revision's value (``origin`` too: only ingest sets
        it). Returns ``(id, revision)``."""
        key = self._keys.vault_key(vault)
        header, old_body, row = self._read_row(vault, key, record_id, None)
        revision = row.revision
        new_header = RecordHeader(
            header.kind,
            sensitivity or header.sensitivity,
            _check_title(title) if title is not None else header.title,
            _check_meta(meta) if meta is not None else header.meta,
            origin or header.origin,
        )
        text = decode_body(body) if body is not None else old_body
        self._write(vault, key, record_id, revision + 1, new_header, text)
        return record_id, revision + 1

    def read(self, vault: VaultRow, record_id: str, revision: int | None) -> RecordView:
        """Decrypt one revision (the latest by default).

        Raises:
            MemoriesError: ``record_not_found``, ``integrity_error``, ``vault_locked``.
        """
        header, body, row = self._read_row(vault, self._keys.vault_key(vault), record_id, revision)
        return RecordView(
            id=record_id,
            revision=row.revision,
            kind=header.kind,
            sensitivity=header.sensitivity,
            title=header.title,
            body=body,
            meta=header.meta,
            created=row.created,
            updated=row.updated,
        )

    def delete(self, vault: VaultRow, record_id: str) -> None:
        self._keys.vault_key(vault)
        if not self._store.record_exists(vault.id, record_id):
            raise _not_found(vault, record_id, None)
        self._store.delete_record(vault.id, record_id)
        self._store.checkpoint()
        self.catalog(vault).pop(record_id, None)
        self._damaged_in(vault).pop(record_id, None)

    def move(self, vault: VaultRow, record_id: str, target: VaultRow) -> int:
        """Move a record with every revision to ``target``: each revision is decrypted (authenticated) and sealed
        again under the target vault's key and associated data, then one transaction inserts it there and removes
        it here. The record keeps its id, revision numbers and times. Returns the latest revision.

        Raises:
            MemoriesError: ``record_not_found``, ``integrity_error`` (nothing moves), ``invalid_argument`` (the
                same vault, or the target already has a record with that id), ``vault_locked``.
        """
        if target.id == vault.id:
            raise MemoriesError("invalid_argument", f"record {record_id} is already in vault {vault.name!r}")
        key, target_key = self._keys.vault_key(vault), self._keys.vault_key(target)
        rows = self._store.revisions(vault.id, record_id)
        if not rows:
            raise _not_found(vault, record_id, None)
        if self._store.record_exists(target.id, record_id):
            raise MemoriesError("invalid_argument", f"vault {target.name!r} already has a record {record_id}")
        moved, header = [], None
        for row in rows:
            header = _open_header(key, vault, record_id, row.revision, row.header)
            body = _open_field(key, vault, record_id, row.revision, "body", row.body)
            aad = functools.partial(crypto.record_aad, target.id, record_id, row.revision)
            moved.append(
                row._replace(
                    header=crypto.seal(target_key, msgspec.msgpack.encode(header), aad("header")),
                    body=crypto.seal(target_key, body, aad("body")),
                )
            )
        assert header is not None
        try:
            self._store.move_record(vault.id, target.id, record_id, moved)
        except sqlite3.IntegrityError:
            raise MemoriesError("invalid_argument", f"vault {target.name!r} already has a record {record_id}") from None
        self._store.checkpoint()
        self.catalog(vault).pop(record_id, None)
        self._damaged_in(vault).pop(record_id, None)
        self.catalog(target)[record_id] = CatalogEntry(rows[-1].revision, header)
        return rows[-1].revision

    def summaries(self, vault: VaultRow, kind: RecordKind | None) -> list[RecordSummary]:
        """Listing rows (never a body). Damaged records are always listed, marked ``damaged``; one whose header
        cannot be read has no kind, sensitivity or title."""
        catalog, damaged = self.catalog(vault), self.damaged(vault)
        rows = [
            RecordSummary(
                record_id, e.revision, e.header.kind, e.header.sensitivity, e.header.title, record_id in damaged
            )
            for record_id, e in catalog.items()
            if kind is None or e.header.kind == kind or record_id in damaged
        ]
        unreadable = [(rid, revision) for rid, revision in damaged.items() if rid not in catalog]
        return rows + [RecordSummary(rid, revision, None, None, None, True) for rid, revision in unreadable]

    def catalog(self, vault: VaultRow) -> dict[str, CatalogEntry]:
        """Latest decrypted header of every live record whose header authenticates, loaded once per unlock and
        kept current (the others are :meth:`damaged`)."""
        entries = self._catalog.get(vault.id)
        if entries is None:
            key = self._keys.vault_key(vault)
            damaged = self._damaged_in(vault)
            entries = {}
            for row in self._store.latest_headers(vault.id):
                try:
                    header = _open_header(key, vault, row.id, row.revision, row.header)
                except MemoriesError:
                    damaged[row.id] = row.revision
                    continue
                entries[row.id] = CatalogEntry(row.revision, header)
            self._catalog[vault.id] = entries
        return entries

    def damaged(self, vault: VaultRow) -> dict[str, int]:
        """Record id -> latest revision of every record found damaged since unlock: its header failed
        authentication when the catalog was loaded, or its header or body when it was decrypted for the index."""
        self.catalog(vault)
        return dict(self._damaged_in(vault))

    def eligible(self, vault: VaultRow) -> dict[str, int]:
        """Record id -> latest revision of every retrieval-eligible record that is not damaged."""
        damaged = self.damaged(vault)
        return {
            rid: e.revision
            for rid, e in self.catalog(vault).items()
            if is_eligible(e.header) and damaged.get(rid) != e.revision
        }

    def index_records(self, vault: VaultRow, record_ids: list[str]) -> list[IndexRecord]:
        """Decrypt the latest revision of eligible records for ``workers.index``; ineligible ids are skipped, and
        records that fail authentication are skipped and remembered as :meth:`damaged`."""
        key = self._keys.vault_key(vault)
        records = []
        for record_id, (revision, header_blob, body_blob) in self._store.bodies(vault.id, record_ids).items():
            try:
                header = _open_header(key, vault, record_id, revision, header_blob)
                if not is_eligible(header):
                    continue
                body = _open_field(key, vault, record_id, revision, "body", body_blob)
            except MemoriesError:
                self._damaged_in(vault)[record_id] = revision
                continue
            records.append(
                IndexRecord(
                    id=record_id,
                    revision=revision,
                    kind=header.kind,  # type: ignore[arg-type]  # eligible: memory or card
                    title=header.title,
                    body=body.decode("utf-8"),
                    source=header.meta.get("source"),
                    tags=split_tags(header.meta.get("tags")),
                )
            )
        return records

    def read_latest(self, vault: VaultRow, record_id: str) -> tuple[RecordHeader, str]:
        """``(header, body)`` of the latest revision."""
        header, body, _ = self._read_row(vault, self._keys.vault_key(vault), record_id, None)
        return header, body

    # -- internals -----------------------------------------------------------------------------------------

    def _read_row(
        self, vault: VaultRow, key: bytes, record_id: str, revision: int | None
    ) -> tuple[RecordHeader, str, RevisionRow]:
        row = self._store.revision(vault.id, record_id, revision)
        if row is None:
            raise _not_found(vault, record_id, revision)
        header = _open_header(key, vault, record_id, row.revision, row.header)
        body = _open_field(key, vault, record_id, row.revision, "body", row.body)
        return header, body.decode("utf-8"), row

    def _damaged_in(self, vault: VaultRow) -> dict[str, int]:
        return self._damaged.setdefault(vault.id, {})

    def _write(
        self, vault: VaultRow, key: bytes, record_id: str, revision: int, header: RecordHeader, body: str
    ) -> None:
        sealed_header = crypto.seal(
            key, msgspec.msgpack.encode(header), crypto.record_aad(vault.id, record_id, revision, "header")
        )
        sealed_body = crypto.seal(key, body.encode("utf-8"), crypto.record_aad(vault.id, record_id, revision, "body"))
        self._store.add_revision(vault.id, record_id, revision, time.time(), sealed_header, sealed_body)
        self.catalog(vault)[record_id] = CatalogEntry(revision, header)
        self._damaged_in(vault).pop(record_id, None)


def decode_body(body: bytes) -> str:
    """Check size and UTF-8; returns the text.

    Raises:
        MemoriesError: ``body_too_large`` over :data:`~memories.limits.MAX_BODY_BYTES`; ``invalid_utf8``.
    """
    if len(body) > MAX_BODY_BYTES:
        raise body_too_large("the body", len(body))
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MemoriesError("invalid_utf8", f"the body is not valid UTF-8 (byte {exc.start})") from None


def _check_name(name: str) -> str:
    """A vault name in NFC; raises ``invalid_vault_name``."""
    name = unicodedata.normalize("NFC", name)
    if not name or len(name) > 64 or name != name.strip() or any(unicodedata.category(c)[0] == "C" for c in name):
        raise MemoriesError("invalid_vault_name", f"{name!r} is not a usable vault name")
    return name


def _check_title(title: str) -> str:
    if not title.strip():
        raise MemoriesError("invalid_argument", "the title is empty")
    if len(title.encode("utf-8")) > MAX_TITLE_BYTES:
        raise MemoriesError("invalid_argument", f"the title is longer than {MAX_TITLE_BYTES} bytes")
    return title


def _check_meta(meta: dict[str, str]) -> dict[str, str]:
    if len(meta) > MAX_META_ENTRIES:
        raise MemoriesError("invalid_argument", f"more than {MAX_META_ENTRIES} metadata entries")
    for key, value in meta.items():
        if not _META_KEY.fullmatch(key):
            raise MemoriesError("invalid_argument", f"metadata key {key!r} must be 1-64 of [A-Za-z0-9_.-]")
        if len(value.encode("utf-8")) > MAX_META_VALUE_BYTES:
            raise MemoriesError("invalid_argument", f"metadata value of {key!r} exceeds {MAX_META_VALUE_BYTES} bytes")
    return dict(meta)


def _open_header(key: bytes, vault: VaultRow, record_id: str, revision: int, blob: bytes) -> RecordHeader:
    plain = _open_field(key, vault, record_id, revision, "header", blob)
    try:
        return msgspec.msgpack.decode(plain, type=RecordHeader)
    except msgspec.DecodeError:  # authentic but unreadable: written by a newer release
        raise _damaged_error(vault, record_id, revision, "header", "cannot be decoded") from None


def _open_field(key: bytes, vault: VaultRow, record_id: str, revision: int, field: str, blob: bytes) -> bytes:
    """Decrypt one field of one revision.

    Raises:
        MemoriesError: ``integrity_error`` with ``details`` ``{"vault", "id", "revision", "field"}``.
    """
    try:
        return crypto.open_sealed(key, blob, crypto.record_aad(vault.id, record_id, revision, field))
    except MemoriesError:
        raise _damaged_error(vault, record_id, revision, field, "failed authentication") from None


def _damaged_error(vault: VaultRow, record_id: str, revision: int, field: str, what: str) -> MemoriesError:
    return MemoriesError(
        "integrity_error",
        f"the {field} of record {record_id} revision {revision} in vault {vault.name!r} {what}; it was changed, "
        f"moved or corrupted (`memory delete {vault.name} {record_id}` removes it)",
        {"vault": vault.name, "id": record_id, "revision": revision, "field": field},
    )


def _not_found(vault: VaultRow, record_id: str, revision: int | None) -> MemoriesError:
    if revision is None:
        return MemoriesError("record_not_found", f"no record {record_id!r} in vault {vault.name!r}")
    return MemoriesError("record_not_found", f"record {record_id!r} in vault {vault.name!r} has no revision {revision}")
