"""Ingested cards: a card is its file. Storing a file's note adds its card, adds a revision to the card of the same
file, or leaves it as it is.

A card's sealed header holds its :class:`~memories.vault.sealing.Origin` (the file's resolved path and the SHA-256
of the text stored from it), so a later ingest of the same file updates that card, and a different file with the
same name never does (:func:`find_card`).
"""

from __future__ import annotations

import hashlib
import os

from memories.errors import MemoriesError
from memories.vault.catalog import Catalog, split_tags
from memories.vault.records import Records
from memories.vault.sealing import Origin
from memories.vault.store import VaultRow
from memories.vault.views import StoredCard


class Cards:
    """Cards of ingested files. Blocking (the store's thread).

    Args:
        records: record operations; catalog: the decrypted headers the cards are found in.
    """

    def __init__(self, records: Records, catalog: Catalog) -> None:
        self._records = records
        self._catalog = catalog

    def store_note(self, vault: VaultRow, path: str, source: str, title: str, body: str, tags: list[str]) -> StoredCard:
        """Add the card of the file at ``path`` (resolved, absolute), add a revision to it, or leave it as it is.
        ``source`` is the readable path stored as metadata; ``tags`` the note's front-matter tags.

        Raises:
            MemoriesError: what :meth:`Records.add` and :meth:`Records.update` raise.
        """
        data = body.encode("utf-8")
        origin = Origin(path=path, sha256=hashlib.sha256(data).hexdigest())
        meta = {"source": source}
        if tags:
            meta["tags"] = ", ".join(tags)
        found = self.find_card(vault, origin, source)
        if found is None:
            record_id, revision = self._records.add(vault, "card", "general", title, data, meta, origin)
            return StoredCard(record_id, revision, "added", True)
        existing, how = found
        header, old_body = self._records.read_latest(vault, existing)
        # The same text, title and tags read through another folder (a subfolder, a parent) is no new revision:
        # ``source`` is the readable path of the ingest that stored the latest revision, and changes with the next.
        # Only a card without one (`memory update --meta` replaced it) gets it back.
        same = (
            old_body == body
            and header.title == title
            and split_tags(header.meta.get("tags")) == tags
            and "source" in header.meta
        )
        if same and header.origin == origin:
            return StoredCard(existing, self._catalog.entries(vault)[existing].revision, "unchanged", False)
        # A new revision keeps the card's sensitivity: a card the user made private stays private.
        new_meta = {**header.meta, **meta}
        if not tags:
            new_meta.pop("tags", None)
        record_id, revision = self._records.update(
            vault, existing, title=title, body=data, sensitivity=None, meta=new_meta, origin=origin
        )
        # A card of an earlier release that only gains its file's path is reported unchanged: its text is.
        return StoredCard(record_id, revision, "moved" if how == "moved" else "unchanged" if same else "updated", True)

    def find_card(self, vault: VaultRow, origin: Origin, source: str) -> tuple[str, str] | None:
        """The card an earlier ingest made from this file, and how it was recognized, or ``None`` for a new card.

        In this order: ``"path"`` — a card whose stored resolved path is this file's; ``"moved"`` — a card whose
        stored path no longer exists and whose text at its last ingest is this file's text (the file was moved or
        renamed); ``"legacy"`` — a card of an earlier release (no stored path) with the same ``source`` and the same
        text. A different file with the same name or relative path is never matched.
        """
        cards = [(rid, e.header) for rid, e in self._catalog.entries(vault).items() if e.header.kind == "card"]
        for record_id, header in cards:
            if header.origin is not None and header.origin.path == origin.path:
                return record_id, "path"
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
