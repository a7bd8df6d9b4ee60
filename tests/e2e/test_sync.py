"""Issue 10 end to end: two homes, each with its own daemon, and one shared folder.

The merge rules, payload reasons and partial files are covered in-process (``tests/unit/test_sync_*.py``); these
runs cover what only the daemons and the CLI show.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import (
    FAST_KDF,
    PASSPHRASE,
    HomeDir,
    copy_fixture_home,
    initialize,
    memories_executable,
    with_hooks,
)
from tests.fixtures.tiny_model import TinyModel

SYNC_PASSPHRASE = "the sync passphrase\n"
MARKER = "okapi-marker-9d2e"


def _home(tmp_path: Path, name: str) -> HomeDir:
    path = tmp_path / name
    path.mkdir(mode=0o700)
    home = HomeDir(path)
    home.config.write_text(FAST_KDF)
    return home


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[HomeDir, HomeDir, Path]]:
    """A with vault ``notes`` synced to ``tmp_path/shared``, and B, another home that joined it."""
    a, b = _home(tmp_path, "a"), _home(tmp_path, "b")
    folder = tmp_path / "shared"
    try:
        initialize(a)
        initialize(b, vault="other")
        a.ok("sync", "init", "notes", "--to", str(folder), "--passphrase-stdin", stdin=SYNC_PASSPHRASE)
        joined = b.ok("sync", "join", str(folder), "--passphrase-stdin", stdin=SYNC_PASSPHRASE)
        assert joined == {"id": a.ok("vault", "show", "notes")["id"], "name": "notes"}
        yield a, b, folder
    finally:
        a.stop()
        b.stop()


def test_records_revisions_conflicts_and_deletions_travel_between_two_daemons(
    pair: tuple[HomeDir, HomeDir, Path],
) -> None:
    a, b, folder = pair
    body = f"{MARKER}: line one\nline two — ünïcode 数据库\n"
    kept = a.ok("memory", "add", "notes", "--title", "Kept", "--body", body)["id"]
    shared = a.ok("memory", "add", "notes", "--title", "Shared", "--body", "base text")["id"]
    doomed = a.ok("memory", "add", "notes", "--title", "Doomed", "--body", "to delete")["id"]
    a.ok("memory", "update", "notes", shared, "--body", "second text")
    a.ok("sync", "push", "notes")
    report = b.ok("sync", "pull", "notes")
    assert report["imported"] == 4 and report["conflicts"] == []
    assert b.ok("memory", "read", "notes", kept)["body"] == body
    assert b.ok("memory", "read", "notes", shared, "--revision", "1")["body"] == "base text"

    # Both edit `shared` offline; B's payload reaches A only as the sync tool's decorated copies.
    a.ok("memory", "update", "notes", shared, "--body", "edited on a")
    b.ok("memory", "update", "notes", shared, "--body", "edited on b")
    b_head = b.ok("memory", "read", "notes", shared)["revision_id"]
    b.ok("sync", "push", "notes")
    payload = folder / "payloads" / f"{b_head}.rev"
    shutil.copy(payload, folder / "payloads" / f"{b_head}.sync-conflict-20260301-101500-ABCDEFG.rev")
    payload.rename(folder / "payloads" / f"{b_head} (conflicted copy 2026-03-01).rev")
    a.ok("memory", "delete", "notes", doomed)
    a.ok("sync", "push", "notes")
    for home in (a, b):  # both caches hold their own edit; on one of them the pull changes the chosen head
        assert [hit["id"] for hit in home.ok("memory", "search", "notes", "edited")["results"]] == [shared]
    report = a.ok("sync", "pull", "notes")
    assert report["imported"] == 1 and report["conflicts"] == [shared]
    read = a.ok("memory", "read", "notes", shared)
    assert len(read["conflict"]["revisions"]) == 2 and read["conflict"]["deleted"] is False
    assert [r["conflict"] for r in a.ok("memory", "list", "notes")["records"] if r["id"] == shared] == [True]
    shown = a.run("memory", "read", "notes", shared, json_output=False).stdout  # B's edit is named, whichever shows
    assert "conflict: 2 versions" in shown and b_head[:16] in shown
    assert "CONFLICT Shared" in a.run("memory", "list", "notes", json_output=False).stdout
    assert a.fails("ambiguous_revision", "memory", "read", "notes", shared, "--revision", "3")
    assert b.ok("sync", "pull", "notes")["conflicts"] == [shared]
    for home in (a, b):  # one note, not two, and the one head both devices choose (a sibling of the same depth)
        chosen = home.ok("memory", "read", "notes", shared)["body"]
        hits = home.ok("memory", "search", "notes", "edited")["results"]
        assert [(hit["id"], [c["text"] for c in hit["chunks"]]) for hit in hits] == [(shared, [chosen])], hits

    a.ok("memory", "update", "notes", shared, "--body", "resolved", "--revision", b_head)
    a.ok("sync", "push", "notes")
    assert b.ok("sync", "pull", "notes")["conflicts"] == []
    for home in (a, b):
        read = home.ok("memory", "read", "notes", shared)
        assert (read["body"], read["conflict"]) == ("resolved", None)
        assert {r["id"] for r in home.ok("memory", "list", "notes")["records"]} == {kept, shared}

    status = b.ok("sync", "status", "notes", "--json")
    assert set(status) == {
        "vault", "folder", "device", "last_push", "last_pull", "imported", "pushed", "conflicts", "bad", "skipped",
        "not_local", "waiting", "timer_error",
    }  # fmt: skip
    for path in folder.rglob("*"):
        assert not path.name.endswith((".db", "-wal", "-shm", ".lock", ".sock"))
        if path.is_file():
            assert MARKER.encode() not in path.read_bytes()

    for path in (folder / "payloads").iterdir():
        path.unlink()
    assert b.ok("sync", "pull", "notes")["imported"] == 0
    assert {r["id"] for r in b.ok("memory", "list", "notes")["records"]} == {kept, shared}


def test_a_second_vault_cannot_take_a_folder_and_device_only_vaults_stay(pair: tuple[HomeDir, HomeDir, Path]) -> None:
    a, b, folder = pair
    error = b.fails(
        "sync_folder_in_use", "sync", "init", "other", "--to", str(folder), "--passphrase-stdin", stdin=SYNC_PASSPHRASE
    )
    assert a.ok("vault", "show", "notes")["id"] in error["message"]
    b.ok("vault", "create", "secret", "--device-only")
    b.fails(
        "device_only_vault", "sync", "init", "secret", "--to", str(folder.parent / "x"), "--passphrase-stdin",
        stdin=SYNC_PASSPHRASE,
    )  # fmt: skip
    b.fails(
        "invalid_argument", "sync", "init", "other", "--to", str(b.path / "inside"), "--passphrase-stdin",
        stdin=SYNC_PASSPHRASE,
    )  # fmt: skip


KILLED_PUSHES = 6
"""Pushes killed after one payload each (a daemon start and an unlock per kill: about 4 s each on 2 cores)."""


def test_a_push_killed_between_payloads_never_leaves_half_a_file(tmp_path: Path) -> None:
    a = with_hooks(_home(tmp_path, "a"), kill_after_payloads=1)
    folder = tmp_path / "shared"
    try:
        initialize(a)
        for n in range(KILLED_PUSHES):
            a.ok("memory", "add", "notes", "--title", f"note {n}", "--body", f"body {n} " * 200)
        a.ok("sync", "init", "notes", "--to", str(folder), "--passphrase-stdin", stdin=SYNC_PASSPHRASE)
        for _ in range(KILLED_PUSHES):
            assert a.run("sync", "push", "notes").code != 0  # the daemon died after one payload
            a.start()
            a.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
        assert len(list((folder / "payloads").glob("*.rev"))) == KILLED_PUSHES
    finally:
        a.stop()
    b = _home(tmp_path, "b")
    try:
        initialize(b, vault="other")
        b.ok("sync", "join", str(folder), "--passphrase-stdin", stdin=SYNC_PASSPHRASE)
        report = b.ok("sync", "pull", "notes")
        assert report["imported"] == KILLED_PUSHES and report["bad"] == []
    finally:
        b.stop()


def test_a_home_of_the_previous_release_upgrades_and_then_syncs(tmp_path: Path) -> None:
    old, notes, manifest = copy_fixture_home("release-0.2", tmp_path / "old")
    b = _home(tmp_path, "b")
    folder = tmp_path / "shared"
    try:
        old.start()
        old.ok("unlock", "--passphrase-stdin", stdin=manifest["passphrase"] + "\n")
        old.ok("sync", "init", "notes", "--to", str(folder), "--passphrase-stdin", stdin=SYNC_PASSPHRASE)
        old.ok("sync", "push", "notes")
        initialize(b, vault="other")
        b.ok("sync", "join", str(folder), "--passphrase-stdin", stdin=SYNC_PASSPHRASE)
        b.ok("sync", "pull", "notes")
        [vault] = [v for v in manifest["vaults"] if v["name"] == "notes"]
        listed = {r["id"]: r["revision"] for r in b.ok("memory", "list", "notes")["records"]}
        assert listed == {r["id"]: r["revision"] for r in vault["records"]}

        # The old home ingests its notes folder; on B, where that folder does not exist, the same notes in another
        # folder match the synced cards (path gone, same content hash): no duplicate.
        old.ok("rag", "ingest", "notes", str(notes), "--recursive")
        old.ok("sync", "push", "notes")
        b.ok("sync", "pull", "notes")
        cards = {r["id"] for r in b.ok("memory", "list", "notes")["records"]}
        here = notes.rename(tmp_path / "here")
        results = b.ok("rag", "ingest", "notes", str(here), "--recursive")["results"]
        assert {r["status"] for r in results} == {"moved"} and {r["id"] for r in results} <= cards
        assert {r["id"] for r in b.ok("memory", "list", "notes")["records"]} == cards
    finally:
        old.stop()
        b.stop()


def test_a_pull_that_changes_the_vault_reindexes_it_in_the_background(tmp_path: Path, tiny_model: TinyModel) -> None:
    a, b = _home(tmp_path, "a"), _home(tmp_path, "b")
    folder = tmp_path / "shared"
    for home in (a, b):
        home.config.write_text(
            home.config.read_text() + "[rag]\nlocal_threads = 1\nembed_batch_size = 2\nauto_index = 'local'\n"
        )
    with_hooks(b, model_manifest=str(tiny_model.manifest_path), step_delay_seconds={"IndexQuery": 5.0})
    try:
        initialize(a)
        initialize(b, vault="other")
        b.ok("rag", "model-install", "--from", str(tiny_model.model_dir))
        a.ok("sync", "init", "notes", "--to", str(folder), "--passphrase-stdin", stdin=SYNC_PASSPHRASE)
        b.ok("sync", "join", str(folder), "--passphrase-stdin", stdin=SYNC_PASSPHRASE)
        a.ok("memory", "add", "notes", "--kind", "card", "--title", "Ferns", "--body", "Ferns grow in shade.")
        a.ok("sync", "push", "notes")
        b.ok("sync", "pull", "notes")
        _indexed(b)

        # A search that started before a pull and ends after it: its result from before is dropped, and it runs
        # again on the pulled state.
        a.ok("memory", "add", "notes", "--kind", "card", "--title", "Mosses", "--body", "Mosses grow in shade too.")
        a.ok("sync", "push", "notes")
        search = subprocess.Popen(
            [memories_executable(), "rag", "search", "notes", "shade", "--json"],
            env={**os.environ, "MEMORIES_HOME": str(b.path), **b.env},
            stdout=subprocess.PIPE,
        )
        b.wait_for(lambda: any(j["kind"] == "search" and j["state"] == "running" for j in b.ok("jobs")["jobs"]))
        assert b.ok("sync", "pull", "notes")["imported"] == 1
        out, _ = search.communicate(timeout=120)
        assert {hit["title"] for hit in json.loads(out)["results"]} == {"Ferns", "Mosses"}
        _indexed(b)
        batches = b.status()["embedding_batches"]
        assert b.ok("sync", "pull", "notes")["imported"] == 0  # nothing new: no job, no batch
        assert b.status()["embedding_batches"] == batches
        assert len([j for j in b.ok("jobs")["jobs"] if j["kind"] == "index"]) == 2
    finally:
        a.stop()
        b.stop()


def _indexed(home: HomeDir) -> None:
    """Wait, without any command but status and jobs, for a background index job to leave nothing missing."""
    home.wait_for(
        lambda: (
            home.ok("rag", "status", "notes")["missing"] == 0
            and all(j["state"] in ("done", "failed", "cancelled") for j in home.ok("jobs")["jobs"])
        ),
        timeout=120,
        what="the background index job",
    )
    jobs = [j for j in home.ok("jobs")["jobs"] if j["kind"] == "index"]
    assert jobs and all(j["background"] and j["state"] == "done" for j in jobs)


def test_the_sync_timer_pulls_and_pushes_by_itself(pair: tuple[HomeDir, HomeDir, Path]) -> None:
    a, b, _ = pair
    b.ok("daemon", "stop")
    b.config.write_text(b.config.read_text() + "[sync]\ninterval_seconds = 5\n")
    b.start()
    b.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    record = a.ok("memory", "add", "notes", "--title", "From A", "--body", "pulled by the timer")["id"]
    a.ok("sync", "push", "notes")
    b.wait_for(lambda: record in {r["id"] for r in b.ok("memory", "list", "notes")["records"]}, timeout=60)
    mine = b.ok("memory", "add", "notes", "--title", "From B", "--body", "pushed by the timer")["id"]

    def arrived_on_a() -> bool:
        a.ok("sync", "pull", "notes")
        return mine in {r["id"] for r in a.ok("memory", "list", "notes")["records"]}

    a.wait_for(arrived_on_a, timeout=60, what="B's timer to push")
    assert a.ok("memory", "read", "notes", mine)["body"] == "pushed by the timer"
    kinds = {(j["kind"], j["background"]) for j in b.ok("jobs")["jobs"]}
    assert {("sync pull", True), ("sync push", True)} <= kinds
