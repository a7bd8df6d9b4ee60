"""The key hierarchy and record encryption, built only from ``cryptography`` primitives.

::

    passphrase ──Argon2id(salt, memory, iterations, lanes)──▶ key-encryption key (32 bytes)
    key-encryption key ──AES-256-GCM wrap──▶ master key (random, 32 bytes)
    master key ──AES-256-GCM wrap, AAD = (vault id, device-only policy, name)──▶ vault data key (random, 32 bytes)
    vault data key ──AES-256-GCM, AAD = (vault id, record id, revision, parents, deletion, time, field)──▶ field
    vault data key ──AES-256-GCM, AAD = (vault id)──▶ the vault's head set
    vault data key ──HKDF-SHA256(info)──▶ keys of one use: sync payloads, sealed vectors, vector row ids, card ids
    vault data key ──AES-256-GCM, AAD = (vault id, watch id)──▶ a watched folder's registration and state

A revision's id is the SHA-256 of its sealed form (:func:`revision_id`): the clear fields bound by the
associated data and both field ciphertexts, so the id names exactly one sealed revision and its place in the
revision graph.

Every sealed blob is ``nonce (12 bytes) || ciphertext || tag (16 bytes)`` with a fresh random nonce. The
associated data binds a ciphertext to where it is stored, so moving it to another record, revision, vault or
field fails authentication (``integrity_error``) instead of returning the wrong content. Argon2id is RFC 9106;
AES-GCM with 96-bit random nonces is NIST SP 800-38D (safe far beyond any personal vault's record count).
"""

from __future__ import annotations

import hashlib
import hmac
import os

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.argon2 import Argon2id
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memories.errors import MemoriesError

KEY_BYTES = 32
NONCE_BYTES = 12
SALT_BYTES = 16
FORMAT = b"memories/v1"


class KdfParams(msgspec.Struct, forbid_unknown_fields=True):
    """Argon2id parameters stored beside the wrapped master key; ``memory_kib`` in KiB."""

    salt: bytes
    memory_kib: int
    iterations: int
    lanes: int
    algorithm: str = "argon2id"


MAX_KDF_MEMORY_KIB = 1024 * 1024
"""Largest Argon2id memory accepted from the database on unlock: 1 GiB (16 times RFC 9106's second recommendation,
and the most the config allows)."""

MAX_KDF_ITERATIONS = 64
MAX_KDF_LANES = 64


def check_kdf_params(params: KdfParams) -> None:
    """Refuse parameters read back from the database that no ``init`` of Memories writes, before any derivation: a
    tampered row must not make ``unlock`` allocate without bound.

    Bounds: a :data:`SALT_BYTES`-byte salt; memory at most :data:`MAX_KDF_MEMORY_KIB` KiB and at least
    ``8 × lanes`` KiB (Argon2's own minimum, RFC 9106 §3.1); 1 to :data:`MAX_KDF_ITERATIONS` iterations; 1 to
    :data:`MAX_KDF_LANES` lanes.

    Raises:
        MemoriesError: ``integrity_error`` naming the parameter.
    """
    problem = None
    if len(params.salt) != SALT_BYTES:
        problem = f"a {len(params.salt)}-byte salt (not {SALT_BYTES})"
    elif not 1 <= params.lanes <= MAX_KDF_LANES:
        problem = f"{params.lanes} lanes (1 to {MAX_KDF_LANES})"
    elif not 1 <= params.iterations <= MAX_KDF_ITERATIONS:
        problem = f"{params.iterations} iterations (1 to {MAX_KDF_ITERATIONS})"
    elif not 8 * params.lanes <= params.memory_kib <= MAX_KDF_MEMORY_KIB:
        problem = f"{params.memory_kib} KiB of memory ({8 * params.lanes} to {MAX_KDF_MEMORY_KIB})"
    if problem is not None:
        raise MemoriesError("integrity_error", f"the stored key derivation parameters are out of bounds: {problem}")


def new_kdf_params(memory_kib: int, iterations: int, lanes: int) -> KdfParams:
    """Fresh parameters with a random 16-byte salt."""
    return KdfParams(salt=os.urandom(SALT_BYTES), memory_kib=memory_kib, iterations=iterations, lanes=lanes)


def derive_kek(passphrase: str, params: KdfParams) -> bytes:
    """The 32-byte key-encryption key for ``passphrase`` (UTF-8) under ``params``."""
    if params.algorithm != "argon2id":
        raise MemoriesError("integrity_error", f"unknown key derivation {params.algorithm!r}")
    kdf = Argon2id(
        salt=params.salt,
        length=KEY_BYTES,
        iterations=params.iterations,
        lanes=params.lanes,
        memory_cost=params.memory_kib,
    )
    return kdf.derive(passphrase.encode("utf-8"))


def new_key() -> bytes:
    """A random 32-byte AES-256 key."""
    return AESGCM.generate_key(bit_length=256)


def derive_key(key: bytes, info: bytes) -> bytes:
    """A 32-byte key of one use derived from ``key`` with HKDF-SHA256 (RFC 5869, no salt: ``key`` is already
    uniformly random); ``info`` names the use, so keys of two uses are independent."""
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(key)


def keyed_id(key: bytes, value: str) -> str:
    """HMAC-SHA256 of ``value`` (UTF-8) under ``key``, as 32 hex digits (128 bits): an id that tells nothing about
    ``value`` without the key and is the same for the same value (a sealed vector row's id)."""
    return hmac.new(key, value.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


def seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """Encrypt and authenticate ``plaintext``; returns ``nonce || ciphertext || tag``."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_sealed(key: bytes, blob: bytes, aad: bytes) -> bytes:
    """Decrypt a blob made by :func:`seal` with the same key and associated data.

    Raises:
        MemoriesError: ``integrity_error`` when the blob was changed, truncated or moved (wrong ``aad``).
    """
    if len(blob) < NONCE_BYTES + 16:
        raise MemoriesError("integrity_error", "a stored ciphertext is truncated")
    try:
        return AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad)
    except InvalidTag:
        raise MemoriesError("integrity_error", "a stored ciphertext failed authentication") from None


def master_key_aad() -> bytes:
    return FORMAT + b"|master-key"


def vault_key_aad(vault_id: str, device_only: bool, name: str) -> bytes:
    """Associated data of a wrapped vault key: the vault id, its device-only policy (R-41) and its name, so a policy
    flipped or a name changed in the database makes the key fail to unwrap (``integrity_error``) instead of letting
    data leave the device or reach the wrong vault."""
    return msgspec.msgpack.encode([FORMAT, "vault-key", vault_id, device_only, name])


def policy_vault_key_aad(vault_id: str, device_only: bool) -> bytes:
    """The associated data of vault keys of store format 1 with a sealed policy but no name (release 0.2); such a
    key is wrapped again with :func:`vault_key_aad` when the store is upgraded."""
    return msgspec.msgpack.encode([FORMAT, "vault-key", vault_id, device_only])


def legacy_vault_key_aad(vault_id: str) -> bytes:
    """The associated data of vault keys wrapped before the policy was sealed (the vault id only, release 0.1);
    such a key is wrapped again with :func:`vault_key_aad` when the store is upgraded."""
    return FORMAT + b"|vault-key|" + vault_id.encode()


def legacy_record_aad(vault_id: str, record_id: str, revision: int, field: str) -> bytes:
    """Associated data of a field of store format 1 (revision number only); read once, by the upgrade."""
    return msgspec.msgpack.encode([FORMAT, "record", vault_id, record_id, revision, field])


class RevisionPlace(msgspec.Struct, frozen=True, array_like=True):
    """The clear part of a sealed revision, bound into both fields' associated data and into its id.

    ``revision`` is the depth in the record's graph (1 for a record's first revision, else 1 + the largest
    parent's); ``parents`` are parent revision ids (64 hex digits each, sorted); ``created`` is a Unix time in
    seconds (shown to people, never used to order revisions); ``deleted`` marks a deletion."""

    vault_id: str
    record_id: str
    revision: int
    parents: tuple[str, ...]
    deleted: bool
    created: float


def record_aad(place: RevisionPlace, field: str) -> bytes:
    """Associated data of one field (``header`` or ``body``) of one revision."""
    return msgspec.msgpack.encode([FORMAT, "revision-field", place, field])


def sealed_revision(place: RevisionPlace, header: bytes, body: bytes) -> bytes:
    """The canonical bytes of a sealed revision (MessagePack): what its id is the hash of."""
    return msgspec.msgpack.encode([FORMAT, "revision", place, header, body])


def revision_id(place: RevisionPlace, header: bytes, body: bytes) -> str:
    """The revision's id: SHA-256 (hex, 64 digits) of :func:`sealed_revision`. It binds vault id, record id,
    depth, parents, deletion flag, time and both ciphertexts, so a row replaced by another revision's, or moved to
    another place in the graph, no longer has the id the head set or its children name."""
    return hashlib.sha256(sealed_revision(place, header, body)).hexdigest()


def heads_aad(vault_id: str) -> bytes:
    """Associated data of a vault's sealed head set (bound to the vault id, so one vault's set cannot replace
    another's)."""
    return msgspec.msgpack.encode([FORMAT, "heads", vault_id])


def setting_aad(name: str) -> bytes:
    """Associated data of a setting sealed under the master key (the vaults searched most recently), bound to its
    name."""
    return msgspec.msgpack.encode([FORMAT, "setting", name])


def vectors_aad(layout: int, vault_id: str, row_id: str) -> bytes:
    """Associated data of a sealed vector row (:mod:`memories.vault.vectors`): bound to the rows' layout version, the
    vault id and the row id, so a blob copied to another row or vault fails authentication."""
    return msgspec.msgpack.encode([FORMAT, "vectors", layout, vault_id, row_id])


def watch_aad(vault_id: str, watch_id: str) -> bytes:
    """Associated data of a watched folder's sealed registration: bound to its vault and its id, so one watch's
    registration cannot stand in for another's."""
    return msgspec.msgpack.encode([FORMAT, "watch", vault_id, watch_id])


def sync_state_aad(vault_id: str) -> bytes:
    """Associated data of a vault's sealed sync state (:class:`memories.sync.engine.SyncState`): bound to the vault,
    so one vault's state cannot stand in for another's."""
    return msgspec.msgpack.encode([FORMAT, "sync-state", vault_id])


def card_id_key(vault_key: bytes, vault_id: str) -> bytes:
    """The key that names an imported file's card (:func:`card_id`), derived from the vault key (:func:`derive_key`)
    with its own info, so the vault key itself is only ever an AES-GCM key."""
    return derive_key(vault_key, b"memories/v1 card ids " + vault_id.encode())


def card_id(id_key: bytes, source: str) -> str:
    """The record id of the card a file at ``source`` (the path relative to its folder) gets when it is imported
    first: HMAC-SHA256 under :func:`card_id_key`, 16 hex digits (a record id's form). Two devices that import the
    same note of one synced notes folder before either has pulled the other's card give it the same id, so the two
    first revisions are siblings of one record, not two cards; without the vault key the id says nothing of the
    path."""
    return hmac.new(id_key, source.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()[:16]


def grant_terms_aad(grant_id: str, token_hash: bytes) -> bytes:
    """Associated data of a grant's sealed terms: bound to the grant id and its token's SHA-256, so terms copied
    onto another grant (a wider one onto a narrower token) fail authentication."""
    return msgspec.msgpack.encode([FORMAT, "grant", grant_id, token_hash])
