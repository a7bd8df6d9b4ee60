"""Sync between two homes through one folder, in-process on real SQLite stores (issue 10): what arrives, conflicts
and their copies, deletions and edits against them, partial and bad files, an emptied folder."""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
from pathlib import Path

import msgspec
import pytest

from memories import crypto
from memories.config import CryptoConfig
from memories.errors import MemoriesError
from memories.sync.engine import Sync
from memories.sync.folder import SYMLINK
from memories.sync.payload import PayloadKeys
from memories.vault.exchange import Revision
from memories.vault.record_store import RecordStore

PASSPHRASE = "correct horse battery staple"
SYNC_PASSPHRASE = "the sync passphrase"
CHEAP = CryptoConfig(kdf_memory_kib=256, kdf_iterations=1, kdf_lanes=1)
MARKER = "quokka-marker-51c3"


class Device:
    """One home: store, keys, vaults and sync, unlocked."""

    def __init__(self, root: Path) -> None:
        root.mkdir(mode=0o700)
        self.home = root
        records = RecordStore(root / "memories.db")
        self.store, self.keys, self.vaults = records.store, records.keys, records.vaults
        self.records, self.catalog, self.exchange = records.records, records.catalog, records.exchange
        self.keys.init(PASSPHRASE, CHEAP)
        self.sync = Sync(records, root, None)

    def vault(self, name: str = "notes"):  # type: ignore[no-untyped-def]
        return self.vaults.resolve(name)

    def add(self, body: str, title: str = "T") -> str:
        return self.records.add(self.vault(), "memory", "general", title, body.encode(), {})[0]

    def update(self, record_id: str, body: str) -> None:
        self.records.update(self.vault(), record_id, title=None, body=body.encode(), sensitivity=None, meta=None)

    def body(self, record_id: str) -> str:
        return self.records.read(self.vault(), record_id, None).body

    def ids(self) -> set[str]:
        return {s.id for s in self.catalog.summaries(self.vault(), None)}

    def pull(self):  # type: ignore[no-untyped-def]
        return self.sync.pull(self.vault())[0]

    def push(self) -> None:
        self.sync.push(self.vault())


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Device, Device, Path]:
    """A and B sharing ``tmp_path/folder``: A made vault ``notes`` and ``sync init``; B joined."""
    a, b = Device(tmp_path / "a"), Device(tmp_path / "b")
    folder = tmp_path / "folder"
    a.vaults.create("notes", False)
    assert a.sync.init(a.vault(), folder, SYNC_PASSPHRASE, CHEAP) == []
    vault, _ = b.sync.join(folder, None, SYNC_PASSPHRASE)
    assert (vault.id, vault.name) == (a.vault().id, "notes")
    return a, b, folder


def test_records_revisions_and_deletions_arrive_and_nothing_readable_leaves(pair: tuple[Device, Device, Path]) -> None:
    a, b, folder = pair
    kept, edited, gone = a.add(MARKER + " kept"), a.add("first"), a.add("doomed")
    a.update(edited, "second")
    a.push()
    assert b.pull().imported == 4 and b.ids() == {kept, edited, gone}
    assert b.body(kept) == MARKER + " kept" and b.records.read(b.vault(), edited, 1).body == "first"
    a.records.delete(a.vault(), gone)
    a.push()
    state = b.pull()
    assert b.ids() == {kept, edited} and state.imported == 1 and state.conflicts == []
    for path in folder.rglob("*"):
        if path.is_file():
            assert MARKER.encode() not in path.read_bytes()
            assert not path.name.endswith((".db", "-wal", "-shm", ".lock", ".sock"))
    # The device's own pushes are no change for it; a second pull imports nothing.
    assert a.pull().imported == 0 and b.pull().imported == 0


def test_siblings_from_conflict_copies_are_kept_and_an_update_resolves_them(pair: tuple[Device, Device, Path]) -> None:
    a, b, folder = pair
    record = a.add("base")
    a.push()
    b.pull()
    a.update(record, "from a")
    b.update(record, "from b")
    a.push()
    b.push()
    payloads = folder / "payloads"
    [b_head] = [r.revision_id for r in [b.records.read(b.vault(), record, None)]]
    original = payloads / f"{b_head}.rev"
    shutil.copy(original, payloads / f"{b_head}.sync-conflict-20260301-101500-ABCDEFG.rev")
    original.rename(payloads / f"{b_head} (conflicted copy 2026-03-01).rev")
    state = a.pull()
    assert state.conflicts == [record] and state.imported == 1
    view = a.records.read(a.vault(), record, None)
    assert view.conflict is not None and len(view.conflict.revisions) == 2 and not view.conflict.deleted
    assert [s.conflict for s in a.catalog.summaries(a.vault(), None)] == [True]
    with pytest.raises(MemoriesError) as caught:
        a.records.read(a.vault(), record, 2)
    assert caught.value.code == "ambiguous_revision"
    a.update(record, "resolved")
    a.push()
    assert b.pull().conflicts == []
    for device in (a, b):
        view = device.records.read(device.vault(), record, None)
        assert (view.body, view.revision, view.conflict) == ("resolved", 3, None)


def test_a_delete_stays_deleted_an_offline_edit_is_a_conflict_and_an_empty_folder_deletes_nothing(
    pair: tuple[Device, Device, Path],
) -> None:
    a, b, folder = pair
    untouched, edited = a.add("one"), a.add("two")
    a.push()
    b.pull()
    erased = a.records.read(a.vault(), untouched, None).revision_id
    b.update(edited, "edited offline")
    a.records.delete(a.vault(), untouched)
    a.records.delete(a.vault(), edited)
    a.push()
    state = b.pull()
    assert untouched not in b.ids() and state.conflicts == [edited]
    view = b.records.read(b.vault(), edited, None)
    assert view.body == "edited offline" and view.conflict is not None and view.conflict.deleted
    b.push()
    assert a.pull().conflicts == [edited] and a.body(edited) == "edited offline"
    assert not (folder / "payloads" / f"{erased}.rev").exists()  # the push removed what the deletion erased

    for path in (folder / "payloads").iterdir():
        path.unlink()
    assert b.pull().imported == 0 and b.ids() == {edited}


def test_records_deleted_or_moved_before_a_pull_leave_nothing_waiting(pair: tuple[Device, Device, Path]) -> None:
    """A deleted and a moved record whose revisions B never saw: B keeps their deletions, and `waiting` (revisions
    whose parents have not arrived) is 0 on every pull, since the erased parents will never arrive."""
    a, b, _ = pair
    kept, gone, moved = a.add("kept"), a.add("doomed"), a.add("moving")
    a.push()
    elsewhere = a.vaults.create("elsewhere", False)
    a.records.delete(a.vault(), gone)
    a.records.move(a.vault(), moved, elsewhere)
    a.push()
    first = b.pull()
    assert (first.imported, first.waiting, first.not_local) == (3, 0, 0) and b.ids() == {kept}
    again = b.pull()
    assert (again.imported, again.waiting, again.not_local) == (0, 0, 0) and b.ids() == {kept}


def test_partial_files_wait_and_bad_payloads_are_listed_without_blocking_the_rest(
    pair: tuple[Device, Device, Path],
) -> None:
    a, b, folder = pair
    for n in range(100):
        a.add(f"note {n}")
    late = a.add("arrives late")
    a.push()
    payloads = folder / "payloads"
    late_id = a.records.read(a.vault(), late, None).revision_id
    whole = (payloads / f"{late_id}.rev").read_bytes()
    (payloads / f"{late_id}.rev").write_bytes(whole[:100])
    (payloads / ".syncthing.rec.rev.tmp").write_bytes(whole[: len(whole) // 2])
    (payloads / "~syncthing~rec.rev.tmp").write_bytes(whole[: len(whole) // 2])
    sample = next(p for p in sorted(payloads.iterdir()) if p.name.endswith(".rev") and p.stat().st_size > 100)
    flipped = bytearray(sample.read_bytes())
    flipped[-5] ^= 1
    (payloads / "tampered.rev").write_bytes(bytes(flipped))
    other = PayloadKeys(a.vault().id, os.urandom(32))
    [revision] = a.exchange.sealed(a.vault(), [late_id])
    (payloads / "other-key.rev").write_bytes(other.seal(revision))
    (payloads / "truncated.rev").write_bytes(sample.read_bytes()[:-10])

    state = b.pull()
    assert state.imported == 100 and late not in b.ids()
    assert {(f.file, f.reason, f.pending) for f in state.bad} == {
        (f"{late_id}.rev", "truncated", True),
        ("tampered.rev", "tampered", True),
        ("other-key.rev", "other_key", True),
        ("truncated.rev", "truncated", True),
    }
    (payloads / f"{late_id}.rev").write_bytes(whole)  # the rest arrives
    state = b.pull()
    assert late in b.ids() and state.imported == 1
    assert {(f.file, f.reason, f.pending) for f in state.bad} == {
        ("tampered.rev", "tampered", False),
        ("other-key.rev", "other_key", False),
        ("truncated.rev", "truncated", False),
    }


def test_one_folder_holds_one_vault_and_device_only_vaults_never_sync(tmp_path: Path, pair) -> None:  # type: ignore[no-untyped-def]
    a, _, folder = pair
    c = Device(tmp_path / "c")
    c.vaults.create("notes", False)
    with pytest.raises(MemoriesError) as caught:
        c.sync.init(c.vault(), folder, SYNC_PASSPHRASE, CHEAP)
    assert caught.value.code == "sync_folder_in_use" and a.vault().id in caught.value.message
    assert "another home" in caught.value.message and "sync join" in caught.value.message
    with pytest.raises(MemoriesError) as caught:  # issue 29, item 8: a vault of this home is named, not only its id
        a.sync.init(a.vaults.create("other", False), folder, SYNC_PASSPHRASE, CHEAP)
    assert caught.value.code == "sync_folder_in_use" and f"your vault {a.vault().name!r}" in caught.value.message
    secret = c.vaults.create("secret", True)
    with pytest.raises(MemoriesError) as caught:
        c.sync.init(secret, tmp_path / "other", SYNC_PASSPHRASE, CHEAP)
    assert caught.value.code == "device_only_vault"
    with pytest.raises(MemoriesError) as caught:
        c.sync.join(folder, None, "not the sync passphrase")
    assert caught.value.code == "bad_passphrase"
    with pytest.raises(MemoriesError) as caught:
        c.sync.join(folder, None, SYNC_PASSPHRASE)
    assert caught.value.code == "vault_name_taken"
    assert c.sync.join(folder, "shared", SYNC_PASSPHRASE)[0].name == "shared"
    made_private = a.vaults.set_policy(a.vault(), True)
    with pytest.raises(MemoriesError) as caught:
        a.sync.push(made_private)
    assert caught.value.code == "device_only_vault"


def test_symlinks_in_the_folder_are_skipped_and_listed_and_never_stop_a_pull(pair: tuple[Device, Device, Path]) -> None:
    """No passphrase needed: a symlink a sync tool carried into devices/ made every pull fail (issue 21 item 4)."""
    a, b, folder = pair
    first = a.add("first note")
    a.push()
    (folder / "devices" / f"{'c' * 16}.dev").symlink_to("/etc/passwd")
    (folder / "payloads" / f"{'d' * 64}.rev").symlink_to("/etc/passwd")
    state = b.pull()
    assert b.ids() == {first} and state.imported == 1
    assert sorted(state.skipped) == [(f"{'d' * 64}.rev", SYMLINK), (f"devices/{'c' * 16}.dev", SYMLINK)]

    elsewhere = folder.parent / "elsewhere"
    shutil.move(folder / "payloads", elsewhere)
    (folder / "payloads").symlink_to(elsewhere)
    assert b.pull().skipped == [("payloads", SYMLINK), (f"devices/{'c' * 16}.dev", SYMLINK)]
    with pytest.raises(MemoriesError) as caught:
        a.push()
    assert caught.value.code == "sync_folder_error" and "payloads" in caught.value.message


def test_push_rewrites_a_damaged_or_wrong_payload_and_a_wrong_one_is_bad(pair: tuple[Device, Device, Path]) -> None:
    """A damaged payload was never repaired: the device holding the revision pushed `0 written` and the other device
    never got the edit. Push checks each file it has not seen whole since (size, then authentication)."""
    a, b, folder = pair
    one, two = a.add("one"), a.add("two")
    a.push()
    paths = {
        record: folder / "payloads" / f"{a.records.read(a.vault(), record, None).revision_id}.rev"
        for record in (one, two)
    }
    whole = paths[one].read_bytes()
    stat = paths[one].stat()
    flipped = bytearray(whole)
    flipped[-3] ^= 1
    paths[one].write_bytes(bytes(flipped))
    os.utime(paths[one], ns=(stat.st_atime_ns, stat.st_mtime_ns))  # a sync tool keeps the sender's time
    paths[two].write_bytes(paths[one].read_bytes()[:-5])
    assert b.pull().imported == 0
    a.push()
    assert a.sync.state(a.vault()).pushed == 2 and paths[one].read_bytes() != bytes(flipped)
    assert b.pull().imported == 2 and b.ids() == {one, two}
    a.push()
    assert a.sync.state(a.vault()).pushed == 0  # nothing changed: nothing written

    # A file named after one revision that holds another: bad, not a revision still on its way; push rewrites it.
    paths[one].write_bytes(paths[two].read_bytes())
    edited = a.add("three")
    a.push()
    third = folder / "payloads" / f"{a.records.read(a.vault(), edited, None).revision_id}.rev"
    third.write_bytes(paths[two].read_bytes())
    paths[one].write_bytes(whole)
    state = b.pull()
    assert [(bad.file, bad.reason) for bad in state.bad] == [(third.name, "other_revision")]
    assert state.not_local == 0 and edited not in b.ids()
    a.push()
    assert a.sync.state(a.vault()).pushed == 1
    assert b.pull().imported == 1 and edited in b.ids()


def test_a_failure_of_the_folder_is_sync_folder_error(pair: tuple[Device, Device, Path]) -> None:
    a, _, folder = pair
    record = a.add("note")
    (folder / "payloads" / f"{a.records.read(a.vault(), record, None).revision_id}.rev").mkdir()
    with pytest.raises(MemoriesError) as caught:
        a.push()  # renaming the payload over a folder: EISDIR
    assert caught.value.code == "sync_folder_error" and str(folder) in caught.value.message


class Forger:
    """A peer that knows the sync passphrase and seals revisions that Memories would never write (issue 21 item 2):
    each payload is authentic, so only the vault's rules can refuse it."""

    def __init__(self, device: Device, folder: Path) -> None:
        self.vault = device.vault()
        self.key = device.keys.vault_key(self.vault)
        self.folder = folder

    def revision(
        self,
        record_id: str = "0123456789abcdef",
        depth: int = 1,
        parents: tuple[str, ...] = (),
        *,
        created: float = 1_780_000_000.0,
        header: object = None,
        body: bytes = b"a body",
        deleted: bool = False,
    ) -> Revision:
        place = crypto.RevisionPlace(self.vault.id, record_id, depth, parents, deleted, created)
        if header is None:
            header = b"" if deleted else {"kind": "memory", "sensitivity": "general", "title": "T", "meta": {}}
        plain = header if isinstance(header, bytes) else msgspec.msgpack.encode(header)
        sealed_header = crypto.seal(self.key, plain, crypto.record_aad(place, "header"))
        sealed_body = crypto.seal(self.key, body, crypto.record_aad(place, "body"))
        return Revision(crypto.revision_id(place, sealed_header, sealed_body), place, sealed_header, sealed_body)

    def put(self, revision: Revision) -> str:
        """Write the revision's payload into the folder; returns its file name."""
        name = f"{revision.id}.rev"
        (self.folder / "payloads" / name).write_bytes(PayloadKeys(self.vault.id, self.key).seal(revision))
        return name


def test_revisions_from_the_sync_folder_keep_the_local_rules_and_a_bad_one_blocks_nothing(
    pair: tuple[Device, Device, Path],
) -> None:
    """A peer sealed a metadata key holding OSC 52 and CSI escapes, a record id of 2,000 characters with colours,
    `created = NaN` (every later pull failed with internal_error), `created = inf` (memory read crashed) and a depth
    of 2**62 (it wins every conflict). Each is `bad` (`invalid`); the rest of the pull is imported."""
    a, b, folder = pair
    kept = a.add("kept")
    a.push()
    assert b.pull().imported == 1
    parent = b.records.read(b.vault(), kept, None).revision_id
    forge = Forger(a, folder)
    meta = {
        "kind": "memory",
        "sensitivity": "general",
        "title": "T",
        "meta": {"x\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J": "v"},
    }
    hostile = {
        "metadata key": forge.revision(header=meta),
        "record id": forge.revision(record_id="\x1b[31m" + "a" * 2000),
        "created NaN": forge.revision(record_id="1" * 16, created=math.nan),
        "created inf": forge.revision(record_id="2" * 16, created=math.inf),
        "depth 2**62": forge.revision(kept, 2**62, (parent,)),
        "depth not 1 + parent's": forge.revision(kept, 5, (parent,)),
        "blank title": forge.revision("3" * 16, header={**meta, "title": " ", "meta": {}}),
        "body not UTF-8": forge.revision("4" * 16, body=b"\xff\xfe"),
        "unsorted parents": forge.revision(kept, 2, ("f" * 64, parent)),
        "deletion at NaN": forge.revision("5" * 16, 2, ("e" * 64,), created=math.nan, deleted=True,
                                          body=msgspec.msgpack.encode(["e" * 64])),
        "deletion too deep": forge.revision("6" * 16, 2**40, ("d" * 64,), deleted=True,
                                            body=msgspec.msgpack.encode(["d" * 64])),
    }  # fmt: skip
    names = {what: forge.put(revision) for what, revision in hostile.items()}
    edit = forge.revision(kept, 2, (parent,), body=b"an edit from the peer")
    forge.put(edit)
    deletion = forge.revision("7" * 16, 2, ("c" * 64,), deleted=True, body=msgspec.msgpack.encode(["c" * 64]))
    forge.put(deletion)  # its erased parent never arrives: kept at once, checked for the rest

    state = b.pull()
    assert sorted((bad.file, bad.reason, bad.pending) for bad in state.bad) == sorted(
        (name, "invalid", False) for name in names.values()
    )
    assert state.imported == 2 and b.body(kept) == "an edit from the peer" and b.ids() == {kept}
    stored = {
        record: len(b.store.revisions(b.vault().id, record)) for record in ("1" * 16, "5" * 16, "6" * 16, "7" * 16)
    }
    assert stored == {"1" * 16: 0, "5" * 16: 0, "6" * 16: 0, "7" * 16: 1}
    again = b.pull()  # nothing blocks a later pull either
    assert again.imported == 0 and len(again.bad) == len(hostile)


def test_a_waiting_revision_is_checked_when_its_parents_arrive(pair: tuple[Device, Device, Path]) -> None:
    a, b, folder = pair
    forge = Forger(a, folder)
    root = forge.revision("8" * 16)
    child = forge.revision("8" * 16, 3, (root.id,))  # its parent is at depth 1: it must be 2
    child_file = forge.put(child)
    state = b.pull()
    assert state.waiting == 1 and state.bad == []
    forge.put(root)
    state = b.pull()
    assert [(bad.file, bad.reason) for bad in state.bad] == [(child_file, "invalid")]
    assert state.waiting == 0 and state.imported == 1 and b.ids() == {"8" * 16}


def test_a_revision_the_database_refuses_blocks_only_its_own_record(pair: tuple[Device, Device, Path]) -> None:
    """Database errors are caught per record, not per pull: one the store refuses (here a trigger on the real
    SQLite file) leaves the others imported."""
    a, b, _ = pair
    refused, accepted = a.add("refused"), a.add("accepted")
    a.push()
    with sqlite3.connect(b.home / "memories.db") as db:
        db.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT ON revisions WHEN NEW.record_id = '{refused}' "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )
    state = b.pull()
    assert b.ids() == {accepted} and state.imported == 1
    assert [bad.reason for bad in state.bad] == ["invalid"]
