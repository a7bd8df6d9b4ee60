"""Unlock checks the stored Argon2id parameters against fixed bounds before deriving anything (issue 7, defect 5):
a tampered row must not make ``unlock`` allocate without bound."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from memories import crypto
from memories.config import CryptoConfig
from memories.errors import MemoriesError
from memories.vault.keys import Keyring
from memories.vault.store import Store

PASSPHRASE = "correct horse battery staple"
CHEAP = CryptoConfig(kdf_memory_kib=256, kdf_iterations=1, kdf_lanes=1)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "memories.db")
    Keyring(store).init(PASSPHRASE, CHEAP)
    return store


def _tamper(store: Store, **changes: object) -> None:
    params = msgspec.msgpack.decode(store.get_setting("kdf"), type=crypto.KdfParams)
    store.put_settings({"kdf": msgspec.msgpack.encode(msgspec.structs.replace(params, **changes))})


@pytest.mark.parametrize(
    "changes",
    [
        {"salt": b"short"},
        {"salt": b"x" * 17},
        {"memory_kib": 1024 * 1024 + 1},
        {"memory_kib": 2**40},
        {"memory_kib": 7, "lanes": 1},
        {"memory_kib": 256, "lanes": 33},  # under 8 x lanes KiB
        {"iterations": 65},
        {"iterations": 0},
        {"lanes": 65, "memory_kib": 8 * 65},
        {"lanes": 0},
    ],
)
def test_parameters_outside_the_bounds_are_an_integrity_error_and_nothing_is_derived(
    store: Store, monkeypatch: pytest.MonkeyPatch, changes: dict[str, object]
) -> None:
    _tamper(store, **changes)
    derived: list[crypto.KdfParams] = []
    monkeypatch.setattr(crypto, "derive_kek", lambda passphrase, params: derived.append(params) or b"k" * 32)
    with pytest.raises(MemoriesError) as caught:
        Keyring(store).unlock(PASSPHRASE)
    assert caught.value.code == "integrity_error"
    assert derived == []


def test_a_malformed_row_is_an_integrity_error(store: Store) -> None:
    store.put_settings({"kdf": b"\xc1 not msgpack"})
    with pytest.raises(MemoriesError) as caught:
        Keyring(store).unlock(PASSPHRASE)
    assert caught.value.code == "integrity_error"


def test_parameters_at_the_bounds_still_unlock(tmp_path: Path) -> None:
    store = Store(tmp_path / "memories.db")
    Keyring(store).init(PASSPHRASE, CryptoConfig(kdf_memory_kib=8 * 64, kdf_iterations=1, kdf_lanes=64))
    keyring = Keyring(store)
    keyring.unlock(PASSPHRASE)
    assert not keyring.locked
