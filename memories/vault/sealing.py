"""The sealed revision format: a revision's header and body sealed under its vault's key, bound to its place in the
revision graph, its id, and the integrity errors a failing one raises.

::

    vault key ─AES-256-GCM, AAD (format, vault id, record id, depth, parent ids, deletion, time, field)─▶ header | body
    revision id = SHA-256(format, place, header ciphertext, body ciphertext)      (memories.crypto.revision_id)
    vault key ─AES-256-GCM, AAD (format, vault id)─▶ head set

A deletion's header is empty and its body is the MessagePack list of the revision ids it erased.
"""

from __future__ import annotations

import msgspec

from memories import crypto
from memories.errors import MemoriesError
from memories.vault.store import RevisionRow, VaultRow
from memories.vault.views import RecordKind, Sensitivity


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


def is_eligible(header: RecordHeader) -> bool:
    """R-01/R-02: general memories and knowledge cards only; never private records, credentials or files."""
    return header.kind in ("memory", "card") and header.sensitivity == "general"


def seal(key: bytes, place: crypto.RevisionPlace, header: RecordHeader | bytes, body: bytes) -> RevisionRow:
    """A new sealed revision in ``place``, with its id (a deletion's header is empty, its body the erased ids)."""
    plain = header if isinstance(header, bytes) else msgspec.msgpack.encode(header)
    sealed_header = crypto.seal(key, plain, crypto.record_aad(place, "header"))
    sealed_body = crypto.seal(key, body, crypto.record_aad(place, "body"))
    return row(place, sealed_header, sealed_body)


def row(place: crypto.RevisionPlace, header: bytes, body: bytes) -> RevisionRow:
    """The store row of a sealed revision in ``place`` (its id computed from the place and both ciphertexts)."""
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


def place(vault: VaultRow, record_id: str, row: RevisionRow) -> crypto.RevisionPlace:
    """The clear place a stored row claims (bound into its fields' associated data and its id)."""
    return crypto.RevisionPlace(vault.id, record_id, row.revision, row.parents, row.deleted, row.created)


def is_authentic(vault: VaultRow, record_id: str, row: RevisionRow) -> bool:
    """The row is the revision its id names, of this record of this vault."""
    return crypto.revision_id(place(vault, record_id, row), row.header, row.body) == row.id


def checked(key: bytes, vault: VaultRow, record_id: str, revision_id: str, row: RevisionRow | None) -> RevisionRow:
    """``row`` if it is the revision ``revision_id`` of this record.

    Raises:
        MemoriesError: ``integrity_error``: the field that fails authentication (``details.field`` ``header`` or
            ``body``), else ``field`` ``revision`` when the row is missing or is another revision.
    """
    if row is None:
        raise rolled_back(vault, record_id, revision_id)
    if row.id != revision_id or not is_authentic(vault, record_id, row):
        open_header(key, vault, row)
        open_field(key, vault, row, "body")
        raise rolled_back(vault, record_id, revision_id)
    return row


def erased_by(key: bytes, vault: VaultRow, row: RevisionRow) -> list[str]:
    """The revision ids a deletion erased (its sealed body); raises ``integrity_error``."""
    try:
        return msgspec.msgpack.decode(open_field(key, vault, row, "body"), type=list[str])
    except msgspec.DecodeError:
        raise damaged_error(vault, row.record_id, row.revision, "body", "cannot be decoded") from None


def open_header(key: bytes, vault: VaultRow, row: RevisionRow) -> RecordHeader:
    """Decrypt and decode a revision's header; raises ``integrity_error`` (see :func:`open_field`)."""
    plain = open_field(key, vault, row, "header")
    try:
        return msgspec.msgpack.decode(plain, type=RecordHeader)
    except msgspec.DecodeError:  # authentic but unreadable: written by a newer release
        raise damaged_error(vault, row.record_id, row.revision, "header", "cannot be decoded") from None


def open_field(key: bytes, vault: VaultRow, row: RevisionRow, field: str) -> bytes:
    """Decrypt one field of one revision.

    Raises:
        MemoriesError: ``integrity_error`` with ``details`` ``{"vault", "id", "revision", "field"}``.
    """
    try:
        return crypto.open_sealed(key, getattr(row, field), crypto.record_aad(place(vault, row.record_id, row), field))
    except MemoriesError:
        raise damaged_error(vault, row.record_id, row.revision, field, "failed authentication") from None


def damaged_error(vault: VaultRow, record_id: str, revision: int, field: str, what: str) -> MemoriesError:
    """``integrity_error`` for a field of a revision that failed authentication or decoding."""
    return MemoriesError(
        "integrity_error",
        f"the {field} of record {record_id} revision {revision} in vault {vault.name!r} {what}; it was changed, "
        f"moved or corrupted (`memory delete {vault.name} {record_id}` removes it)",
        {"vault": vault.name, "id": record_id, "revision": revision, "field": field},
    )


def rolled_back(vault: VaultRow, record_id: str, revision_id: str) -> MemoriesError:
    """``integrity_error`` for a revision that is missing or is not the one the head set (or a child) names."""
    return MemoriesError(
        "integrity_error",
        f"revision {revision_id[:16]} of record {record_id} in vault {vault.name!r} is missing or is not the one the "
        f"vault's head set names: it was dropped, replaced or rolled back outside Memories "
        f"(`memory delete {vault.name} {record_id}` removes the record)",
        {"vault": vault.name, "id": record_id, "revision_id": revision_id, "field": "revision"},
    )
