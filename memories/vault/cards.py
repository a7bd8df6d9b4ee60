"""Ingested cards: a card is its file. Storing a file's note adds its card, adds a revision to the card of the same
file, or leaves it as it is.

A card's sealed header holds its :class:`~memories.vault.sealing.Origin` (the file's resolved path and the SHA-256
of the text stored from it), so a later ingest of the same file updates that card, and a different file with the
same name never does (:meth:`Cards.find_card`). A new card's id is derived from its ``source`` under the vault key,
so two devices importing the same note of one synced notes folder make one record.
"""

from __future__ import annotations

import hashlib
import os

from memories import crypto
from memories.errors import MemoriesError
from memories.vault.catalog import Catalog, split_tags
from memories.vault.keys import Keyring
from memories.vault.records import Records
from memories.vault.sealing import Origin
from memories.vault.store import VaultRow
from memories.vault.views import CardStatus, Note, StoredCard


class Cards:
    """Cards of ingested files. Blocking (the store's thread).

    Args:
        records: record operations; catalog: the decrypted headers the cards are found in; keys: the keyring (a new
        card's id is derived from its source under the vault key, :func:`memories.crypto.card_id`).
    """

    def __init__(self, records: Records, catalog: Catalog, keys: Keyring) -> None:
        self._records = records
        self._catalog = catalog
        self._keys = keys

    def store_note(self, vault: VaultRow, note: Note, known: str | None = None) -> StoredCard:
        """Add the card of the file ``note.path`` (resolved, absolute), add a revision to it, or leave it as it is.

        ``known`` is the card a watch remembers for this file (its own record of the file, kept on this device),
        tried first. An import whose title, body and tags equal those of one of the card's heads adds no revision
        when the file's path is that head's (the same note read through another folder), or when its ``source`` is
        and the card will be found again without the path (a watch remembers it, or its id derives from that
        ``source``): the same note read on another device from the same synced notes folder. Otherwise a file found
        by its text at another path gets a revision (``moved``) recording its path and ``source``.

        Raises:
            MemoriesError: what :meth:`Records.add` and :meth:`Records.update` raise.
        """
        data = note.body.encode("utf-8")
        origin = Origin(path=note.path, sha256=hashlib.sha256(data).hexdigest())
        meta = {"source": note.source}
        if note.tags:
            meta["tags"] = ", ".join(note.tags)
        if note.date is not None:
            meta["date"] = note.date
        found = self.find_card(vault, origin, note.source, known)
        derived = self._card_id(vault, note.source)
        if found is None:
            record_id, revision = self._records.add(
                vault, "card", "general", note.title, data, meta, origin, record_id=derived
            )
            return StoredCard(record_id, revision, "added", True)
        existing, how = found
        # Found again without its path (another device's, or a card of an earlier release), a card keeps being found
        # when its id is derived from this source or a watch remembers it; otherwise its path must be recorded.
        refound = known == existing or derived == existing
        heads = self._records.read_heads(vault, existing)
        for header, old_body in heads:
            same = (old_body, header.title, split_tags(header.meta.get("tags"))) == (note.body, note.title, note.tags)
            here = header.origin is not None and (
                header.origin.path == origin.path or (refound and header.meta.get("source") == note.source)
            )
            if same and here and "source" in header.meta and how != "legacy":
                return StoredCard(existing, self._catalog.entries(vault)[existing].revision, "unchanged", False)
        header, _ = heads[0]
        same = (
            heads[0][1] == note.body
            and header.title == note.title
            and split_tags(header.meta.get("tags")) == note.tags
            and "source" in header.meta
        )
        # A new revision keeps the card's sensitivity: a card the user made private stays private.
        new_meta = {**header.meta, **meta}
        for key in ("tags", "date"):
            if key not in meta:
                new_meta.pop(key, None)
        record_id, revision = self._records.update(
            vault, existing, title=note.title, body=data, sensitivity=None, meta=new_meta, origin=origin
        )
        # A card of an earlier release that only gains its file's path is reported unchanged: its text is. A file
        # renamed or moved (its card found by its stored text, or by a watch that saw its inode move) is "moved".
        renamed = heads[0][1] == note.body and header.meta.get("source", note.source) != note.source and how != "legacy"
        status: CardStatus = "moved" if how == "moved" or renamed else "unchanged" if same else "updated"
        return StoredCard(record_id, revision, status, True)

    def _card_id(self, vault: VaultRow, source: str) -> str:
        return crypto.card_id(crypto.card_id_key(self._keys.vault_key(vault), vault.id), source)

    def find_card(
        self, vault: VaultRow, origin: Origin, source: str, known: str | None = None
    ) -> tuple[str, str] | None:
        """The card an earlier import made from this file, and how it was recognized, or ``None`` for a new card.

        In this order: ``"known"`` — the live card a watch remembers for this file; ``"path"`` — a card whose
        stored resolved path is this file's; ``"same file"`` — the card whose id was derived from this ``source``
        (:func:`memories.crypto.card_id`) and whose stored path does not exist here (the file as another device
        imported it from the same synced folder); ``"moved"`` — a card whose stored path no longer exists and whose
        text at its last import is this file's text (the file was moved or renamed); ``"legacy"`` — a card of an
        earlier release (no stored path) with the same ``source`` and the same text. A different file with the same
        name or relative path is never matched.
        """
        entries = self._catalog.entries(vault)
        if known is not None and known in entries and entries[known].header.kind == "card":
            return known, "known"
        cards = [(rid, e.header) for rid, e in entries.items() if e.header.kind == "card"]
        for record_id, header in cards:
            if header.origin is not None and header.origin.path == origin.path:
                return record_id, "path"
        derived = self._card_id(vault, source)
        entry = entries.get(derived)
        if (
            entry is not None
            and entry.header.kind == "card"
            and entry.header.origin is not None
            and not os.path.lexists(entry.header.origin.path)
        ):
            return derived, "same file"
        for record_id, header in cards:
            stored = header.origin
            if stored is not None and stored.sha256 == origin.sha256 and not os.path.lexists(stored.path):
                return record_id, "moved"
        for record_id, header in cards:
            if header.origin is None and header.meta.get("source") == source:
                try:
                    _, text = self._records.read_latest(vault, record_id)
                except MemoriesError:  # a damaged card is nobody's match; memory list shows it
                    continue
                if hashlib.sha256(text.encode("utf-8")).hexdigest() == origin.sha256:
                    return record_id, "legacy"
        return None
