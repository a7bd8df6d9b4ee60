"""What a sync imports and exports: sealed revisions as the store holds them, and their merge by the revision graph.

The exchange never decrypts a field except a deletion's list of erased ids: revisions travel sealed under the
vault key, identified by their ids (:func:`memories.crypto.revision_id`). The pure merge is
:mod:`memories.vault.merge`.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from memories import crypto
from memories.vault.catalog import Catalog
from memories.vault.heads import Head, Heads, is_live
from memories.vault.keys import Keyring
from memories.vault.merge import Node, merge_record
from memories.vault.sealing import erased_by, is_authentic, place, row
from memories.vault.store import RevisionRow, Store, VaultRow


class Revision(msgspec.Struct, frozen=True):
    """One sealed revision as it is exchanged: its id (SHA-256 hex of
    :func:`~memories.crypto.sealed_revision`), clear place and field ciphertexts (still sealed under the vault key,
    as the store keeps them)."""

    id: str
    place: crypto.RevisionPlace
    header: bytes
    body: bytes


class Merged(NamedTuple):
    """What :meth:`Exchange.merge` did: revisions imported, records changed, records now in conflict, and revision
    ids whose parents have not arrived yet (left for a later pull)."""

    imported: int
    changed: list[str]
    conflicts: list[str]
    waiting: list[str]


class Exchange:
    """Export and import of a vault's sealed revisions. Blocking (the store's thread).

    Args:
        store: the home's database; keys: the keyring; heads: the vaults' head sets; catalog: reloaded after a
        merge that changed records.
    """

    def __init__(self, store: Store, keys: Keyring, heads: Heads, catalog: Catalog) -> None:
        self._store = store
        self._keys = keys
        self._heads = heads
        self._catalog = catalog

    def merge(self, vault: VaultRow, revisions: list[Revision]) -> Merged:
        """Merge authenticated revisions read from a sync folder by the revision graph (:mod:`memories.vault.merge`),
        in one transaction: revisions added, those a deletion erased erased, every touched record's heads
        replaced. Nothing changes when nothing is new.

        Raises:
            MemoriesError: ``vault_locked``, ``integrity_error`` (the head set, or a stored deletion).
        """
        key = self._keys.vault_key(vault)
        self._heads.of(vault, key)
        incoming: dict[str, list[Revision]] = {}
        for revision in revisions:
            incoming.setdefault(revision.place.record_id, []).append(revision)
        changed: dict[str, list[Head]] = {}
        add: list[RevisionRow] = []
        erase: list[str] = []
        waiting: list[str] = []
        for record_id, arrived in incoming.items():
            stored = {r.id: _node(key, vault, r) for r in self._store.revisions(vault.id, record_id)}
            rows = {r.id: row(r.place, r.header, r.body) for r in arrived}
            merged = merge_record(stored, [_node(key, vault, r) for r in rows.values()])
            waiting.extend(node.id for node in merged.waiting)
            if not merged.changed:
                continue
            add.extend(rows[node.id] for node in merged.add)
            erase.extend(merged.erase)
            changed[record_id] = [Head(node.id, node.revision, node.deleted) for node in merged.heads]
        if changed:
            self._heads.commit(vault, key, changed, add, erase)
            self._catalog.reload(vault)
        conflicts = sorted(rid for rid, h in self._heads.of(vault, key).records.items() if len(h) > 1 and is_live(h))
        return Merged(len(add), sorted(changed), conflicts, waiting)

    def sync_index(self, vault: VaultRow) -> tuple[set[str], set[str]]:
        """``(ids of every stored revision, ids every stored deletion erased)``: what a push writes and removes.
        Raises ``vault_locked``, ``integrity_error``."""
        key = self._keys.vault_key(vault)
        stored, erased = set(), set()
        for revision_id, _, deleted in self._store.revision_index(vault.id):
            stored.add(revision_id)
            if deleted:
                [deletion] = self._store.revisions_by_id(vault.id, [revision_id]).values()
                erased.update(erased_by(key, vault, deletion))
        return stored, erased

    def sealed(self, vault: VaultRow, revision_ids: list[str]) -> list[Revision]:
        """The stored revisions ``revision_ids`` as sync payload contents (each checked against its id first)."""
        rows = self._store.revisions_by_id(vault.id, revision_ids)
        return [
            Revision(r.id, place(vault, r.record_id, r), r.header, r.body)
            for r in rows.values()
            if is_authentic(vault, r.record_id, r)
        ]


def _node(key: bytes, vault: VaultRow, revision: RevisionRow) -> Node:
    """The merge's view of a revision (a deletion's erased ids read from its sealed body)."""
    if not revision.deleted:
        return Node(revision.id, revision.revision, revision.parents)
    return Node(revision.id, revision.revision, revision.parents, True, frozenset(erased_by(key, vault, revision)))
