"""Store format 1 (releases 0.1 and 0.2) to the current format (3), once, at the first unlock.

Every vault key is wrapped again with its name and policy as stored (trusted that once: a change made to them
before this unlock cannot be told from the user's own), every revision sealed again in its place (parents: the
revision numbered one less), a head set per vault, in one transaction (:meth:`Store.upgrade`) after a backup of
the whole database. A revision that does not authenticate keeps its ciphertext (the record stays damaged and
deletable); a vault whose key does not unwrap keeps its rows and gets no head set (``integrity_error``, as before).
"""

from __future__ import annotations

from memories import crypto
from memories.errors import MemoriesError
from memories.vault.heads import Head, HeadSet, seal_heads
from memories.vault.keys import Keyring
from memories.vault.sealing import row
from memories.vault.store import LegacyRevisionRow, RevisionRow, Store, VaultRow


def upgrade(store: Store, keys: Keyring) -> None:
    """Turn the unlocked format-1 ``store`` into the current format (see the module's docstring); raises what the
    store's transaction raises, and then nothing has changed."""
    legacy: dict[tuple[str, str], list[LegacyRevisionRow]] = {}
    for old in store.legacy_revisions():
        legacy.setdefault((old.vault_id, old.record_id), []).append(old)
    vaults: list[VaultRow] = []
    head_sets: dict[str, bytes] = {}
    revisions: dict[str, list[RevisionRow]] = {}
    for vault in store.vaults():
        key = keys.format1_vault_key(vault)
        if key is not None:
            wrapped = keys.wrap_vault_key(vault.id, key, vault.device_only, vault.name)
            vaults.append(vault._replace(wrapped_key=wrapped))
        records: dict[str, list[Head]] = {}
        rows = []
        chains = [chain for (vault_id, _), chain in legacy.items() if vault_id == vault.id]
        for chain in sorted(chains, key=lambda c: (c[0].created, c[0].record_id)):
            parents: tuple[str, ...] = ()
            for old in chain:
                place = crypto.RevisionPlace(vault.id, old.record_id, old.revision, parents, False, old.created)
                resealed = _reseal(key, place, old)
                rows.append(resealed)
                parents = (resealed.id,)
            records[chain[0].record_id] = [Head(parents[0], chain[-1].revision)]
        revisions[vault.id] = rows
        if key is not None:
            head_sets[vault.id] = seal_heads(key, vault.id, HeadSet(0, records))
    store.upgrade(vaults, head_sets, revisions)


def _reseal(key: bytes | None, place: crypto.RevisionPlace, old: LegacyRevisionRow) -> RevisionRow:
    """A revision of store format 1 sealed again in ``place``, or with its old ciphertext when it (or its vault's
    key) does not authenticate."""
    if key is None:
        return row(place, old.header, old.body)
    try:
        header, body = (
            crypto.open_sealed(key, blob, crypto.legacy_record_aad(place.vault_id, place.record_id, old.revision, name))
            for name, blob in (("header", old.header), ("body", old.body))
        )
    except MemoriesError:
        return row(place, old.header, old.body)
    return row(
        place,
        crypto.seal(key, header, crypto.record_aad(place, "header")),
        crypto.seal(key, body, crypto.record_aad(place, "body")),
    )
