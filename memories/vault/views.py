"""What the record store hands out: small view types of its own, never the client or worker protocol's.

The daemon maps each to its wire type in one place (:mod:`memories.daemon.core.views`), so the storage format and the
two protocols change independently: a field added to a reply needs no change here, and a kind the store knows is
not a kind an older client must decode.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

RecordKind = Literal["memory", "card", "credential", "file"]
"""A record's kind, as stored in its sealed header (the client protocol's ``RecordKind`` has the same values; a
unit test keeps them equal)."""

Sensitivity = Literal["general", "private"]

CardStatus = Literal["added", "updated", "moved", "unchanged"]
"""What :meth:`memories.vault.cards.Cards.store_note` did with a file's note."""


class Conflict(NamedTuple):
    """A record with several heads (made on different devices): their revision ids, sorted, and whether one of them
    is a deletion (an edit made against a delete)."""

    revisions: list[str]
    deleted: bool


class OpenedRevision(NamedTuple):
    """One decrypted revision of a record: ``created`` is the record's first revision's time and ``updated`` this
    revision's (Unix seconds); ``revision_id`` the revision's id (SHA-256 hex of the sealed revision); ``conflict``
    is set when the record has several heads."""

    id: str
    revision: int
    revision_id: str
    kind: RecordKind
    sensitivity: Sensitivity
    title: str
    body: str
    meta: dict[str, str]
    created: float
    updated: float
    conflict: Conflict | None = None


class ListedRecord(NamedTuple):
    """One record of a listing: its chosen head, without body or metadata. ``kind``, ``sensitivity`` and ``title``
    are ``None`` when its header is damaged; ``missing``: a card whose file a watched folder no longer has;
    ``created``: its first revision's time (Unix seconds); ``meta``: its metadata (for filters, never shown)."""

    id: str
    revision: int
    kind: RecordKind | None
    sensitivity: Sensitivity | None
    title: str | None
    damaged: bool = False
    conflict: bool = False
    missing: bool = False
    created: float | None = None
    meta: dict[str, str] | None = None


class IndexText(NamedTuple):
    """The decrypted chosen head of one retrieval-eligible record (R-01, R-02: kind ``memory`` or ``card``,
    sensitivity ``general``): what the index worker may be handed. ``body`` is the UTF-8 decoded body; ``created``
    the record's first revision's time (Unix seconds)."""

    id: str
    revision: int
    kind: Literal["memory", "card"]
    title: str
    body: str
    meta: dict[str, str]
    created: float | None = None


class Note(NamedTuple):
    """An imported file's note as the card stores it: ``path`` the file's resolved absolute path, ``source`` the
    readable path stored as metadata (relative to the folder imported), ``title``, ``body`` (the text, BOM
    removed), ``tags`` (front matter) and ``date``, the note's date as ISO 8601 (front matter ``date`` or
    ``created``, else the file's modification time; ``None``: unknown), stored as metadata ``date``."""

    path: str
    source: str
    title: str
    body: str
    tags: list[str]
    date: str | None = None


class StoredCard(NamedTuple):
    """What storing one ingested file's note did: the card's id and revision, and whether a revision was written."""

    id: str
    revision: int
    status: CardStatus
    wrote: bool


class RecordVectors(NamedTuple):
    """One record's vectors in one vector space, as the index worker holds them for ``revision``: input hashes (hex),
    float32 ``[len(keys), dimension]`` bytes, refused inputs (hex hash -> reason) and whether that is all of its
    inputs."""

    record_id: str
    revision: int
    keys: list[str]
    vectors: bytes
    failed: dict[str, str]
    complete: bool


class LoadedVectors(NamedTuple):
    """A vault's sealed vectors in one space, opened: ``keys`` (hex, no repeats) and float32 ``[len(keys),
    dimension]`` bytes, ``failed`` (hex -> reason); ``damaged`` rows skipped (failed authentication or decoding);
    ``incomplete`` the eligible records with no complete row at their current revision in this space (their inputs
    may be missing); ``stale`` those whose row is of another revision or space (rewritten by the next index run)."""

    dimension: int | None
    keys: list[str]
    vectors: bytes
    failed: dict[str, str]
    damaged: int
    incomplete: list[str]
    stale: list[str]
