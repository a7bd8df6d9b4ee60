"""Records: create, read, update, delete and move, each one transaction with the vault's new head set.

Every revision is kept. An update's parents are every head of the record (so it also resolves a conflict). Delete
erases every revision and checkpoints the WAL, leaving only a *deletion* revision (its parents the heads, its sealed
body the ids it erased): the tombstone a sync carries to other devices. A move seals each revision again under the
target vault's key and place. A delete, a move and an update that makes a record private (or of a kind that is not
indexed) delete its sealed vectors in the same transaction (:mod:`memories.vault.vectors`).
"""

from __future__ import annotations

import time

import msgspec

from memories import crypto
from memories.errors import MemoriesError
from memories.vault.catalog import Catalog, CatalogEntry
from memories.vault.heads import Head, Heads, chosen_head, not_found, seal_heads
from memories.vault.keys import Keyring
from memories.vault.rules import check_depth, check_header, check_place, new_body, new_id
from memories.vault.sealing import Origin, RecordHeader, is_eligible, open_field, open_header, rolled_back, seal
from memories.vault.store import RevisionRow, Store, VaultRow, Write
from memories.vault.vectors import drops
from memories.vault.views import Conflict, OpenedRevision, RecordKind, Sensitivity


class Records:
    """Record operations over the store, sealed with the keyring's keys. Blocking (the store's thread).

    Args:
        store: the home's database; keys: the keyring; heads: the vaults' head sets; catalog: the decrypted headers,
        kept current by every write.
    """

    def __init__(self, store: Store, keys: Keyring, heads: Heads, catalog: Catalog) -> None:
        self._store = store
        self._keys = keys
        self._heads = heads
        self._catalog = catalog

    def add(
        self,
        vault: VaultRow,
        kind: RecordKind,
        sensitivity: Sensitivity,
        title: str,
        body: bytes,
        meta: dict[str, str],
        origin: Origin | None = None,
        record_id: str | None = None,
    ) -> tuple[str, int]:
        """Store a new record as revision 1; returns ``(id, 1)``. ``origin`` is set by ingest only, and so is
        ``record_id`` (an imported file's card id, :func:`memories.crypto.card_id`; a random one when it is ``None``
        or already taken, also by a deleted record).

        Raises:
            MemoriesError: ``body_too_large``, ``invalid_utf8``, ``invalid_argument`` (a NUL byte, title, metadata),
                ``vault_locked``, ``integrity_error`` (the vault's head set).
        """
        header = check_header(RecordHeader(kind, sensitivity, title, dict(meta), origin))
        text = new_body(body)
        key = self._keys.vault_key(vault)
        heads = self._heads.of(vault, key)
        if record_id is None or record_id in heads.records:
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
        heads = self._heads.of_record(vault, key, record_id)
        if revision is None:
            base = self._heads.verified(vault, key, record_id, chosen_head(heads))
        else:
            chain, broken = self._heads.chain(vault, key, record_id, heads)
            base = _pick(vault, record_id, [r for r in chain.values() if not r.deleted], broken, revision)
        header, old_body = _open(key, vault, base)
        new_header = RecordHeader(
            header.kind,
            sensitivity or header.sensitivity,
            title if title is not None else header.title,
            dict(meta) if meta is not None else header.meta,
            origin or header.origin,
        )
        check_header(new_header)
        text = new_body(body) if body is not None else old_body
        drop = [] if is_eligible(new_header) else drops(key, [record_id])
        return record_id, self._write(vault, key, record_id, heads, new_header, text, drop)

    def read(self, vault: VaultRow, record_id: str, revision: int | str | None) -> OpenedRevision:
        """Decrypt one revision: the chosen head by default, else the one of that depth or id (a unique prefix of
        at least 8 hex digits). Every revision of the record is checked against the head set first.

        Raises:
            MemoriesError: ``record_not_found``; ``ambiguous_revision`` (siblings share the depth; ``details``
                ``{"revisions": [ids]}``); ``integrity_error`` (a revision was changed, dropped or rolled back);
                ``vault_locked``.
        """
        key = self._keys.vault_key(vault)
        heads = self._heads.of_record(vault, key, record_id)
        chain, broken = self._heads.chain(vault, key, record_id, heads)
        if revision is None:
            head = chosen_head(heads).id
            row = self._heads.verified(vault, key, record_id, chosen_head(heads)) if head in broken else chain[head]
        else:
            row = _pick(vault, record_id, [r for r in chain.values() if not r.deleted], broken, revision)
        header, body = _open(key, vault, row)
        roots = [r.created for r in chain.values() if r.revision == 1]
        created = min(roots) if roots else row.created
        return OpenedRevision(
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
            conflict=(
                Conflict(sorted(h.id for h in heads), any(h.deleted for h in heads))
                if self._catalog.in_conflict(vault, key, record_id, heads)
                else None
            ),
        )

    def read_eligible(self, vault: VaultRow, record_id: str, revision: int | str | None) -> OpenedRevision | None:
        """:meth:`read`, for a record whose chosen head and read revision are retrieval-eligible (R-01, R-02);
        ``None`` when either is not (or the record is not in the catalog). Raises what :meth:`read` raises."""
        latest = self._catalog.entries(vault).get(record_id)
        if latest is None or not is_eligible(latest.header):
            return None
        view = self.read(vault, record_id, revision)
        eligible = view.kind in ("memory", "card") and view.sensitivity == "general"
        return view if eligible else None

    def read_latest(self, vault: VaultRow, record_id: str) -> tuple[RecordHeader, str]:
        """``(header, body)`` of the chosen head (raises ``record_not_found``, ``integrity_error``)."""
        key = self._keys.vault_key(vault)
        head = chosen_head(self._heads.of_record(vault, key, record_id))
        return _open(key, vault, self._heads.verified(vault, key, record_id, head))

    def read_heads(self, vault: VaultRow, record_id: str) -> list[tuple[RecordHeader, str]]:
        """``(header, body)`` of every head that is not a deletion, the chosen one first (raises
        ``record_not_found``, ``integrity_error``)."""
        key = self._keys.vault_key(vault)
        heads = self._heads.of_record(vault, key, record_id)
        chosen = chosen_head(heads)
        ordered = [chosen, *(head for head in heads if head != chosen and not head.deleted)]
        return [_open(key, vault, self._heads.verified(vault, key, record_id, head)) for head in ordered]

    def delete(self, vault: VaultRow, record_id: str) -> None:
        """Erase every revision of the record, leaving a deletion revision (its tombstone: parents the heads, body
        the ids it erased, sealed; a sync pushes it so other devices erase them too). Raises ``record_not_found``,
        ``vault_locked``."""
        key = self._keys.vault_key(vault)
        heads = self._heads.of_record(vault, key, record_id)
        deletion, erased = self._deletion(vault, key, record_id, heads)
        changed = {record_id: [Head(deletion.id, deletion.revision, True)]}
        self._heads.commit(vault, key, changed, [deletion], erased, drops(key, [record_id]))
        self._store.checkpoint()
        self._catalog.remove(vault, record_id)

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
        heads = self._heads.of_record(vault, key, record_id)
        if self._catalog.in_conflict(vault, key, record_id, heads):
            raise MemoriesError(
                "invalid_argument", f"record {record_id} is in conflict; resolve it first (`memory update`)"
            )
        chain, broken = self._heads.chain(vault, key, record_id, heads)
        if broken:
            self._heads.verified(vault, key, record_id, Head(broken[0], 0))  # the failing field, or the missing row
        target_heads = self._heads.of(target, target_key)
        if record_id in target_heads.records:
            raise MemoriesError("invalid_argument", f"vault {target.name!r} already has a record {record_id}")
        renamed: dict[str, str] = {}
        headers: dict[str, RecordHeader] = {}
        moved = []
        for row in sorted((r for r in chain.values() if not r.deleted), key=lambda r: (r.revision, r.id)):
            header, body = _open(key, vault, row)
            parents = tuple(sorted(renamed[parent] for parent in row.parents if parent in renamed))
            place = crypto.RevisionPlace(target.id, record_id, row.revision, parents, False, row.created)
            sealed = seal(target_key, place, header, body.encode("utf-8"))
            renamed[row.id] = sealed.id
            headers[sealed.id] = header
            moved.append(sealed)
        new_heads = [Head(renamed[h.id], h.revision) for h in heads]
        deletion, erased = self._deletion(vault, key, record_id, heads)
        source_set = self._heads.next(vault, {record_id: [Head(deletion.id, deletion.revision, True)]})
        target_set = self._heads.next(target, {record_id: new_heads})
        self._store.write(
            Write(vault.id, seal_heads(key, vault.id, source_set), [deletion], erased, drops(key, [record_id])),
            Write(target.id, seal_heads(target_key, target.id, target_set), moved),
        )
        self._heads.replace(vault.id, source_set)
        self._heads.replace(target.id, target_set)
        self._store.checkpoint()
        self._catalog.remove(vault, record_id)
        head = chosen_head(new_heads)
        self._catalog.put(target, record_id, CatalogEntry(head.revision, head.id, headers[head.id]))
        return head.revision

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
        check_depth(check_place(place).revision, [head.revision for head in heads])
        return seal(key, place, b"", msgspec.msgpack.encode(erased)), erased

    def _write(
        self,
        vault: VaultRow,
        key: bytes,
        record_id: str,
        parents: list[Head],
        header: RecordHeader,
        body: str,
        drop_vectors: list[str] | None = None,
    ) -> int:
        """Seal a revision of ``record_id`` with ``parents`` (``[]`` creates the record), make it the record's only
        head (deleting the vector rows ``drop_vectors`` in the same transaction) and return its depth."""
        place = crypto.RevisionPlace(
            vault.id,
            record_id,
            1 + max((parent.revision for parent in parents), default=0),
            tuple(sorted(parent.id for parent in parents)),
            False,
            time.time(),
        )
        check_depth(check_place(place).revision, [parent.revision for parent in parents])
        row = seal(key, place, header, body.encode("utf-8"))
        head = Head(row.id, row.revision)
        self._heads.of(vault, key)
        self._heads.commit(vault, key, {record_id: [head]}, [row], drop_vectors=drop_vectors or ())
        self._catalog.put(vault, record_id, CatalogEntry(head.revision, head.id, header))
        return head.revision


def _open(key: bytes, vault: VaultRow, row: RevisionRow) -> tuple[RecordHeader, str]:
    header = open_header(key, vault, row)
    body = open_field(key, vault, row, "body")
    return header, body.decode("utf-8")


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
            raise rolled_back(vault, record_id, broken[0])
        raise not_found(vault, record_id, revision)
    if len(matches) > 1:
        ids = sorted(row.id for row in matches)
        raise MemoriesError(
            "ambiguous_revision",
            f"record {record_id} has {len(ids)} revisions {revision} (made on different devices): "
            f"{', '.join(ids)}; give one of these ids to --revision",
            {"revisions": ids},
        )
    return matches[0]
