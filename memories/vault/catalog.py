"""The catalog: each vault's decrypted headers while unlocked, retrieval eligibility (R-01, R-02), damaged records.

The catalog holds, per vault and only while unlocked, the chosen head's header (kind, sensitivity, title,
metadata) of every live record. It decides retrieval eligibility in the supervisor: only a record of kind
``memory`` or ``card`` with sensitivity ``general`` is ever decrypted for the index worker (:meth:`index_texts`).
Reads of a record always decrypt from the store, so tampering is caught on every read.

A record whose latest header or body fails authentication is *damaged*: it is kept out of the eligible set (so
searches leave it out and warn about it, :meth:`Catalog.damaged`), marked in listings, and every read of it is
``integrity_error`` naming the vault, record and revision in ``details``; deleting it works. One bad record never
makes the rest of a vault unreadable or unsearchable.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from memories.errors import MemoriesError
from memories.vault.heads import Head, Heads, chosen_head, is_live
from memories.vault.keys import Keyring
from memories.vault.sealing import RecordHeader, checked, is_eligible, open_field, open_header
from memories.vault.store import Store, VaultRow, first_revision_times
from memories.vault.views import IndexText, ListedRecord, RecordKind


class CatalogEntry(msgspec.Struct):
    """A record's head (the chosen one, :func:`~memories.vault.heads.chosen_head`, when it has several): depth,
    id, header, and whether the record is in conflict (several heads that differ, :meth:`Catalog.in_conflict`)."""

    revision: int
    revision_id: str
    header: RecordHeader
    conflict: bool = False


def split_tags(value: str | None) -> list[str]:
    """Metadata ``tags`` is a comma-separated list.

    >>> split_tags(" a, b ,, c")
    ['a', 'b', 'c']
    """
    return [t.strip() for t in (value or "").split(",") if t.strip()]


class Catalog:
    """Decrypted headers and damaged records per vault, while unlocked. Blocking (the store's thread).

    Args:
        store: the home's database; keys: the keyring; heads: the vaults' head sets.
    """

    def __init__(self, store: Store, keys: Keyring, heads: Heads) -> None:
        self._store = store
        self._keys = keys
        self._heads = heads
        self._entries: dict[str, dict[str, CatalogEntry]] = {}
        self._damaged: dict[str, dict[str, int]] = {}

    def forget(self, vault_id: str | None = None) -> None:
        """Drop the decrypted headers and what is known of damaged records (one vault's, or every one on lock)."""
        if vault_id is None:
            self._entries.clear()
            self._damaged.clear()
        else:
            self._entries.pop(vault_id, None)
            self._damaged.pop(vault_id, None)

    def reload(self, vault: VaultRow) -> None:
        """Forget the vault's headers (not its damaged records): they are read again from the new heads at the next
        use (after a merge)."""
        self._entries.pop(vault.id, None)

    def entries(self, vault: VaultRow) -> dict[str, CatalogEntry]:
        """The chosen head's decrypted header of every live record whose head is intact, loaded once per unlock
        and kept current (the others are :meth:`damaged`). Raises ``integrity_error`` when the vault's head set
        is missing or fails authentication."""
        entries = self._entries.get(vault.id)
        if entries is None:
            key = self._keys.vault_key(vault)
            damaged = self._damaged_in(vault)
            records = {rid: heads for rid, heads in self._heads.of(vault, key).records.items() if is_live(heads)}
            chosen = {rid: chosen_head(heads) for rid, heads in records.items()}
            rows = self._store.revisions_by_id(vault.id, [head.id for head in chosen.values()])
            entries = {}
            for record_id, head in chosen.items():
                row = rows.get(head.id)
                try:
                    header = open_header(key, vault, checked(key, vault, record_id, head.id, row))
                except MemoriesError:
                    damaged[record_id] = head.revision
                    continue
                conflict = self.in_conflict(vault, key, record_id, records[record_id])
                entries[record_id] = CatalogEntry(head.revision, head.id, header, conflict)
            self._entries[vault.id] = entries
        return entries

    def in_conflict(self, vault: VaultRow, key: bytes, record_id: str, heads: list[Head]) -> bool:
        """The record has several heads that differ: one is a deletion (an edit made against a delete), or their
        kind, sensitivity, title or body differ. Siblings with the same content (two devices that each imported the
        same change of one synced notes folder) are one version, not a conflict: they are shown and indexed as the
        chosen head, and the next update merges them. A head that fails its checks counts as different."""
        if len(heads) < 2:
            return False
        if any(head.deleted for head in heads):
            return True
        rows = self._store.revisions_by_id(vault.id, [head.id for head in heads])
        versions = set()
        for head in heads:
            try:
                row = checked(key, vault, record_id, head.id, rows.get(head.id))
                header = open_header(key, vault, row)
                versions.add((header.kind, header.sensitivity, header.title, open_field(key, vault, row, "body")))
            except MemoriesError:
                return True
        return len(versions) > 1

    def put(self, vault: VaultRow, record_id: str, entry: CatalogEntry) -> None:
        """The record's new chosen head after a write: it is no longer damaged."""
        self.entries(vault)[record_id] = entry
        self._damaged_in(vault).pop(record_id, None)

    def remove(self, vault: VaultRow, record_id: str) -> None:
        """The record left the vault (deleted or moved)."""
        self.entries(vault).pop(record_id, None)
        self._damaged_in(vault).pop(record_id, None)

    def damaged(self, vault: VaultRow) -> dict[str, int]:
        """Record id -> head depth of every record found damaged since unlock: its head revision was missing,
        replaced or failed authentication when the catalog was loaded, or when it was decrypted for the index."""
        self.entries(vault)
        return dict(self._damaged_in(vault))

    def eligible(self, vault: VaultRow) -> dict[str, int]:
        """Record id -> head depth of every retrieval-eligible record that is not damaged."""
        damaged = self.damaged(vault)
        return {
            rid: e.revision
            for rid, e in self.entries(vault).items()
            if is_eligible(e.header) and damaged.get(rid) != e.revision
        }

    def summaries(self, vault: VaultRow, kind: RecordKind | None) -> list[ListedRecord]:
        """Listing rows (never a body). Damaged records are always listed, marked ``damaged``; one whose header
        cannot be read has no kind, sensitivity or title."""
        catalog, damaged = self.entries(vault), self.damaged(vault)
        created = first_revision_times(self._store, vault.id)
        rows = [
            ListedRecord(
                record_id,
                e.revision,
                e.header.kind,
                e.header.sensitivity,
                e.header.title,
                record_id in damaged,
                e.conflict,
                created=created.get(record_id),
                meta=e.header.meta,
            )
            for record_id, e in catalog.items()
            if kind is None or e.header.kind == kind or record_id in damaged
        ]
        unreadable = [(rid, revision) for rid, revision in damaged.items() if rid not in catalog]
        return rows + [ListedRecord(rid, revision, None, None, None, True) for rid, revision in unreadable]

    def index_texts(self, vault: VaultRow, record_ids: list[str]) -> list[IndexText]:
        """Decrypt the chosen head of eligible records for the index worker; ineligible or unknown ids are skipped,
        and records that fail the checks are skipped and remembered as :meth:`damaged`."""
        key = self._keys.vault_key(vault)
        catalog = self.entries(vault)
        wanted = {rid: catalog[rid] for rid in record_ids if rid in catalog}
        rows = self._store.revisions_by_id(vault.id, [entry.revision_id for entry in wanted.values()])
        records = []
        created = first_revision_times(self._store, vault.id) if wanted else {}
        for record_id, entry in wanted.items():
            row = rows.get(entry.revision_id)
            try:
                row = checked(key, vault, record_id, entry.revision_id, row)
                header = open_header(key, vault, row)
                if not is_eligible(header):
                    continue
                body = open_field(key, vault, row, "body")
            except MemoriesError:
                self._damaged_in(vault)[record_id] = entry.revision
                continue
            kind: Literal["memory", "card"] = "card" if header.kind == "card" else "memory"  # eligible: one of both
            text = IndexText(
                record_id, row.revision, kind, header.title, body.decode("utf-8"), header.meta, created.get(record_id)
            )
            records.append(text)
        return records

    def _damaged_in(self, vault: VaultRow) -> dict[str, int]:
        return self._damaged.setdefault(vault.id, {})
