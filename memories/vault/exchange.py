"""What a sync imports and exports: sealed revisions as the store holds them, and their merge by the revision graph.

Revisions travel sealed under the vault key, identified by their ids (:func:`memories.crypto.revision_id`). Whoever
knows the sync passphrase can seal one, so an imported revision keeps the rules a local write keeps
(:mod:`memories.vault.rules`: record and parent ids, depth, time, title, metadata, origin, body, a deletion's
erased ids) before it is stored; its fields are decrypted for that check only. One that breaks a rule is
*invalid*: never stored, and it never keeps the others from being imported (nor does a revision the database
refuses: the records of such a merge are then stored one transaction each). The pure merge is
:mod:`memories.vault.merge`.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import NamedTuple

import msgspec

from memories import crypto
from memories.errors import MemoriesError
from memories.vault.catalog import Catalog
from memories.vault.heads import Head, Heads, chosen_head, is_live
from memories.vault.keys import Keyring
from memories.vault.merge import Node, merge_record
from memories.vault.rules import check_erased, check_header, check_place, decode_body
from memories.vault.sealing import RecordHeader, erased_by, is_authentic, is_eligible, open_header, place, row
from memories.vault.store import RevisionRow, Store, VaultRow
from memories.vault.vectors import drops

log = logging.getLogger("memories.sync")

_REFUSED = (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError, OverflowError)
"""What the database raises for a row it will not store (a constraint, a value out of its range); a full disk or a
failing file (``OperationalError``) is not the revision's fault and ends the merge."""


class Revision(msgspec.Struct, frozen=True):
    """One sealed revision as it is exchanged: its id (SHA-256 hex of
    :func:`~memories.crypto.sealed_revision`), clear place and field ciphertexts (still sealed under the vault key,
    as the store keeps them)."""

    id: str
    place: crypto.RevisionPlace
    header: bytes
    body: bytes


class Merged(NamedTuple):
    """What :meth:`Exchange.merge` did: revisions imported, records changed, records now in conflict (siblings with
    the same content are not, :meth:`~memories.vault.catalog.Catalog.in_conflict`), revision ids whose parents have
    not arrived yet (left for a later pull), and revision id -> the rule it breaks for each one not imported because
    it is invalid."""

    imported: int
    changed: list[str]
    conflicts: list[str]
    waiting: list[str]
    invalid: dict[str, str]


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
        replaced, the vector rows of records it deleted or made unindexed deleted. A revision that breaks a rule
        (:func:`broken_rule`, and the depth rule of the merge) is left out and reported in ``invalid``; when the
        database refuses the transaction, each record is stored in one of its own and the revisions of a record it
        still refuses are reported invalid. Nothing changes when nothing is new.

        Raises:
            MemoriesError: ``vault_locked``, ``integrity_error`` (the head set, or a stored deletion).
        """
        key = self._keys.vault_key(vault)
        self._heads.of(vault, key)
        invalid: dict[str, str] = {}
        incoming: dict[str, list[Revision]] = {}
        for revision in revisions:
            rule = broken_rule(key, revision)
            if rule is not None:
                invalid[revision.id] = rule
            else:
                incoming.setdefault(revision.place.record_id, []).append(revision)
        changes: dict[str, tuple[list[Head], list[RevisionRow], set[str]]] = {}
        waiting: list[str] = []
        unindexed: set[str] = set()
        for record_id, arrived in incoming.items():
            stored_rows = {r.id: r for r in self._store.revisions(vault.id, record_id)}
            stored = {r.id: _node(key, vault, r) for r in stored_rows.values()}
            rows = {r.id: row(r.place, r.header, r.body) for r in arrived}
            merged = merge_record(stored, [_node(key, vault, r) for r in rows.values()])
            waiting.extend(node.id for node in merged.waiting)
            invalid.update((node.id, "the depth is not 1 + the deepest parent's") for node in merged.invalid)
            if merged.changed:
                heads = [Head(node.id, node.revision, node.deleted) for node in merged.heads]
                changes[record_id] = (heads, [rows[node.id] for node in merged.add], merged.erase)
                if not _indexed(key, vault, heads, {**stored_rows, **rows}):
                    unindexed.add(record_id)
        committed = self._commit(vault, key, changes, invalid, unindexed)
        if committed:
            self._catalog.reload(vault)
        for revision_id, rule in sorted(invalid.items()):
            log.warning("vault %s: revision %s from the sync folder is invalid: %s", vault.id, revision_id[:16], rule)
        conflicts = sorted(
            rid
            for rid, h in self._heads.of(vault, key).records.items()
            if len(h) > 1 and is_live(h) and self._catalog.in_conflict(vault, key, rid, h)
        )
        imported = sum(len(changes[record_id][1]) for record_id in committed)
        return Merged(imported, sorted(committed), conflicts, waiting, invalid)

    def _commit(
        self,
        vault: VaultRow,
        key: bytes,
        changes: dict[str, tuple[list[Head], list[RevisionRow], set[str]]],
        invalid: dict[str, str],
        unindexed: set[str],
    ) -> list[str]:
        """Store ``changes`` (record id -> its heads, rows to add, ids to erase) in one transaction, with the vector
        rows of the ``unindexed`` records deleted, or, when the database refuses it, one transaction per record;
        returns the records stored, and adds the revisions of a record refused alone to ``invalid``."""
        if not changes:
            return []
        try:
            self._heads.commit(
                vault,
                key,
                {record_id: heads for record_id, (heads, _, _) in changes.items()},
                [added for _, add, _ in changes.values() for added in add],
                [erased for _, _, erase in changes.values() for erased in erase],
                drops(key, sorted(unindexed)),
            )
            return list(changes)
        except _REFUSED:
            log.warning("vault %s: the database refused a merge; storing its records one by one", vault.id)
        committed = []
        for record_id, (heads, add, erase) in changes.items():
            try:
                drop = drops(key, [record_id] if record_id in unindexed else [])
                self._heads.commit(vault, key, {record_id: heads}, add, list(erase), drop)
            except _REFUSED as exc:
                invalid.update((added.id, f"the database refused it ({type(exc).__name__})") for added in add)
                continue
            committed.append(record_id)
        return committed

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


def _indexed(key: bytes, vault: VaultRow, heads: list[Head], rows: dict[str, RevisionRow]) -> bool:
    """Whether a record with these heads after a merge is still indexed: live, and its chosen head an eligible
    revision that opens (a deleted, private, unindexed or damaged one has its vectors deleted with the merge)."""
    if not is_live(heads):
        return False
    chosen = rows.get(chosen_head(heads).id)
    if chosen is None:
        return False
    try:
        return is_eligible(open_header(key, vault, chosen))
    except MemoriesError:
        return False


def _node(key: bytes, vault: VaultRow, revision: RevisionRow) -> Node:
    """The merge's view of a revision (a deletion's erased ids read from its sealed body)."""
    if not revision.deleted:
        return Node(revision.id, revision.revision, revision.parents)
    return Node(revision.id, revision.revision, revision.parents, True, frozenset(erased_by(key, vault, revision)))


def broken_rule(key: bytes, revision: Revision) -> str | None:
    """The rule of :mod:`memories.vault.rules` that an authenticated revision from a sync folder breaks (its place,
    then its decrypted fields), or ``None``. The depth against the parents is the merge's to check (they may not
    be here yet)."""
    try:
        check_place(revision.place)
        header, body = (
            crypto.open_sealed(key, sealed, crypto.record_aad(revision.place, field))
            for field, sealed in (("header", revision.header), ("body", revision.body))
        )
        if revision.place.deleted:
            if header:
                return "a deletion has a header"
            check_erased(msgspec.msgpack.decode(body, type=list[str]))
        else:
            check_header(msgspec.msgpack.decode(header, type=RecordHeader))
            decode_body(body)
    except MemoriesError as exc:
        return exc.message
    except (msgspec.DecodeError, msgspec.ValidationError):
        return "a field cannot be decoded"
    return None
