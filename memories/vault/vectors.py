"""Sealed vectors: each record's embedding vectors kept in the home, sealed under a key of its vault (issue 19).

*A departure from R-19* (lock and restart clear every vector), on purpose and by default: re-embedding a vault
costs minutes to hours of a laptop's cores after every unlock, so vectors are kept, sealed as the records are
(R-20 holds: never in plaintext, never in a sync payload). ``[rag] keep_vectors = false`` restores R-19.

::

    vault data key ─HKDF-SHA256("memories/vectors/v1")─────▶ vectors key
    vault data key ─HKDF-SHA256("memories/vector-rows/v1")─▶ row key
    row id = HMAC-SHA256(row key, record id)[:16 bytes], hex         (one row per record)
    sealed = AES-256-GCM(vectors key, SealedVectors, AAD = (format, "vectors", VECTORS_FORMAT, vault id, row id))

A row is ``(vault id, row id, sealed)`` and nothing else: no record id, revision, chunk hash, input hash, space key
or text in a column, a file name or an index (a bare SHA-256 of a chunk would confirm a guessed text). The row id
is keyed rather than random so that deleting a record finds its row without a key-less index of rows: it says
nothing about the record without the vault key, and is the same for every revision of it.

*One row per record* (not per model input): a record's vectors leave in the same transaction as the record, when
it is deleted, moved to another vault, made private or turned into a kind that is not indexed
(:meth:`memories.vault.records.Records`, :meth:`memories.vault.exchange.Exchange.merge`); one row per input would
need every record's inputs, which only the index worker knows (it chunks), to find what a delete frees. The cost:
identical chunks of two records are stored twice.

Inside the blob: the record id and the revision it was written for, the vector space key and width, each input hash
(SHA-256 of the exact model input) with its vector, the inputs the service refused, and whether the record's every
input was embedded (``complete``). What is not proven: *freshness*. An older copy of a row (a backup of the file put
back) still authenticates; that is harmless, since vectors are content-addressed (an input hash names the exact
text it embeds, so an old vector is still the right vector for that input, and inputs no chunk uses are dropped).
A row that fails authentication or decoding (a flipped byte, a blob copied to another row or vault) is skipped:
its record's inputs count as missing and are embedded again, and its row is replaced then. Vectors are a cache of
the records: they never make a record or a search fail.

*Compaction*: a row is written whole, with the record's current inputs only, whenever its record gets new vectors,
so an edit's stale vectors leave with the first vector of its new text; rows of another vector space (another model
or width) are replaced when their record is embedded in the current one; and :meth:`VectorRows.load` deletes the
rows of records that are gone or no longer eligible. Rows whose record's current inputs need no new vector (an edit
that only removed text, a metadata change) are rewritten at the end of the next index run
(:class:`LoadedVectors` lists them as ``stale``): one re-seal and write of those rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import msgspec

from memories import crypto
from memories.errors import MemoriesError
from memories.vault.catalog import Catalog
from memories.vault.keys import Keyring
from memories.vault.store import Store, VaultRow, VectorTable
from memories.vault.views import LoadedVectors, RecordVectors

log = logging.getLogger("memories.vectors")

VECTORS_FORMAT = 1
"""The layout of :class:`SealedVectors`, bound into every row's associated data."""

VECTORS_INFO = b"memories/vectors/v1"
ROWS_INFO = b"memories/vector-rows/v1"

DIGEST_BYTES = 32
"""An input hash is a SHA-256 digest; rows hold it as 32 raw bytes (hex in every other place)."""


class SealedVectors(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """The opened blob of one row: ``keys`` is the concatenation of 32-byte input hashes and ``vectors`` float32
    ``[len(keys) / 32, dimension]`` little-endian, row ``i`` for hash ``i``; ``failed`` maps the hex hash of each
    input the service refused to its reason; ``complete``: every input of that revision has a vector or failed."""

    record_id: str
    revision: int
    space_key: str
    dimension: int
    keys: bytes
    vectors: bytes
    failed: dict[str, str] = {}
    complete: bool = False


def vectors_key(vault_key: bytes) -> bytes:
    """The key vector blobs are sealed with (HKDF-SHA256 of the vault's data key, :data:`VECTORS_INFO`)."""
    return crypto.derive_key(vault_key, VECTORS_INFO)


def row_id(vault_key: bytes, record_id: str) -> str:
    """The id of a record's vector row: HMAC-SHA256 of the record id under a key derived from the vault's data key
    (:data:`ROWS_INFO`), 32 hex digits."""
    return crypto.keyed_id(crypto.derive_key(vault_key, ROWS_INFO), record_id)


class VectorRows:
    """The sealed vector rows of every vault. Blocking (the store's thread).

    Args:
        store: the home's database; keys: the keyring; catalog: eligibility (rows are written and loaded only for
        eligible records at their current revision).
    """

    def __init__(self, store: Store, keys: Keyring, catalog: Catalog) -> None:
        self._store = store
        self._table = VectorTable(store)
        self._keys = keys
        self._catalog = catalog

    def load(self, vault: VaultRow, space_key: str) -> LoadedVectors:
        """Open the vault's rows and return the vectors of ``space_key`` of its eligible records (see
        :class:`LoadedVectors`). Rows of records that are gone or not eligible are deleted; a row that fails
        authentication or decoding is skipped and counted (one log line per load).

        Raises:
            MemoriesError: ``vault_locked``, ``integrity_error`` (the vault's key or head set, as every read).
        """
        key = self._keys.vault_key(vault)
        sealing = vectors_key(key)
        eligible = self._catalog.eligible(vault)
        owners = {row_id(key, record_id): record_id for record_id in eligible}
        orphans: list[str] = []
        damaged = 0
        dimension: int | None = None
        keys: list[str] = []
        parts: list[bytes] = []
        seen: set[str] = set()
        failed: dict[str, str] = {}
        complete: set[str] = set()
        stale: list[str] = []
        for rid, blob in self._table.rows(vault.id):
            record_id = owners.get(rid)
            if record_id is None:
                orphans.append(rid)
                continue
            opened = _open(sealing, vault.id, rid, blob)
            if opened is None or opened.record_id != record_id:
                damaged += 1
                continue
            if opened.space_key != space_key or dimension not in (None, opened.dimension):
                stale.append(record_id)
                continue
            dimension = opened.dimension
            width = opened.dimension * 4
            for index, digest in enumerate(_digests(opened.keys)):
                if digest not in seen:
                    seen.add(digest)
                    keys.append(digest)
                    parts.append(opened.vectors[index * width : (index + 1) * width])
            failed.update(opened.failed)
            if opened.revision != eligible[record_id]:
                stale.append(record_id)
            elif opened.complete:
                complete.add(record_id)
        if orphans:
            self._table.put(vault.id, [], drop=orphans)
        if damaged:
            log.warning("vault %s: %d sealed vector rows failed authentication or decoding; skipped", vault.id, damaged)
        incomplete = [record_id for record_id in eligible if record_id not in complete]
        return LoadedVectors(dimension, keys, b"".join(parts), failed, damaged, incomplete, stale)

    def put(self, vault: VaultRow, space_key: str, dimension: int, records: Iterable[RecordVectors]) -> int:
        """Seal and store each record's vectors as its row (replacing the row it had), in one transaction; a record
        that is no longer eligible at that revision (deleted, edited or made private since) is skipped. Returns how
        many rows were written.

        Raises:
            MemoriesError: ``vault_locked``, ``integrity_error`` (the vault's key or head set).
        """
        key = self._keys.vault_key(vault)
        sealing = vectors_key(key)
        eligible = self._catalog.eligible(vault)
        rows = []
        for record in records:
            if eligible.get(record.record_id) != record.revision:
                continue
            if len(record.vectors) != len(record.keys) * dimension * 4:
                raise ValueError(f"{len(record.keys)} keys of width {dimension}, {len(record.vectors)} bytes")
            blob = SealedVectors(
                record.record_id,
                record.revision,
                space_key,
                dimension,
                b"".join(bytes.fromhex(digest) for digest in record.keys),
                record.vectors,
                dict(record.failed),
                record.complete,
            )
            rid = row_id(key, record.record_id)
            rows.append(
                (
                    rid,
                    crypto.seal(
                        sealing, msgspec.msgpack.encode(blob), crypto.vectors_aad(VECTORS_FORMAT, vault.id, rid)
                    ),
                )
            )
        if rows:
            self._table.put(vault.id, rows)
        return len(rows)

    def forget_all(self) -> int:
        """Delete every vector row of the home (``[rag] keep_vectors = false``, at daemon start: no key needed);
        returns how many. A store of a later format is left untouched (0)."""
        return 0 if self._store.too_new else self._table.delete_all()


def drops(vault_key: bytes, record_ids: Sequence[str]) -> list[str]:
    """The row ids of these records' vectors: what a write that removes them from the index deletes."""
    return [row_id(vault_key, record_id) for record_id in record_ids]


def _open(sealing: bytes, vault_id: str, rid: str, blob: bytes) -> SealedVectors | None:
    """The opened row, or ``None`` when it fails authentication or does not decode to a consistent set."""
    try:
        opened = msgspec.msgpack.decode(
            crypto.open_sealed(sealing, blob, crypto.vectors_aad(VECTORS_FORMAT, vault_id, rid)), type=SealedVectors
        )
    except (MemoriesError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    count, rest = divmod(len(opened.keys), DIGEST_BYTES)
    if rest or opened.dimension < 1 or len(opened.vectors) != count * opened.dimension * 4:
        return None
    return opened


def _digests(keys: bytes) -> list[str]:
    return [keys[i : i + DIGEST_BYTES].hex() for i in range(0, len(keys), DIGEST_BYTES)]
