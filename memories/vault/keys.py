"""The keys of an unlocked home. Only the supervisor process ever holds them.

``init`` creates the hierarchy of :mod:`memories.crypto` (KDF parameters and the wrapped master key are stored in
``settings``); ``unlock`` derives the key-encryption key and unwraps the master key, which proves the passphrase;
``lock`` drops every key reference (Python cannot wipe memory, so the workers that saw plaintext are restarted by
the supervisor as well).
"""

from __future__ import annotations

import msgspec

from memories import crypto
from memories.config import CryptoConfig
from memories.errors import MemoriesError
from memories.limits import MAX_PASSPHRASE_BYTES, check_passphrase_length
from memories.vault.store import Store, VaultRow

_KDF = "kdf"
_MASTER = "master_key"


def _check_passphrase(passphrase: str) -> None:
    """Raises ``invalid_passphrase`` for an empty or blank passphrase or one over 1,024 UTF-8 bytes."""
    if not passphrase.strip() or len(passphrase.encode("utf-8")) > MAX_PASSPHRASE_BYTES:
        raise MemoriesError("invalid_passphrase", "the passphrase must be 1 to 1,024 bytes and not only spaces")


class Keyring:
    """Master key and vault data keys while unlocked; nothing while locked."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._master: bytes | None = None
        self._vault_keys: dict[tuple[str, bool, str, bytes], bytes] = {}
        self._initialized = False

    def load(self) -> None:
        """Read whether the home has a key hierarchy (blocking: in the store's thread, once at start)."""
        self._initialized = self._store.get_setting(_MASTER) is not None

    @property
    def initialized(self) -> bool:
        """The home has a key hierarchy, as :meth:`load` found it or :meth:`init` made it (``init`` is never
        undone). In memory: safe on the event loop."""
        return self._initialized

    @property
    def locked(self) -> bool:
        return self._master is None

    def init(self, passphrase: str, cost: CryptoConfig, *, allow_short: bool = False) -> None:
        """Create the key hierarchy and leave the home unlocked.

        Raises:
            MemoriesError: ``already_initialized``, ``invalid_passphrase`` (also shorter than
                :data:`~memories.limits.MIN_PASSPHRASE_CHARS` code points without ``allow_short``)
        """
        if self._initialized or self._store.get_setting(_MASTER) is not None:
            raise MemoriesError("already_initialized", "this home already has a key hierarchy")
        _check_passphrase(passphrase)
        if not allow_short:
            check_passphrase_length(passphrase, "--allow-short-passphrase")
        params = crypto.new_kdf_params(cost.kdf_memory_kib, cost.kdf_iterations, cost.kdf_lanes)
        master = crypto.new_key()
        wrapped = crypto.seal(crypto.derive_kek(passphrase, params), master, crypto.master_key_aad())
        self._store.put_settings({_KDF: msgspec.msgpack.encode(params), _MASTER: wrapped})
        self._initialized = True
        self._master = master

    def unlock(self, passphrase: str) -> None:
        """Prove the passphrase by unwrapping the master key.

        Raises:
            MemoriesError: ``not_initialized``; ``bad_passphrase`` (nothing changes); ``integrity_error`` when the
                stored KDF parameters are malformed or outside :func:`~memories.crypto.check_kdf_params`'s bounds
                (nothing is derived).
        """
        wrapped = self._store.get_setting(_MASTER)
        raw_params = self._store.get_setting(_KDF)
        if wrapped is None or raw_params is None:
            raise MemoriesError("not_initialized", "run `memories init` first")
        try:
            params = msgspec.msgpack.decode(raw_params, type=crypto.KdfParams)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise MemoriesError("integrity_error", "the stored key derivation parameters are malformed") from None
        crypto.check_kdf_params(params)  # before any derivation: a tampered row must not allocate without bound
        kek = crypto.derive_kek(passphrase, params)
        try:
            self._master = crypto.open_sealed(kek, wrapped, crypto.master_key_aad())
        except MemoriesError:
            raise MemoriesError("bad_passphrase", "the passphrase does not unlock this home") from None

    def lock(self) -> None:
        """Drop the master key and every vault key (the supervisor also restarts the workers that saw plaintext)."""
        self._master = None
        self._vault_keys.clear()

    def master(self) -> bytes:
        """Raises ``not_initialized`` or ``vault_locked``."""
        if self._master is None:
            if not self.initialized:
                raise MemoriesError("not_initialized", "run `memories init` first")
            raise MemoriesError("vault_locked", "the home is locked; run `memories unlock`")
        return self._master

    def wrap_vault_key(self, vault_id: str, key: bytes, device_only: bool, name: str) -> bytes:
        """Seal a vault's data key under the master key, bound to the vault id, its device-only policy (R-41) and
        its name; raises ``vault_locked``."""
        return crypto.seal(self.master(), key, crypto.vault_key_aad(vault_id, device_only, name))

    def forget_vault(self, vault_id: str) -> None:
        """Drop one vault's data key (the vault was deleted)."""
        for cached in [cached for cached in self._vault_keys if cached[0] == vault_id]:
            del self._vault_keys[cached]

    def vault_key(self, vault: VaultRow) -> bytes:
        """The data key of ``vault``, which proves its device-only policy and name as read from the store. Unwrapped
        once per unlock and per stored (policy, name, wrapped key), so a policy or name changed in the database
        while unlocked is caught too.

        Raises:
            MemoriesError: ``vault_locked``; ``integrity_error`` when the key, the name or the policy was changed
                outside Memories.
        """
        master = self.master()
        cached = (vault.id, vault.device_only, vault.name, vault.wrapped_key)
        key = self._vault_keys.get(cached)
        if key is None:
            aad = crypto.vault_key_aad(vault.id, vault.device_only, vault.name)
            try:
                key = crypto.open_sealed(master, vault.wrapped_key, aad)
            except MemoriesError:
                raise MemoriesError(
                    "integrity_error",
                    f"vault {vault.name}: its key, name or device-only policy was changed outside Memories",
                    {"vault": vault.id},
                ) from None
            self._vault_keys[cached] = key
        return key

    def format1_vault_key(self, vault: VaultRow) -> bytes | None:
        """The data key of a vault of store format 1 (wrapped with its policy, or before policies were sealed), or
        ``None`` (a damaged key); used once, by the upgrade."""
        for aad in (crypto.policy_vault_key_aad(vault.id, vault.device_only), crypto.legacy_vault_key_aad(vault.id)):
            try:
                return crypto.open_sealed(self.master(), vault.wrapped_key, aad)
            except MemoriesError:
                continue
        return None
