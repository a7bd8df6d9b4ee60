"""The bytes of a sync folder: payload files (one sealed revision each), device files and the vault file.

A payload file is::

    b"MEMSYNC1" | key check (8 bytes) | length of the sealed part (8 bytes, big-endian) | sealed part
    sealed part = AES-256-GCM(payload key, sealed revision, AAD = (format, "payload", vault id))

where the *sealed revision* is :func:`memories.crypto.sealed_revision` (its clear place and both field
ciphertexts, sealed under the vault key) and the revision's id is the SHA-256 of it. The payload key is derived
from the vault key with HKDF-SHA256 (RFC 5869; info names its use and the vault), so a file reveals nothing but
its size: not the record, the depth, the parents, the time or whether it is a deletion. The key check (the first
8 bytes of HKDF with another info) tells a payload of another vault key from a tampered one; the length tells a
file still arriving (shorter) from a tampered one. Nothing derived from plaintext (chunks, tokens, vectors,
indexes) is ever in a payload (R-20): only the revision as the store holds it.

The vault file (:class:`VaultFile`) holds the vault id and the vault key wrapped under a key derived from the sync
passphrase with Argon2id; its parameters are checked against :func:`memories.crypto.check_kdf_params` before any
derivation, like unlock's.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import msgspec

from memories import crypto
from memories.errors import MemoriesError
from memories.vault.exchange import Revision

MAGIC = b"MEMSYNC1"
_CHECK_BYTES = 8
_PREFIX = len(MAGIC) + _CHECK_BYTES + 8
VAULT_FILE_FORMAT = 1

BadReason = Literal["truncated", "tampered", "other_key", "not_a_payload", "other_revision", "invalid"]
"""Why a payload file was not imported: ``truncated`` (shorter than it says: perhaps still arriving), ``tampered``
(changed after it was written: ``integrity_error``), ``other_key`` (sealed under another vault's key, or another
vault's), ``not_a_payload`` (not a Memories payload at all), ``other_revision`` (named after one revision, it holds
another: a wrong copy, which the device that has the named revision rewrites on its next push), ``invalid``
(authentic, but it breaks a rule every revision keeps, :mod:`memories.vault.rules`: its ids, depth, time, title,
metadata or body; never imported)."""


class BadPayload(Exception):
    """A payload file that could not be imported (see :data:`BadReason`)."""

    def __init__(self, reason: BadReason) -> None:
        super().__init__(reason)
        self.reason: BadReason = reason


class PayloadKeys:
    """The keys of one vault's sync folder, derived from the vault's data key.

    Args:
        vault_id: the vault's id (bound into every payload).
        vault_key: its 32-byte data key.
    """

    def __init__(self, vault_id: str, vault_key: bytes) -> None:
        self.vault_id = vault_id
        self.vault_key = vault_key
        self._key = crypto.derive_key(vault_key, b"memories/v1 sync payload key " + vault_id.encode())
        self.check = crypto.derive_key(vault_key, b"memories/v1 sync key check " + vault_id.encode())[:_CHECK_BYTES]

    def seal(self, revision: Revision) -> bytes:
        """The payload file of ``revision``."""
        sealed = crypto.seal(self._key, _sealed_revision(revision), self._aad())
        return MAGIC + self.check + len(sealed).to_bytes(8, "big") + sealed

    def open(self, data: bytes) -> Revision:
        """Authenticate and decode a payload file: the outer seal, the revision's place (this vault) and both
        fields under the vault key.

        Raises:
            BadPayload: with the reason.
        """
        if len(data) < _PREFIX or not data.startswith(MAGIC):
            raise BadPayload("truncated" if MAGIC.startswith(data[: len(MAGIC)]) else "not_a_payload")
        if data[len(MAGIC) : len(MAGIC) + _CHECK_BYTES] != self.check:
            raise BadPayload("other_key")
        declared = int.from_bytes(data[len(MAGIC) + _CHECK_BYTES : _PREFIX], "big")
        sealed = data[_PREFIX:]
        if len(sealed) < declared:
            raise BadPayload("truncated")
        try:
            inner = crypto.open_sealed(self._key, sealed, self._aad()) if len(sealed) == declared else None
        except MemoriesError:
            inner = None
        if inner is None:
            raise BadPayload("tampered")
        try:
            _, kind, place, header, body = msgspec.msgpack.decode(
                inner, type=tuple[bytes, str, crypto.RevisionPlace, bytes, bytes]
            )
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise BadPayload("tampered") from None
        if kind != "revision" or place.vault_id != self.vault_id:
            raise BadPayload("tampered")
        for field, blob in (("header", header), ("body", body)):
            try:
                crypto.open_sealed(self.vault_key, blob, crypto.record_aad(place, field))
            except MemoriesError:
                raise BadPayload("tampered") from None
        return Revision(hashlib.sha256(inner).hexdigest(), place, header, body)

    def seal_device(self, device: DeviceFile) -> bytes:
        """A device file: the device's own metadata, sealed under the payload key."""
        aad = msgspec.msgpack.encode([crypto.FORMAT, "device", self.vault_id, device.device])
        return MAGIC + crypto.seal(self._key, msgspec.msgpack.encode(device), aad)

    def open_device(self, device_id: str, data: bytes) -> DeviceFile:
        """Raises :class:`BadPayload` (``tampered``) when the file does not authenticate for ``device_id``."""
        aad = msgspec.msgpack.encode([crypto.FORMAT, "device", self.vault_id, device_id])
        try:
            if not data.startswith(MAGIC):
                raise BadPayload("not_a_payload")
            return msgspec.msgpack.decode(crypto.open_sealed(self._key, data[len(MAGIC) :], aad), type=DeviceFile)
        except (MemoriesError, msgspec.DecodeError, msgspec.ValidationError):
            raise BadPayload("tampered") from None

    def _aad(self) -> bytes:
        return msgspec.msgpack.encode([crypto.FORMAT, "payload", self.vault_id])


class DeviceFile(msgspec.Struct, forbid_unknown_fields=True):
    """A device's mutable metadata, one file per device (``devices/<device>.dev``): its id, when it last pushed
    (Unix seconds, shown only) and the ids of every revision it has pushed (so another device can tell which
    payloads have not reached it yet)."""

    device: str
    pushed_at: float
    revisions: list[str]


class VaultFile(msgspec.Struct, forbid_unknown_fields=True):
    """The folder's ``vault.msync``: which vault it holds, its data key wrapped under the sync passphrase and its
    name when the folder was made (sealed under the vault key: the name a joining device proposes)."""

    format: int
    vault_id: str
    kdf: crypto.KdfParams
    wrapped_key: bytes
    sealed_name: bytes


def wrap_vault_key(vault_id: str, vault_key: bytes, name: str, passphrase: str, params: crypto.KdfParams) -> VaultFile:
    """The vault file for ``vault_id``: its key wrapped under Argon2id(``passphrase``, ``params``)."""
    kek = crypto.derive_kek(passphrase, params)
    aad = _sync_key_aad(vault_id)
    return VaultFile(
        VAULT_FILE_FORMAT,
        vault_id,
        params,
        crypto.seal(kek, vault_key, aad),
        crypto.seal(vault_key, name.encode("utf-8"), aad + b"|name"),
    )


def decode_vault_file(data: bytes) -> VaultFile:
    """Raises ``integrity_error`` when the file is not a vault file of this format."""
    try:
        found = msgspec.msgpack.decode(data, type=VaultFile)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise MemoriesError("integrity_error", "the sync folder's vault file is malformed") from None
    if found.format != VAULT_FILE_FORMAT:
        raise MemoriesError("integrity_error", f"the sync folder's vault file has format {found.format}")
    return found


def unwrap_vault_key(found: VaultFile, passphrase: str) -> tuple[bytes, str]:
    """The vault key in a vault file read back from a folder, and the vault's name there. Its KDF parameters are
    checked against the same fixed bounds as unlock's before any derivation (a file in a shared folder must not
    make a device allocate without bound).

    Raises:
        MemoriesError: ``integrity_error`` (parameters out of bounds); ``bad_passphrase``.
    """
    crypto.check_kdf_params(found.kdf)
    kek = crypto.derive_kek(passphrase, found.kdf)
    aad = _sync_key_aad(found.vault_id)
    try:
        key = crypto.open_sealed(kek, found.wrapped_key, aad)
    except MemoriesError:
        raise MemoriesError("bad_passphrase", "the sync passphrase does not open this folder's vault key") from None
    return key, crypto.open_sealed(key, found.sealed_name, aad + b"|name").decode("utf-8", "replace")


def _sealed_revision(revision: Revision) -> bytes:
    return crypto.sealed_revision(revision.place, revision.header, revision.body)


def _sync_key_aad(vault_id: str) -> bytes:
    return msgspec.msgpack.encode([crypto.FORMAT, "sync-key", vault_id])
