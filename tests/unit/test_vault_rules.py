"""One set of rules for what this device writes and what a sync brings (issue 21 item 2): memories/vault/rules.py."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest

from memories import crypto
from memories.config import CryptoConfig
from memories.errors import MemoriesError
from memories.vault.exchange import Revision, broken_rule
from memories.vault.record_store import RecordStore
from memories.vault.rules import MAX_DEPTH, check_depth, check_place
from memories.vault.sealing import Origin, RecordHeader

VAULT = "0123456789abcdef"
RECORD = "fedcba9876543210"
PARENT = "a" * 64


def _place(**changes: object) -> crypto.RevisionPlace:
    place = crypto.RevisionPlace(VAULT, RECORD, 2, (PARENT,), False, 1_780_000_000.0)
    return msgspec.structs.replace(place, **changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"record_id": "\x1b[31m" + "a" * 2000},
        {"record_id": "FEDCBA9876543210"},
        {"parents": ("not hex",)},
        {"parents": (PARENT, PARENT)},
        {"parents": ("b" * 64, PARENT)},
        {"parents": ()},
        {"revision": 1},
        {"revision": 0, "parents": ()},
        {"revision": MAX_DEPTH + 1},
        {"revision": 2**62},
        {"created": math.nan},
        {"created": math.inf},
        {"created": -math.inf},
        {"created": -1.0},
        {"created": 1e300},
    ],
    ids=repr,
)
def test_a_place_out_of_the_rules_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(MemoriesError) as refused:
        check_place(_place(**changes))
    assert refused.value.code == "invalid_argument"


def test_places_this_device_writes_keep_the_rules() -> None:
    assert check_place(_place()) == _place()
    assert check_place(_place(revision=1, parents=(), created=0.0))
    assert check_place(_place(revision=MAX_DEPTH, parents=("0" * 64, PARENT)))


def test_a_depth_is_one_more_than_the_deepest_parent() -> None:
    assert check_depth(1, []) == 1 and check_depth(4, [1, 3, 2]) == 4
    for depth, parents in ((3, [1]), (1, [1]), (2**62, [1])):
        with pytest.raises(MemoriesError):
            check_depth(depth, parents)
    # Only some parents here (a deletion erased the others): deeper than each of them.
    assert check_depth(9, [3], every_parent=False) == 9
    with pytest.raises(MemoriesError):
        check_depth(3, [3], every_parent=False)


@pytest.fixture
def store(tmp_path: Path) -> RecordStore:
    records = RecordStore(tmp_path / "memories.db")
    records.keys.init("correct horse battery staple", CryptoConfig(kdf_memory_kib=256, kdf_iterations=1, kdf_lanes=1))
    records.vaults.create("notes", False)
    return records


def _sealed(store: RecordStore, header: RecordHeader | bytes, body: bytes, **changes: object) -> Revision:
    vault = store.vaults.resolve("notes")
    key = store.keys.vault_key(vault)
    place = msgspec.structs.replace(_place(revision=1, parents=()), vault_id=vault.id, **changes)
    plain = header if isinstance(header, bytes) else msgspec.msgpack.encode(header)
    sealed_header = crypto.seal(key, plain, crypto.record_aad(place, "header"))
    sealed_body = crypto.seal(key, body, crypto.record_aad(place, "body"))
    return Revision(crypto.revision_id(place, sealed_header, sealed_body), place, sealed_header, sealed_body)


def test_a_local_write_and_an_imported_revision_break_the_same_rule_the_same_way(store: RecordStore) -> None:
    vault = store.vaults.resolve("notes")
    key = store.keys.vault_key(vault)
    cases = [
        (RecordHeader("memory", "general", "T", {"x\x1b]52;c;cm0=\x07": "v"}), b"body"),
        (RecordHeader("memory", "general", "  ", {}), b"body"),
        (RecordHeader("memory", "general", "T" * 10_000, {}), b"body"),
        (RecordHeader("memory", "general", "T", {"k": "v" * 100_000}), b"body"),
        (RecordHeader("memory", "general", "T", {}), b"\xff not UTF-8"),
    ]
    for header, body in cases:
        with pytest.raises(MemoriesError) as local:
            store.records.add(vault, header.kind, header.sensitivity, header.title, body, header.meta)
        assert broken_rule(key, _sealed(store, header, body)) == local.value.message
    origin = Origin("relative/path.md", "0" * 64)
    assert broken_rule(key, _sealed(store, RecordHeader("card", "general", "T", {}, origin), b"")) is not None
    assert broken_rule(key, _sealed(store, RecordHeader("card", "general", "T", {}), b"fine")) is None
    assert broken_rule(key, _sealed(store, b"\xc1", b"")) == "a field cannot be decoded"
    deletion = {"revision": 2, "parents": (PARENT,), "deleted": True}
    assert broken_rule(key, _sealed(store, b"", msgspec.msgpack.encode([PARENT]), **deletion)) is None
    assert broken_rule(key, _sealed(store, b"", msgspec.msgpack.encode(["\x1b"]), **deletion)) is not None
    assert broken_rule(key, _sealed(store, b"header", msgspec.msgpack.encode([PARENT]), **deletion)) is not None
