"""The sync folder's bytes and files (issue 10): payloads identified by authenticated content, reasons for the
ones that are not, whole-file writes, the sync tools' own files, and the vault key under the sync passphrase."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec
import pytest

from memories import crypto
from memories.errors import MemoriesError
from memories.sync.folder import SYMLINK, Folder, NotAFolder, check_placement
from memories.sync.payload import (
    BadPayload,
    DeviceFile,
    PayloadKeys,
    decode_vault_file,
    unwrap_vault_key,
    wrap_vault_key,
)
from memories.vault.exchange import Revision

VAULT = "0123456789abcdef"
DEVICE = "a" * 16
MARKER = "zebra-marker-7a1f"
CHEAP = crypto.new_kdf_params(256, 1, 1)


def _revision(key: bytes, body: str = MARKER, vault: str = VAULT) -> Revision:
    place = crypto.RevisionPlace(vault, "fedcba9876543210", 1, (), False, 1_700_000_000.0)
    header = crypto.seal(key, msgspec.msgpack.encode({"title": MARKER}), crypto.record_aad(place, "header"))
    sealed_body = crypto.seal(key, body.encode(), crypto.record_aad(place, "body"))
    return Revision(crypto.revision_id(place, header, sealed_body), place, header, sealed_body)


@pytest.fixture
def keys() -> PayloadKeys:
    return PayloadKeys(VAULT, crypto.new_key())


def test_a_payload_round_trips_to_the_revision_id_and_reveals_nothing(keys: PayloadKeys) -> None:
    revision = _revision(keys.vault_key)
    data = keys.seal(revision)
    assert keys.open(data) == revision
    for clear in (MARKER.encode(), revision.place.record_id.encode(), VAULT.encode(), revision.id.encode()):
        assert clear not in data


def _reason(keys: PayloadKeys, data: bytes) -> str:
    with pytest.raises(BadPayload) as caught:
        keys.open(data)
    return caught.value.reason


def test_each_bad_payload_has_its_reason(keys: PayloadKeys) -> None:
    data = keys.seal(_revision(keys.vault_key))
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 1
    assert _reason(keys, bytes(flipped)) == "tampered"
    assert _reason(keys, data[:100]) == "truncated"
    assert _reason(keys, data[:5]) == "truncated"
    assert _reason(keys, data[:-1]) == "truncated"
    assert _reason(keys, data + b"x") == "tampered"
    assert _reason(keys, b"# some note\n" * 10) == "not_a_payload"
    other = PayloadKeys(VAULT, crypto.new_key())
    assert _reason(keys, other.seal(_revision(other.vault_key))) == "other_key"
    assert _reason(keys, PayloadKeys("1111111111111111", keys.vault_key).seal(_revision(keys.vault_key))) == "other_key"
    # Sealed by a holder of the payload key, but the fields are not under this vault's key:
    assert _reason(keys, keys.seal(_revision(crypto.new_key()))) == "tampered"


def test_a_device_file_authenticates_for_its_device_only(keys: PayloadKeys) -> None:
    data = keys.seal_device(DeviceFile(DEVICE, 1.0, ["x"]))
    assert keys.open_device(DEVICE, data).revisions == ["x"]
    with pytest.raises(BadPayload):
        keys.open_device("b" * 16, data)


def test_writes_are_whole_and_only_this_devices_stale_temp_files_are_cleaned(tmp_path: Path, keys: PayloadKeys) -> None:
    folder = Folder(tmp_path / "sync", DEVICE)
    folder.create(b"vault file")
    revision = _revision(keys.vault_key)
    written = folder.write_payload(revision.id, keys.seal(revision))
    assert folder.scan() == ([written], []) and written.name == f"{revision.id}.rev"
    payloads = tmp_path / "sync" / "payloads"
    (payloads / f".memories-{DEVICE}-{revision.id}.rev.tmp").write_bytes(b"half")
    (payloads / f".memories-{'b' * 16}-x.rev.tmp").write_bytes(b"another device's")
    assert folder.clean_stale() == 1
    assert sorted(p.name for p in payloads.iterdir()) == [f".memories-{'b' * 16}-x.rev.tmp", f"{revision.id}.rev"]
    assert not any(name.endswith((".db", "-wal", "-shm", ".lock", ".sock")) for name in os.listdir(tmp_path / "sync"))


def test_scan_skips_the_sync_tools_files_and_names_the_rest(tmp_path: Path) -> None:
    folder = Folder(tmp_path / "sync", DEVICE)
    folder.create(b"vault file")
    payloads = tmp_path / "sync" / "payloads"
    for name in (".syncthing.rec.rev.tmp", "~syncthing~rec.rev.tmp", "x.sync-conflict-20260301-101500-ABCDEFG.rev"):
        (payloads / name).write_bytes(b"half a payload")
    (payloads / "x (conflicted copy 2026-03-01).rev").write_bytes(b"copy")
    (payloads / "folder").mkdir()
    (tmp_path / "sync" / ".stfolder").mkdir()
    (tmp_path / "sync" / "notes.txt").write_text("stray")
    entries, skipped = folder.scan()
    assert sorted(e.name for e in entries) == [
        "x (conflicted copy 2026-03-01).rev",
        "x.sync-conflict-20260301-101500-ABCDEFG.rev",
    ]
    assert sorted(skipped) == [("folder", "not a regular file"), ("notes.txt", "not part of a Memories sync folder")]


def test_a_folder_holds_one_vault(tmp_path: Path) -> None:
    Folder(tmp_path, DEVICE).create(b"first")
    with pytest.raises(MemoriesError) as caught:
        Folder(tmp_path, "b" * 16).create(b"second")
    assert caught.value.code == "sync_folder_in_use"
    assert Folder(tmp_path, DEVICE).read_vault_file() == b"first"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_the_sync_passphrase_wraps_the_vault_key_and_its_parameters_are_bounded(keys: PayloadKeys) -> None:
    vault_file = wrap_vault_key(VAULT, keys.vault_key, "notes", "sync passphrase", CHEAP)
    found = decode_vault_file(msgspec.msgpack.encode(vault_file))
    assert found.vault_id == VAULT and unwrap_vault_key(found, "sync passphrase") == (keys.vault_key, "notes")
    with pytest.raises(MemoriesError) as caught:
        unwrap_vault_key(found, "another passphrase")
    assert caught.value.code == "bad_passphrase"
    greedy = msgspec.structs.replace(found, kdf=msgspec.structs.replace(found.kdf, memory_kib=2**40))
    with pytest.raises(MemoriesError, match="out of bounds"):
        unwrap_vault_key(greedy, "sync passphrase")
    with pytest.raises(MemoriesError) as caught:
        decode_vault_file(b"\xc1 not a vault file")
    assert caught.value.code == "integrity_error"


def test_a_folder_inside_the_home_or_around_it_is_refused_and_a_synced_home_warned(tmp_path: Path) -> None:
    home = tmp_path / "synced" / "home"
    home.mkdir(parents=True)
    for folder in (home / "sync", home, tmp_path):
        with pytest.raises(MemoriesError):
            check_placement(folder, home)
    assert check_placement(tmp_path / "elsewhere", home) == []
    (tmp_path / "synced" / ".stfolder").mkdir()
    [warning] = check_placement(tmp_path / "elsewhere", home)
    assert ".stfolder" in warning


def test_symbolic_links_are_never_followed(tmp_path: Path, keys: PayloadKeys) -> None:
    """Syncthing carries symlinks: one in payloads/ or devices/, or either folder being one, is skipped and listed,
    never read or written through (issue 21 item 4)."""
    folder = Folder(tmp_path / "sync", DEVICE)
    folder.create(b"vault file")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("not a payload")
    payloads, devices = tmp_path / "sync" / "payloads", tmp_path / "sync" / "devices"
    (payloads / "link.rev").symlink_to(outside / "secret")
    (devices / f"{'b' * 16}.dev").symlink_to(outside / "secret")
    folder.write_device(keys.seal_device(DeviceFile(DEVICE, 1.0, [])))
    assert folder.scan() == ([], [("link.rev", SYMLINK)])
    found, skipped = folder.device_files()
    assert list(found) == [DEVICE] and skipped == [(f"devices/{'b' * 16}.dev", SYMLINK)]

    for name in ("payloads", "devices"):
        shutil.rmtree(tmp_path / "sync" / name)
        (tmp_path / "sync" / name).symlink_to(outside)
    assert folder.scan() == ([], [("payloads", SYMLINK)])
    assert folder.device_files() == ({}, [("devices", SYMLINK)])
    revision = _revision(keys.vault_key)
    with pytest.raises(NotAFolder):
        folder.write_payload(revision.id, keys.seal(revision))
    with pytest.raises(NotAFolder):
        folder.write_device(b"device")
    assert folder.clean_stale() == 0 and sorted(p.name for p in outside.iterdir()) == ["secret"]
    (tmp_path / "sync" / "devices").unlink()
    (tmp_path / "sync" / "devices").write_text("a file where a folder belongs")
    assert folder.device_files() == ({}, [("devices", "not a folder")])
