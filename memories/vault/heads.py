"""The revision graph and each vault's head set.

Revisions form a graph: each has an id (:func:`memories.crypto.revision_id`), its parents' ids and a depth
(``revision``, 1, 2, 3 … for people). Each vault keeps a sealed :class:`HeadSet` (every record's head revisions and
a counter), replaced in the same transaction as every write (:meth:`Heads.commit`). A revision row dropped,
replaced by another or rolled back no longer matches the id the head set (or a child) names: that record is
damaged, and reading it is ``integrity_error``. Restoring a whole older database file cannot be told apart
locally.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from memories import crypto
from memories.errors import MemoriesError
from memories.vault.sealing import checked, erased_by, is_authentic, rolled_back
from memories.vault.store import RevisionRow, Store, VaultRow, Write


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


def seal_heads(key: bytes, vault_id: str, heads: HeadSet) -> bytes:
    """The head set sealed under the vault key, bound to the vault id."""
    return crypto.seal(key, msgspec.msgpack.encode(heads), crypto.heads_aad(vault_id))


def not_found(vault: VaultRow, record_id: str, revision: int | str | None) -> MemoriesError:
    """``record_not_found`` for a record (or one revision of it)."""
    if revision is None:
        return MemoriesError("record_not_found", f"no record {record_id!r} in vault {vault.name!r}")
    return MemoriesError("record_not_found", f"record {record_id!r} in vault {vault.name!r} has no revision {revision}")


class Heads:
    """Every vault's head set, opened once per unlock, and the walk of a record's graph from its heads. Blocking.

    Args:
        store: the home's database.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._sets: dict[str, HeadSet] = {}

    def forget(self, vault_id: str | None = None) -> None:
        """Drop the opened head sets (one vault's, or every one on lock)."""
        if vault_id is None:
            self._sets.clear()
        else:
            self._sets.pop(vault_id, None)

    def of(self, vault: VaultRow, key: bytes) -> HeadSet:
        """The vault's head set, opened once per unlock.

        Raises:
            MemoriesError: ``integrity_error`` when it is missing or fails authentication.
        """
        heads = self._sets.get(vault.id)
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
            self._sets[vault.id] = heads
        return heads

    def of_record(self, vault: VaultRow, key: bytes, record_id: str) -> list[Head]:
        """The heads of a live record (raises ``record_not_found``, also for a deleted one)."""
        heads = self.of(vault, key).records.get(record_id)
        if heads is None or not is_live(heads):
            raise not_found(vault, record_id, None)
        return heads

    def next(self, vault: VaultRow, changed: dict[str, list[Head]]) -> HeadSet:
        """The vault's next head set, one write later: the records ``changed`` get these heads (the vault's set must
        be open: :meth:`of`)."""
        current = self._sets[vault.id]
        return HeadSet(current.counter + 1, {**current.records, **changed})

    def replace(self, vault_id: str, heads: HeadSet) -> None:
        """Keep ``heads`` as the vault's head set after a write that stored it (:meth:`Store.write`)."""
        self._sets[vault_id] = heads

    def commit(
        self,
        vault: VaultRow,
        key: bytes,
        changed: dict[str, list[Head]],
        add: Sequence[RevisionRow] = (),
        erase: Sequence[str] = (),
        drop_vectors: Sequence[str] = (),
    ) -> None:
        """Store ``add``, erase the revision ids ``erase``, delete the vector rows ``drop_vectors`` and give the
        records ``changed`` their new heads, in one transaction with the new head set."""
        heads = self.next(vault, changed)
        self._store.write(Write(vault.id, seal_heads(key, vault.id, heads), add, erase, drop_vectors))
        self._sets[vault.id] = heads

    def verified(self, vault: VaultRow, key: bytes, record_id: str, head: Head) -> RevisionRow:
        """The stored revision ``head``, checked (:func:`~memories.vault.sealing.checked`)."""
        return checked(key, vault, record_id, head.id, self._store.revisions_by_id(vault.id, [head.id]).get(head.id))

    def chain(
        self, vault: VaultRow, key: bytes, record_id: str, heads: list[Head]
    ) -> tuple[dict[str, RevisionRow], list[str]]:
        """The revisions reachable from the record's heads: ``(id -> row of each one whose id matches its row,
        [ids missing or not matching their row])``; a parent a deletion erased is not missing. The parents of a row
        that does not match are still followed, since every row authenticates itself too: one tampered revision
        leaves its intact ancestors readable.

        Raises:
            MemoriesError: ``integrity_error`` when an intact revision of the record descends from none of the heads
                (the head set was rolled back).
        """
        stored = {row.id: row for row in self._store.revisions(vault.id, record_id)}
        erased = {e for row in stored.values() if row.deleted for e in erased_by(key, vault, row)}
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
            if is_authentic(vault, record_id, row):
                chain[revision_id] = row
            else:
                broken.append(revision_id)
            todo.extend(row.parents)
        # A write never leaves a revision that no head descends from: such a row means the head set was rolled back.
        beyond = [rid for rid, row in stored.items() if rid not in seen and is_authentic(vault, record_id, row)]
        if beyond:
            raise rolled_back(vault, record_id, beyond[0])
        return chain, broken
