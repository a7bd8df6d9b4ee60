"""Vaults and records: validation, encryption and the in-memory catalog of decrypted headers.

The catalog holds, per vault and only while unlocked, the latest header (kind, sensitivity, title, metadata) of
every record. It decides retrieval eligibility (R-01, R-02) in the supervisor: only a record of kind ``memory``
or ``card`` with sensitivity ``general`` is ever turned into an :class:`~memories.protocol.IndexRecord` for a
worker. Reads of a record always decrypt from the store, so tampering is caught on every read.

A record whose latest header or body fails authentication is *damaged*: it is kept out of the catalog's eligible
set (so searches leave it out and warn about it, :meth:`Vaults.damaged`), marked in listings, and every read of
it is ``integrity_error`` naming the vault, record and revision in ``details``; deleting it works. One bad
record never makes the rest of a vault unreadable or unsearchable.

Revisions form a graph: each has an id (:func:`memories.crypto.revision_id`), its parents' ids and a depth
(``revision``, 1, 2, 3 … for people). Each vault keeps a sealed :class:`HeadSet` (every record's head revisions and
a counter), replaced in the same transaction as every write. A revision row dropped, replaced by another or rolled
back no longer matches the id the head set (or a child) names: that record is damaged, and reading it is
``integrity_error``. Restoring a whole older database file cannot be told apart locally.
"""

from __future__ import annotations

import re
import secrets
import sqlite3
import time
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import msgspec

from memories import crypto
from memories.daemon.keyring import Keyring
from memories.errors import MemoriesError
from memories.limits import MAX_BODY_BYTES, MAX_META_ENTRIES, MAX_META_VALUE_BYTES, MAX_TITLE_BYTES, body_too_large
from memories.protocol import Conflict, RecordKind, RecordSummary, RecordView, Sensitivity
from memories.store import FORMAT, LegacyRevisionRow, RevisionRow, Store, VaultRow, Write
from memories.sync.merge import Node, merge_record
from memories.sync.payload import Revision
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
    """A record's head (the chosen one, :func:`chosen_head`, when it has several): depth, id, header, and whether
    the record is in conflict (several heads)."""

    revision: int
    revision_id: str
    header: RecordHeader
    conflict: bool = False


class Merged(NamedTuple):
    """What :meth:`Vaults.merge` did: revisions imported, records changed, records now in conflict, and revision
    ids whose parents have not arrived yet (left for a later pull)."""

    imported: int
    changed: list[str]
    conflicts: list[str]
    waiting: list[str]


class Head(msgspec.Struct, frozen=True, array_like=True):
    """One head revision of a record: its id (64 hex digits), depth and whether it is a deletion."""

    id: str
    revision: int
    deleted: bool = False


class HeadSet(msgspec.Struct, forbid_unknown_fields=True):
    """A vault's sealed head set: record id -> head revisions (one, or several siblings), in creation order, and
    ``counter``, the number of writes made to the vault (one more per write)."""

    counter: int
    records: dict[str, list[Head]]


def chosen_head(heads: list[Head]) -> Head:
    """The head shown and indexed when a record has several: one that is not a deletion, the deepest, then the
    largest id (deterministic on every device, never by clock)."""
    return max(heads, key=lambda head: (not head.deleted, head.revision, head.id))


def is_live(heads: list[Head]) -> bool:
    """The record exists: at least one head is not a deletion."""
    return any(not head.deleted for head in heads)


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
        self._heads: dict[str, HeadSet] = {}

    def forget(self) -> None:
        """Drop every decrypted header and head set, and what is known of damaged records (on lock)."""
        self._catalog.clear()
        self._damaged.clear()
        self._heads.clear()

    def unlock(self, passphrase: str) -> Path | None:
        """Unlock the keyring and, the first time a store of an earlier release is unlocked, upgrade it (a backup
        first, then one transaction; :meth:`_upgrade`). Returns the backup's path after an upgrade, else ``None``.

        Raises:
            MemoriesError: what :meth:`Keyring.unlock` raises (nothing changes); after a failed upgrade the home
                stays locked and unchanged.
        """
        self._keys.unlock(passphrase)
        if self._store.format == FORMAT:
            return None
        try:
            backup = self._store.backup()
            self._upgrade()
        except BaseException:
            self._keys.lock()
            raise
        return backup

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
        key = crypto.new_key()
        row = VaultRow(
            vault_id, name, device_only, time.time(), self._keys.wrap_vault_key(vault_id, key, device_only, name)
        )
        try:
            self._store.insert_vault(row, _seal_heads(key, vault_id, HeadSet(0, {})))
        except sqlite3.IntegrityError:
            raise MemoriesError("vault_name_taken", f"a vault named {name!r} already exists") from None
        return row

    def adopt(self, vault_id: str, name: str, key: bytes) -> VaultRow:
        """Add a vault that another device made, with its id and data key (``sync join``); no device ever makes a
        second key for a vault. Synced vaults are never device-only.

        Raises:
            MemoriesError: ``invalid_vault_name``, ``vault_name_taken`` (give another name), ``vault_locked``.
        """
        name = _check_name(name)
        if any(name == vault.id for vault in self._store.vaults()):
            raise MemoriesError("vault_name_taken", f"{name!r} is the id of another vault; choose another name")
        row = VaultRow(vault_id, name, False, time.time(), self._keys.wrap_vault_key(vault_id, key, False, name))
        try:
            self._store.insert_vault(row, _seal_heads(key, vault_id, HeadSet(0, {})))
        except sqlite3.IntegrityError:
            raise MemoriesError("vault_name_taken", f"a vault named {name!r} exists here; join with --name") from None
        return row

    def rename(self, vault: VaultRow, name: str) -> VaultRow:
        """Give a vault another name (its id, keys and records stay).

        Raises:
            MemoriesError: ``invalid_vault_name``, ``vault_name_taken``, ``vault_locked``.
        """
        name = _check_name(name)
        if any(name == other.id for other in self._store.vaults() if other.id != vault.id):
            raise MemoriesError("vault_name_taken", f"{name!r} is the id of another vault; choose another name")
        renamed = vault._replace(
            name=name,
            wrapped_key=self._keys.wrap_vault_key(vault.id, self._keys.vault_key(vault), vault.device_only, name),
        )
        try:
            self._store.update_vault(renamed)
        except sqlite3.IntegrityError:
            raise MemoriesError("vault_name_taken", f"a vault named {name!r} already exists") from None
        return renamed

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
        self._heads.pop(vault.id, None)
        return count

    def all(self) -> list[VaultRow]:
        """Every vault, oldest first (named ``all``: a method ``list`` would shadow the builtin in this class's
        annotations)."""
        return self._store.vaults()

    def count_records(self, vault: VaultRow) -> int:
        """Live records of the vault (raises ``vault_locked``, ``integrity_error``)."""
        return sum(is_live(heads) for heads in self._head_set(vault, self._keys.vault_key(vault)).records.values())

    def set_policy(self, vault: VaultRow, device_only: bool) -> VaultRow:
        """Set the device-only policy, sealed with the vault key (R-41); raises ``vault_locked``,
        ``integrity_error``."""
        wrapped = self._keys.wrap_vault_key(vault.id, self._keys.vault_key(vault), device_only, vault.name)
        changed = vault._replace(device_only=device_only, wrapped_key=wrapped)
        self._store.update_vault(changed)
        return changed

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
                ``vault_locked``, ``integrity_error`` (the vault's head set).
        """
        header = RecordHeader(kind, sensitivity, _check_title(title), _check_meta(meta), origin)
        text = decode_body(body)
        key = self._keys.vault_key(vault)
        heads = self._head_set(vault, key)
        record_id = new_id()
        while record_id in heads.records:
            record_id = new_id()
        self._write(vault, key, record_id, [], header, text)
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
        revision: int | str | None = None,
    ) -> tuple[str, int]:
        """Add a revision whose parents are every head of the record (so it also resolves a conflict); fields left
        ``None`` keep the value of the chosen head, or of ``revision`` (by depth or id) when given (``origin``
        too: only ingest sets it). Returns ``(id, revision)``.

        Raises:
            MemoriesError: ``record_not_found``, ``ambiguous_revision``, ``integrity_error``, what :meth:`add`
                raises.
        """
        key = self._keys.vault_key(vault)
        heads = self._heads_of(vault, key, record_id)
        if revision is None:
            base = self._verified(vault, key, record_id, chosen_head(heads))
        else:
            chain, broken = self._chain(vault, key, record_id, heads)
            base = _pick(vault, record_id, [r for r in chain.values() if not r.deleted], broken, revision)
        header, old_body, _ = self._open(vault, key, base)
        new_header = RecordHeader(
            header.kind,
            sensitivity or header.sensitivity,
            _check_title(title) if title is not None else header.title,
            _check_meta(meta) if meta is not None else header.meta,
            origin or header.origin,
        )
        text = decode_body(body) if body is not None else old_body
        return record_id, self._write(vault, key, record_id, heads, new_header, text)

    def read(self, vault: VaultRow, record_id: str, revision: int | str | None) -> RecordView:
        """Decrypt one revision: the chosen head by default, else the one of that depth or id (a unique prefix of
        at least 8 hex digits). Every revision of the record is checked against the head set first.

        Raises:
            MemoriesError: ``record_not_found``; ``ambiguous_revision`` (siblings share the depth; ``details``
                ``{"revisions": [ids]}``); ``integrity_error`` (a revision was changed, dropped or rolled back);
                ``vault_locked``.
        """
        key = self._keys.vault_key(vault)
        heads = self._heads_of(vault, key, record_id)
        chain, broken = self._chain(vault, key, record_id, heads)
        if revision is None:
            head = chosen_head(heads).id
            row = self._verified(vault, key, record_id, chosen_head(heads)) if head in broken else chain[head]
        else:
            row = _pick(vault, record_id, [r for r in chain.values() if not r.deleted], broken, revision)
        header, body, _ = self._open(vault, key, row)
        roots = [r.created for r in chain.values() if r.revision == 1]
        created = min(roots) if roots else row.created
        return RecordView(
            id=record_id,
            revision=row.revision,
            revision_id=row.id,
            kind=header.kind,
            sensitivity=header.sensitivity,
            title=header.title,
            body=body,
            meta=header.meta,
            created=created,
            updated=row.created,
            conflict=Conflict(sorted(h.id for h in heads), any(h.deleted for h in heads)) if len(heads) > 1 else None,
        )

    def delete(self, vault: VaultRow, record_id: str) -> None:
        """Erase every revision of the record, leaving a deletion revision (its tombstone: parents the heads, body
        the ids it erased, sealed; a sync pushes it so other devices erase them too). Raises ``record_not_found``,
        ``vault_locked``."""
        key = self._keys.vault_key(vault)
        heads = self._heads_of(vault, key, record_id)
        deletion, erased = self._deletion(vault, key, record_id, heads)
        self._commit(vault, key, {record_id: [Head(deletion.id, deletion.revision, True)]}, [deletion], erased)
        self._store.checkpoint()
        self.catalog(vault).pop(record_id, None)
        self._damaged_in(vault).pop(record_id, None)

    def move(self, vault: VaultRow, record_id: str, target: VaultRow) -> int:
        """Move a record with every revision to ``target``: each revision is checked and decrypted, then sealed
        again under the target vault's key and place (so its id changes, and its children's parents with it),
        and one transaction inserts them there and erases them here, leaving a deletion as :meth:`delete` does.
        The record keeps its id, depths and times. Returns the chosen head's depth.

        Raises:
            MemoriesError: ``record_not_found``, ``integrity_error`` (nothing moves), ``invalid_argument`` (the
                same vault, the target already has a record with that id, or the record is in conflict),
                ``vault_locked``.
        """
        if target.id == vault.id:
            raise MemoriesError("invalid_argument", f"record {record_id} is already in vault {vault.name!r}")
        key, target_key = self._keys.vault_key(vault), self._keys.vault_key(target)
        heads = self._heads_of(vault, key, record_id)
        if len(heads) > 1:
            raise MemoriesError(
                "invalid_argument", f"record {record_id} is in conflict; resolve it first (`memory update`)"
            )
        chain, broken = self._chain(vault, key, record_id, heads)
        if broken:
            self._verified(vault, key, record_id, Head(broken[0], 0))  # the failing field, or the missing row
        target_heads = self._head_set(target, target_key)
        if record_id in target_heads.records:
            raise MemoriesError("invalid_argument", f"vault {target.name!r} already has a record {record_id}")
        renamed: dict[str, str] = {}
        headers: dict[str, RecordHeader] = {}
        moved = []
        for row in sorted((r for r in chain.values() if not r.deleted), key=lambda r: (r.revision, r.id)):
            header, body, _ = self._open(vault, key, row)
            parents = tuple(sorted(renamed[parent] for parent in row.parents if parent in renamed))
            place = crypto.RevisionPlace(target.id, record_id, row.revision, parents, False, row.created)
            sealed = _seal(target_key, place, header, body.encode("utf-8"))
            renamed[row.id] = sealed.id
            headers[sealed.id] = header
            moved.append(sealed)
        new_heads = [Head(renamed[h.id], h.revision) for h in heads]
        deletion, erased = self._deletion(vault, key, record_id, heads)
        source_set = self._next(vault, {record_id: [Head(deletion.id, deletion.revision, True)]})
        target_set = self._next(target, {record_id: new_heads})
        self._store.write(
            Write(vault.id, _seal_heads(key, vault.id, source_set), [deletion], erased),
            Write(target.id, _seal_heads(target_key, target.id, target_set), moved),
        )
        self._heads[vault.id], self._heads[target.id] = source_set, target_set
        self._store.checkpoint()
        self.catalog(vault).pop(record_id, None)
        self._damaged_in(vault).pop(record_id, None)
        head = chosen_head(new_heads)
        self.catalog(target)[record_id] = CatalogEntry(head.revision, head.id, headers[head.id])
        return head.revision

    # -- sync ------------------------------------------------------------------------------------------------

    def merge(self, vault: VaultRow, revisions: list[Revision]) -> Merged:
        """Merge authenticated revisions read from a sync folder by the revision graph (:mod:`memories.sync.merge`),
        in one transaction: revisions added, those a deletion erased erased, every touched record's heads
        replaced. Nothing changes when nothing is new.

        Raises:
            MemoriesError: ``vault_locked``, ``integrity_error`` (the head set, or a stored deletion).
        """
        key = self._keys.vault_key(vault)
        self._head_set(vault, key)
        incoming: dict[str, list[Revision]] = {}
        for revision in revisions:
            incoming.setdefault(revision.place.record_id, []).append(revision)
        changed: dict[str, list[Head]] = {}
        add: list[RevisionRow] = []
        erase: list[str] = []
        waiting: list[str] = []
        for record_id, arrived in incoming.items():
            stored = {row.id: _node(key, vault, row) for row in self._store.revisions(vault.id, record_id)}
            rows = {r.id: _row(r.place, r.header, r.body) for r in arrived}
            merged = merge_record(stored, [_node(key, vault, row) for row in rows.values()])
            waiting.extend(node.id for node in merged.waiting)
            if not merged.changed:
                continue
            add.extend(rows[node.id] for node in merged.add)
            erase.extend(merged.erase)
            changed[record_id] = [Head(node.id, node.revision, node.deleted) for node in merged.heads]
        if changed:
            self._commit(vault, key, changed, add, erase)
            self._catalog.pop(vault.id, None)  # reloaded from the new heads at the next use
        conflicts = sorted(rid for rid, h in self._head_set(vault, key).records.items() if len(h) > 1 and is_live(h))
        return Merged(len(add), sorted(changed), conflicts, waiting)

    def sync_index(self, vault: VaultRow) -> tuple[set[str], set[str]]:
        """``(ids of every stored revision, ids every stored deletion erased)``: what a push writes and removes.
        Raises ``vault_locked``, ``integrity_error``."""
        key = self._keys.vault_key(vault)
        stored, erased = set(), set()
        for revision_id, _, deleted in self._store.revision_index(vault.id):
            stored.add(revision_id)
            if deleted:
                [row] = self._store.revisions_by_id(vault.id, [revision_id]).values()
                erased.update(_erased_by(key, vault, row))
        return stored, erased

    def sealed(self, vault: VaultRow, revision_ids: list[str]) -> list[Revision]:
        """The stored revisions ``revision_ids`` as sync payload contents (each checked against its id first)."""
        rows = self._store.revisions_by_id(vault.id, revision_ids)
        return [
            Revision(row.id, _place(vault, row.record_id, row), row.header, row.body)
            for row in rows.values()
            if _is_authentic(vault, row.record_id, row)
        ]

    def summaries(self, vault: VaultRow, kind: RecordKind | None) -> list[RecordSummary]:
        """Listing rows (never a body). Damaged records are always listed, marked ``damaged``; one whose header
        cannot be read has no kind, sensitivity or title."""
        catalog, damaged = self.catalog(vault), self.damaged(vault)
        rows = [
            RecordSummary(
                record_id,
                e.revision,
                e.header.kind,
                e.header.sensitivity,
                e.header.title,
                record_id in damaged,
                e.conflict,
            )
            for record_id, e in catalog.items()
            if kind is None or e.header.kind == kind or record_id in damaged
        ]
        unreadable = [(rid, revision) for rid, revision in damaged.items() if rid not in catalog]
        return rows + [RecordSummary(rid, revision, None, None, None, True) for rid, revision in unreadable]

    def catalog(self, vault: VaultRow) -> dict[str, CatalogEntry]:
        """The chosen head's decrypted header of every live record whose head is intact, loaded once per unlock
        and kept current (the others are :meth:`damaged`). Raises ``integrity_error`` when the vault's head set
        is missing or fails authentication."""
        entries = self._catalog.get(vault.id)
        if entries is None:
            key = self._keys.vault_key(vault)
            damaged = self._damaged_in(vault)
            records = {rid: heads for rid, heads in self._head_set(vault, key).records.items() if is_live(heads)}
            chosen = {rid: chosen_head(heads) for rid, heads in records.items()}
            rows = self._store.revisions_by_id(vault.id, [head.id for head in chosen.values()])
            entries = {}
            for record_id, head in chosen.items():
                row = rows.get(head.id)
                try:
                    header = _open_header(key, vault, _checked(key, vault, record_id, head.id, row))
                except MemoriesError:
                    damaged[record_id] = head.revision
                    continue
                entries[record_id] = CatalogEntry(head.revision, head.id, header, len(records[record_id]) > 1)
            self._catalog[vault.id] = entries
        return entries

    def damaged(self, vault: VaultRow) -> dict[str, int]:
        """Record id -> head depth of every record found damaged since unlock: its head revision was missing,
        replaced or failed authentication when the catalog was loaded, or when it was decrypted for the index."""
        self.catalog(vault)
        return dict(self._damaged_in(vault))

    def eligible(self, vault: VaultRow) -> dict[str, int]:
        """Record id -> head depth of every retrieval-eligible record that is not damaged."""
        damaged = self.damaged(vault)
        return {
            rid: e.revision
            for rid, e in self.catalog(vault).items()
            if is_eligible(e.header) and damaged.get(rid) != e.revision
        }

    def index_records(self, vault: VaultRow, record_ids: list[str]) -> list[IndexRecord]:
        """Decrypt the chosen head of eligible records for ``workers.index``; ineligible or unknown ids are skipped,
        and records that fail the checks are skipped and remembered as :meth:`damaged`."""
        key = self._keys.vault_key(vault)
        catalog = self.catalog(vault)
        wanted = {rid: catalog[rid] for rid in record_ids if rid in catalog}
        rows = self._store.revisions_by_id(vault.id, [entry.revision_id for entry in wanted.values()])
        records = []
        for record_id, entry in wanted.items():
            row = rows.get(entry.revision_id)
            try:
                row = _checked(key, vault, record_id, entry.revision_id, row)
                header = _open_header(key, vault, row)
                if not is_eligible(header):
                    continue
                body = _open_field(key, vault, row, "body")
            except MemoriesError:
                self._damaged_in(vault)[record_id] = entry.revision
                continue
            records.append(
                IndexRecord(
                    id=record_id,
                    revision=row.revision,
                    kind=header.kind,  # type: ignore[arg-type]  # eligible: memory or card
                    title=header.title,
                    body=body.decode("utf-8"),
                    source=header.meta.get("source"),
                    tags=split_tags(header.meta.get("tags")),
                )
            )
        return records

    def read_latest(self, vault: VaultRow, record_id: str) -> tuple[RecordHeader, str]:
        """``(header, body)`` of the chosen head (raises ``record_not_found``, ``integrity_error``)."""
        key = self._keys.vault_key(vault)
        header, body, _ = self._open(
            vault, key, self._verified(vault, key, record_id, chosen_head(self._heads_of(vault, key, record_id)))
        )
        return header, body

    # -- internals -----------------------------------------------------------------------------------------

    def _head_set(self, vault: VaultRow, key: bytes) -> HeadSet:
        """The vault's head set, opened once per unlock.

        Raises:
            MemoriesError: ``integrity_error`` when it is missing or fails authentication.
        """
        heads = self._heads.get(vault.id)
        if heads is None:
            sealed = self._store.heads(vault.id)
            try:
                if sealed is None:
                    raise MemoriesError("integrity_error")
                heads = msgspec.msgpack.decode(
                    crypto.open_sealed(key, sealed, crypto.heads_aad(vault.id)), type=HeadSet
                )
            except (MemoriesError, msgspec.DecodeError):
                raise MemoriesError(
                    "integrity_error",
                    f"vault {vault.name}: its head set is missing or failed authentication; the database was "
                    "changed outside Memories",
                    {"vault": vault.name},
                ) from None
            self._heads[vault.id] = heads
        return heads

    def _heads_of(self, vault: VaultRow, key: bytes, record_id: str) -> list[Head]:
        """The heads of a live record (raises ``record_not_found``, also for a deleted one)."""
        heads = self._head_set(vault, key).records.get(record_id)
        if heads is None or not is_live(heads):
            raise _not_found(vault, record_id, None)
        return heads

    def _verified(self, vault: VaultRow, key: bytes, record_id: str, head: Head) -> RevisionRow:
        """The stored revision ``head``, checked (:func:`_checked`)."""
        return _checked(key, vault, record_id, head.id, self._store.revisions_by_id(vault.id, [head.id]).get(head.id))

    def _chain(
        self, vault: VaultRow, key: bytes, record_id: str, heads: list[Head]
    ) -> tuple[dict[str, RevisionRow], list[str]]:
        """The revisions reachable from the record's heads: ``(id -> row of each one whose id matches its row,
        [ids missing or not matching their row])``; a parent a deletion erased is not missing. The parents of a row
        that does not match are still followed,
        since every row authenticates itself too: one tampered revision leaves its intact ancestors readable.

        Raises:
            MemoriesError: ``integrity_error`` when an intact revision of the record descends from none of the heads
                (the head set was rolled back).
        """
        stored = {row.id: row for row in self._store.revisions(vault.id, record_id)}
        erased = {e for row in stored.values() if row.deleted for e in _erased_by(key, vault, row)}
        chain: dict[str, RevisionRow] = {}
        broken: list[str] = []
        seen: set[str] = set()
        todo = [head.id for head in heads]
        while todo:
            revision_id = todo.pop()
            if revision_id in seen:
                continue
            seen.add(revision_id)
            row = stored.get(revision_id)
            if row is None:
                if revision_id not in erased:  # an edit made against a deletion names erased parents
                    broken.append(revision_id)
                continue
            if _is_authentic(vault, record_id, row):
                chain[revision_id] = row
            else:
                broken.append(revision_id)
            todo.extend(row.parents)
        # A write never leaves a revision that no head descends from: such a row means the head set was rolled back.
        beyond = [rid for rid, row in stored.items() if rid not in seen and _is_authentic(vault, record_id, row)]
        if beyond:
            raise _rolled_back(vault, record_id, beyond[0])
        return chain, broken

    def _open(self, vault: VaultRow, key: bytes, row: RevisionRow) -> tuple[RecordHeader, str, RevisionRow]:
        header = _open_header(key, vault, row)
        body = _open_field(key, vault, row, "body")
        return header, body.decode("utf-8"), row

    def _damaged_in(self, vault: VaultRow) -> dict[str, int]:
        return self._damaged.setdefault(vault.id, {})

    def _next(self, vault: VaultRow, changed: dict[str, list[Head]]) -> HeadSet:
        """The vault's next head set, one write later: the records ``changed`` get these heads."""
        current = self._heads[vault.id]
        return HeadSet(current.counter + 1, {**current.records, **changed})

    def _commit(
        self,
        vault: VaultRow,
        key: bytes,
        changed: dict[str, list[Head]],
        add: Sequence[RevisionRow] = (),
        erase: Sequence[str] = (),
    ) -> None:
        """Store ``add``, erase the revision ids ``erase`` and give the records ``changed`` their new heads, in one
        transaction with the new head set."""
        heads = self._next(vault, changed)
        self._store.write(Write(vault.id, _seal_heads(key, vault.id, heads), add, erase))
        self._heads[vault.id] = heads

    def _deletion(
        self, vault: VaultRow, key: bytes, record_id: str, heads: list[Head]
    ) -> tuple[RevisionRow, list[str]]:
        """The deletion revision of a record (parents: every head) and the ids of every revision it erases."""
        erased = sorted(row.id for row in self._store.revisions(vault.id, record_id) if not row.deleted)
        place = crypto.RevisionPlace(
            vault.id,
            record_id,
            1 + max(head.revision for head in heads),
            tuple(sorted(head.id for head in heads)),
            True,
            time.time(),
        )
        return _seal(key, place, b"", msgspec.msgpack.encode(erased)), erased

    def _write(
        self, vault: VaultRow, key: bytes, record_id: str, parents: list[Head], header: RecordHeader, body: str
    ) -> int:
        """Seal a revision of ``record_id`` with ``parents`` (``[]`` creates the record), make it the record's only
        head and return its depth."""
        place = crypto.RevisionPlace(
            vault.id,
            record_id,
            1 + max((parent.revision for parent in parents), default=0),
            tuple(sorted(parent.id for parent in parents)),
            False,
            time.time(),
        )
        row = _seal(key, place, header, body.encode("utf-8"))
        head = Head(row.id, row.revision)
        self._head_set(vault, key)
        self._commit(vault, key, {record_id: [head]}, [row])
        self.catalog(vault)[record_id] = CatalogEntry(head.revision, head.id, header)
        self._damaged_in(vault).pop(record_id, None)
        return head.revision

    def _upgrade(self) -> None:
        """Format 1 -> 2 (:meth:`Store.upgrade`): every vault key wrapped again with its name and policy as stored
        (trusted that once: a change made to them before this unlock cannot be told from the user's own), every
        revision sealed again in its place (parents: the revision numbered one less), a head set per vault. A
        revision that does not authenticate keeps its ciphertext (the record stays damaged and deletable); a vault
        whose key does not unwrap keeps its rows and gets no head set (``integrity_error``, as before)."""
        legacy: dict[tuple[str, str], list[LegacyRevisionRow]] = {}
        for old in self._store.legacy_revisions():
            legacy.setdefault((old.vault_id, old.record_id), []).append(old)
        vaults, head_sets, revisions = [], {}, {}
        for vault in self._store.vaults():
            key = self._keys.format1_vault_key(vault)
            if key is not None:
                wrapped = self._keys.wrap_vault_key(vault.id, key, vault.device_only, vault.name)
                vaults.append(vault._replace(wrapped_key=wrapped))
            records: dict[str, list[Head]] = {}
            rows = []
            chains = [chain for (vault_id, _), chain in legacy.items() if vault_id == vault.id]
            for chain in sorted(chains, key=lambda c: (c[0].created, c[0].record_id)):
                parents: tuple[str, ...] = ()
                for old in chain:
                    place = crypto.RevisionPlace(vault.id, old.record_id, old.revision, parents, False, old.created)
                    row = _reseal(key, place, old)
                    rows.append(row)
                    parents = (row.id,)
                records[chain[0].record_id] = [Head(parents[0], chain[-1].revision)]
            revisions[vault.id] = rows
            if key is not None:
                head_sets[vault.id] = _seal_heads(key, vault.id, HeadSet(0, records))
        self._store.upgrade(vaults, head_sets, revisions)


def _seal(key: bytes, place: crypto.RevisionPlace, header: RecordHeader | bytes, body: bytes) -> RevisionRow:
    """A new sealed revision in ``place``, with its id (a deletion's header is empty, its body the erased ids)."""
    plain = header if isinstance(header, bytes) else msgspec.msgpack.encode(header)
    sealed_header = crypto.seal(key, plain, crypto.record_aad(place, "header"))
    sealed_body = crypto.seal(key, body, crypto.record_aad(place, "body"))
    return _row(place, sealed_header, sealed_body)


def _reseal(key: bytes | None, place: crypto.RevisionPlace, old: LegacyRevisionRow) -> RevisionRow:
    """A revision of store format 1 sealed again in ``place``, or with its old ciphertext when it (or its vault's
    key) does not authenticate."""
    if key is None:
        return _row(place, old.header, old.body)
    try:
        header, body = (
            crypto.open_sealed(key, blob, crypto.legacy_record_aad(place.vault_id, place.record_id, old.revision, name))
            for name, blob in (("header", old.header), ("body", old.body))
        )
    except MemoriesError:
        return _row(place, old.header, old.body)
    return _row(
        place,
        crypto.seal(key, header, crypto.record_aad(place, "header")),
        crypto.seal(key, body, crypto.record_aad(place, "body")),
    )


def _row(place: crypto.RevisionPlace, header: bytes, body: bytes) -> RevisionRow:
    return RevisionRow(
        place.record_id,
        crypto.revision_id(place, header, body),
        place.revision,
        place.parents,
        place.created,
        header,
        body,
        place.deleted,
    )


def _place(vault: VaultRow, record_id: str, row: RevisionRow) -> crypto.RevisionPlace:
    return crypto.RevisionPlace(vault.id, record_id, row.revision, row.parents, row.deleted, row.created)


def _checked(key: bytes, vault: VaultRow, record_id: str, revision_id: str, row: RevisionRow | None) -> RevisionRow:
    """``row`` if it is the revision ``revision_id`` of this record.

    Raises:
        MemoriesError: ``integrity_error``: the field that fails authentication (``details.field`` ``header`` or
            ``body``), else ``field`` ``revision`` when the row is missing or is another revision.
    """
    if row is None:
        raise _rolled_back(vault, record_id, revision_id)
    if row.id != revision_id or not _is_authentic(vault, record_id, row):
        _open_header(key, vault, row)
        _open_field(key, vault, row, "body")
        raise _rolled_back(vault, record_id, revision_id)
    return row


def _node(key: bytes, vault: VaultRow, row: RevisionRow) -> Node:
    """The merge's view of a revision (a deletion's erased ids read from its sealed body)."""
    if not row.deleted:
        return Node(row.id, row.revision, row.parents)
    return Node(row.id, row.revision, row.parents, True, frozenset(_erased_by(key, vault, row)))


def _erased_by(key: bytes, vault: VaultRow, row: RevisionRow) -> list[str]:
    """The revision ids a deletion erased (its sealed body); raises ``integrity_error``."""
    try:
        return msgspec.msgpack.decode(_open_field(key, vault, row, "body"), type=list[str])
    except msgspec.DecodeError:
        raise _damaged_error(vault, row.record_id, row.revision, "body", "cannot be decoded") from None


def _is_authentic(vault: VaultRow, record_id: str, row: RevisionRow) -> bool:
    """The row is the revision its id names, of this record of this vault."""
    return crypto.revision_id(_place(vault, record_id, row), row.header, row.body) == row.id


def _seal_heads(key: bytes, vault_id: str, heads: HeadSet) -> bytes:
    return crypto.seal(key, msgspec.msgpack.encode(heads), crypto.heads_aad(vault_id))


def _pick(
    vault: VaultRow, record_id: str, chain: list[RevisionRow], broken: list[str], revision: int | str
) -> RevisionRow:
    """The intact revision of depth ``revision`` (an int) or whose id starts with ``revision`` (8 to 64 hex digits);
    when there is none and ``broken`` names revisions that are missing or changed, ``integrity_error``."""
    if isinstance(revision, int):
        matches = [row for row in chain if row.revision == revision]
    else:
        matches = [row for row in chain if row.id.startswith(revision.lower())] if len(revision) >= 8 else []
    if not matches:
        if broken:
            raise _rolled_back(vault, record_id, broken[0])
        raise _not_found(vault, record_id, revision)
    if len(matches) > 1:
        ids = sorted(row.id for row in matches)
        raise MemoriesError(
            "ambiguous_revision",
            f"record {record_id} has {len(ids)} revisions {revision} (made on different devices): "
            f"{', '.join(ids)}; give one of these ids to --revision",
            {"revisions": ids},
        )
    return matches[0]


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


def _open_header(key: bytes, vault: VaultRow, row: RevisionRow) -> RecordHeader:
    plain = _open_field(key, vault, row, "header")
    try:
        return msgspec.msgpack.decode(plain, type=RecordHeader)
    except msgspec.DecodeError:  # authentic but unreadable: written by a newer release
        raise _damaged_error(vault, row.record_id, row.revision, "header", "cannot be decoded") from None


def _open_field(key: bytes, vault: VaultRow, row: RevisionRow, field: str) -> bytes:
    """Decrypt one field of one revision.

    Raises:
        MemoriesError: ``integrity_error`` with ``details`` ``{"vault", "id", "revision", "field"}``.
    """
    try:
        return crypto.open_sealed(key, getattr(row, field), crypto.record_aad(_place(vault, row.record_id, row), field))
    except MemoriesError:
        raise _damaged_error(vault, row.record_id, row.revision, field, "failed authentication") from None


def _damaged_error(vault: VaultRow, record_id: str, revision: int, field: str, what: str) -> MemoriesError:
    return MemoriesError(
        "integrity_error",
        f"the {field} of record {record_id} revision {revision} in vault {vault.name!r} {what}; it was changed, "
        f"moved or corrupted (`memory delete {vault.name} {record_id}` removes it)",
        {"vault": vault.name, "id": record_id, "revision": revision, "field": field},
    )


def _rolled_back(vault: VaultRow, record_id: str, revision_id: str) -> MemoriesError:
    return MemoriesError(
        "integrity_error",
        f"revision {revision_id[:16]} of record {record_id} in vault {vault.name!r} is missing or is not the one the "
        f"vault's head set names: it was dropped, replaced or rolled back outside Memories "
        f"(`memory delete {vault.name} {record_id}` removes the record)",
        {"vault": vault.name, "id": record_id, "revision_id": revision_id, "field": "revision"},
    )


def _not_found(vault: VaultRow, record_id: str, revision: int | str | None) -> MemoriesError:
    if revision is None:
        return MemoriesError("record_not_found", f"no record {record_id!r} in vault {vault.name!r}")
    return MemoriesError("record_not_found", f"record {record_id!r} in vault {vault.name!r} has no revision {revision}")
