"""Issue 2 end to end: the encrypted vault, the daemon, its workers and the CLI, through the installed executable."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from memories.limits import MAX_BODY_BYTES
from tests.fixtures.daemon import FAST_KDF, PASSPHRASE, HomeDir, initialize, memories_executable, with_hooks

MARKER = "zqx-marker-7f3c9a"


def _files_containing(root: Path, needle: bytes) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_socket() and needle in path.read_bytes():
            found.append(path)
    return found


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead for our purposes
        return stat.read().split(") ")[1][0] != "Z"


# -- acceptance 2: nothing in the clear ----------------------------------------------------------------------


def test_no_plaintext_anywhere_under_the_home(vault: HomeDir) -> None:
    title = f"title {MARKER} 標題"
    body = f"body line with {MARKER}\n中文 {MARKER} 資料\n"
    ref = vault.ok(
        "memory",
        "add",
        "notes",
        "--title",
        title,
        "--body",
        body,
        "--meta",
        f"source={MARKER}.md",
        "--meta",
        f"x={MARKER}",
    )
    private = vault.ok("memory", "add", "notes", "--title", MARKER, "--sensitivity", "private", "--body", MARKER)
    vault.ok("rag", "search", "notes", MARKER)  # builds the index in the worker: still nothing on disk
    record = vault.ok("memory", "read", "notes", ref["id"])
    assert (record["title"], record["body"]) == (title, body)
    assert record["meta"] == {"source": f"{MARKER}.md", "x": MARKER}
    assert vault.ok("memory", "read", "notes", private["id"])["body"] == MARKER
    for needle in (MARKER.encode(), MARKER.encode("utf-16-le"), "標題".encode()):
        assert _files_containing(vault.path, needle) == []
    vault.stop()  # checkpoint and close: the database file itself, not only the WAL
    assert _files_containing(vault.path, MARKER.encode()) == []


# -- acceptance 3: passphrase and lock -------------------------------------------------------------------------


def test_wrong_passphrase_changes_nothing_and_lock_blocks_content(vault: HomeDir) -> None:
    ref = vault.ok("memory", "add", "notes", "--title", "t", "--body", "kept")
    pid = vault.status()["pid"]
    files = [vault.path / "memories.db", vault.path / "memories.db-wal"]
    before = [path.read_bytes() if path.exists() else None for path in files]
    vault.fails("bad_passphrase", "unlock", "--passphrase-stdin", stdin="wrong\n")
    assert [path.read_bytes() if path.exists() else None for path in files] == before
    assert vault.status()["locked"] is False

    assert vault.ok("lock") == {"ok": True, "locked": True}
    for command in (
        ("memory", "read", "notes", ref["id"]),
        ("memory", "list", "notes"),
        ("memory", "add", "notes", "--title", "t", "--body", "b"),
        ("memory", "update", "notes", ref["id"], "--body", "b"),
        ("memory", "delete", "notes", ref["id"]),
        ("memory", "search", "notes", "kept"),
        ("rag", "search", "notes", "kept"),
        ("rag", "index", "notes"),
        ("vault", "create", "other"),
    ):
        vault.fails("vault_locked", *command)
    listing = vault.ok("vault", "list")
    assert [v["name"] for v in listing["vaults"]] == ["notes"] and "unverified" not in listing
    assert any("verified only after unlock" in warning for warning in listing["warnings"])
    vault.fails("bad_passphrase", "unlock", "--passphrase-stdin", stdin="wrong\n")
    assert vault.status()["locked"] is True
    vault.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    assert vault.ok("memory", "read", "notes", ref["id"])["body"] == "kept"
    assert vault.status()["pid"] == pid


# -- acceptance 4: tampering is detected -------------------------------------------------------------------------


def _tamper(home: HomeDir, sql: str, *params: object) -> None:
    with sqlite3.connect(home.path / "memories.db") as db:
        db.execute(sql, params)


def test_tampered_ciphertext_gives_integrity_error(vault: HomeDir) -> None:
    a = vault.ok("memory", "add", "notes", "--title", "A", "--body", "alpha")["id"]
    b = vault.ok("memory", "add", "notes", "--title", "B", "--body", "bravo")["id"]
    vault.ok("memory", "update", "notes", a, "--body", "alpha two")

    # One flipped byte in a body.
    with sqlite3.connect(vault.path / "memories.db") as db:
        (blob,) = db.execute("SELECT body FROM revisions WHERE record_id = ? AND revision = 1", (b,)).fetchone()
        flipped = bytearray(blob)
        flipped[20] ^= 0x01
        db.execute("UPDATE revisions SET body = ? WHERE record_id = ? AND revision = 1", (bytes(flipped), b))
    vault.fails("integrity_error", "memory", "read", "notes", b)

    # Revision 1's body copied onto revision 2 of the same record.
    _tamper(
        vault,
        "UPDATE revisions SET body = (SELECT body FROM revisions WHERE record_id = ? AND revision = 1) "
        "WHERE record_id = ? AND revision = 2",
        a,
        a,
    )
    vault.fails("integrity_error", "memory", "read", "notes", a)
    vault.fails("integrity_error", "memory", "read", "notes", a, "--revision", "2")
    assert vault.ok("memory", "read", "notes", a, "--revision", "1")["body"] == "alpha"

    # One record's ciphertext copied onto another record.
    c = vault.ok("memory", "add", "notes", "--title", "C", "--body", "charlie")["id"]
    _tamper(
        vault,
        "UPDATE revisions SET body = (SELECT body FROM revisions WHERE record_id = ? AND revision = 1) "
        "WHERE record_id = ?",
        a,
        c,
    )
    vault.fails("integrity_error", "memory", "read", "notes", c)

    # Two fields of one record swapped.
    d = vault.ok("memory", "add", "notes", "--title", "D", "--body", "delta")["id"]
    _tamper(vault, "UPDATE revisions SET header = body, body = header WHERE record_id = ?", d)
    vault.fails("integrity_error", "memory", "read", "notes", d)


# -- acceptance 5: crashes -------------------------------------------------------------------------------------


def test_worker_killed_mid_job_fails_that_job_and_recovers(home: HomeDir) -> None:
    with_hooks(home, step_delay_seconds={"IndexQuery": 2})
    vault = initialize(home)
    vault.ok("memory", "add", "notes", "--title", "crash test", "--body", "something to find")
    index_pid = vault.worker_pid("index")
    search = subprocess.Popen(
        [memories_executable(), "rag", "search", "notes", "something", "--json"],
        env={**os.environ, "MEMORIES_HOME": str(vault.path), **vault.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    vault.wait_for(lambda: vault.status()["running_jobs"] == 1, what="the search job to run")
    os.kill(index_pid, signal.SIGKILL)
    out, err = search.communicate(timeout=60)
    assert search.returncode == 1
    assert b'"code":"worker_crashed"' in out and b"Traceback" not in err
    status = vault.wait_for(
        lambda: (
            (s := vault.status()) and next(w for w in s["workers"] if w["name"] == "index")["state"] == "ready" and s
        ),
        what="the index worker to restart",
    )
    index = next(w for w in status["workers"] if w["name"] == "index")
    assert index["restarts"] == 1 and index["pid"] != index_pid
    assert vault.ok("rag", "search", "notes", "something")["results"][0]["title"] == "crash test"
    jobs = vault.ok("jobs")["jobs"]
    assert [j["error"]["code"] for j in jobs if j["error"]] == ["worker_crashed"]


def test_no_worker_outlives_a_killed_supervisor(vault: HomeDir) -> None:
    status = vault.status()
    workers = [w["pid"] for w in status["workers"]]
    assert len(workers) == 3 and all(_process_alive(pid) for pid in workers)
    os.kill(status["pid"], signal.SIGKILL)
    vault.wait_for(lambda: not any(_process_alive(pid) for pid in workers), what="the workers to exit")


def test_acknowledged_records_survive_a_killed_daemon(vault: HomeDir) -> None:
    acknowledged: list[tuple[str, str]] = []
    stop = threading.Event()

    def add_forever() -> None:
        number = 0
        while not stop.is_set():
            number += 1
            body = f"record {number} " + "x" * (number % 500)
            result = vault.run("memory", "add", "notes", "--title", f"r{number}", "--body", body)
            if result.code == 0:
                acknowledged.append((result.doc["id"], body))

    writer = threading.Thread(target=add_forever)
    writer.start()
    vault.wait_for(lambda: len(acknowledged) >= 15, what="some acknowledged adds")
    os.kill(vault.status()["pid"], signal.SIGKILL)
    stop.set()
    writer.join()
    vault.fails("daemon_not_running", "memory", "list", "notes")  # the socket left behind answers nothing
    vault.start()
    vault.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    for record_id, body in acknowledged:
        assert vault.ok("memory", "read", "notes", record_id)["body"] == body
    vault.stop()
    with sqlite3.connect(vault.path / "memories.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


# -- acceptance 6: budget, cancel, late replies: tests/middle/test_cuts.py and test_gate.py -----------------------


def _search_in_background(vault: HomeDir, query: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [memories_executable(), "rag", "search", "notes", query, "--json"],
        env={**os.environ, "MEMORIES_HOME": str(vault.path), **vault.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


# -- acceptance 7: which daemon ----------------------------------------------------------------------------------


def wait_for_restart_warning(home: HomeDir, present: bool) -> None:
    """Wait until replies do (or no longer) warn that the config changed: the daemon's file watch looks at the
    config once a second, in a thread, and replies carry what it last saw."""

    def warned() -> bool:
        return any("restart" in note for note in home.ok("vault", "list").get("warnings", []))

    home.wait_for(lambda: warned() == present, what=f"the restart warning to be {'shown' if present else 'gone'}")


def test_home_mismatch_not_running_and_restart_warning(vault: HomeDir, tmp_path: Path) -> None:
    other = tmp_path / "other.toml"
    other.write_text(vault.config.read_text())
    error = vault.fails("home_mismatch", "vault", "list", "--config", str(other))
    assert str(other.resolve()) in error["message"] and str(vault.config.resolve()) in error["message"]
    assert vault.ok("daemon", "status", "--config", str(other))["config"] == str(vault.config.resolve())

    nowhere = HomeDir(tmp_path / "nowhere")
    error = nowhere.fails("daemon_not_running", "vault", "list")
    assert str(nowhere.path) in error["message"]

    assert "warnings" not in vault.ok("vault", "list")
    vault.config.write_text(vault.config.read_text() + "\n[daemon]\nauto_lock_minutes = 30\n")
    wait_for_restart_warning(vault, True)
    assert vault.status()["restart_needed"] is True
    vault.ok("daemon", "stop")
    vault.start()
    assert "warnings" not in vault.ok("daemon", "status")
    assert vault.status()["restart_needed"] is False


# -- acceptance 8: revisions -------------------------------------------------------------------------------------


def test_revisions_read_back_and_delete(vault: HomeDir) -> None:
    ref = vault.ok("memory", "add", "notes", "--title", "v1", "--body", "one", "--meta", "k=1")
    assert ref["revision"] == 1
    assert vault.ok("memory", "update", "notes", ref["id"], "--body", "two") == {"id": ref["id"], "revision": 2}
    assert vault.ok("memory", "update", "notes", ref["id"], "--title", "v3", "--meta", "k=3")["revision"] == 3
    expected = {1: ("v1", "one", {"k": "1"}), 2: ("v1", "two", {"k": "1"}), 3: ("v3", "two", {"k": "3"})}
    for revision, (title, body, meta) in expected.items():
        record = vault.ok("memory", "read", "notes", ref["id"], "--revision", str(revision))
        assert (record["revision"], record["title"], record["body"], record["meta"]) == (revision, title, body, meta)
    assert vault.ok("memory", "read", "notes", ref["id"])["revision"] == 3
    vault.fails("record_not_found", "memory", "read", "notes", ref["id"], "--revision", "4")
    vault.ok("memory", "delete", "notes", ref["id"])
    assert vault.ok("memory", "list", "notes") == {"records": []}
    vault.fails("record_not_found", "memory", "read", "notes", ref["id"])
    vault.fails("record_not_found", "memory", "read", "notes", ref["id"], "--revision", "1")


def test_listing_never_shows_bodies_and_vaults_resolve_by_name_or_id(vault: HomeDir) -> None:
    vault.ok("memory", "add", "notes", "--kind", "credential", "--title", "bank", "--body", "hunter2-password")
    vault.ok("memory", "add", "notes", "--sensitivity", "private", "--title", "diary", "--body", "dear-diary-text")
    listing = vault.run("memory", "list", "notes", json_output=False)
    assert "hunter2" not in listing.stdout and "dear-diary" not in listing.stdout
    assert {r["title"] for r in vault.ok("memory", "list", "notes")["records"]} == {"bank", "diary"}
    assert [r["title"] for r in vault.ok("memory", "list", "notes", "--kind", "credential")["records"]] == ["bank"]
    created = vault.ok("vault", "create", "work", "--device-only")
    assert created["device_only"] is True and set(created) == {"id", "name", "device_only"}
    assert vault.ok("vault", "show", created["id"])["name"] == "work"
    assert vault.ok("vault", "policy", "work", "--device-only", "off")["device_only"] is False
    vault.fails("vault_name_taken", "vault", "create", "work")
    vault.fails("vault_name_taken", "vault", "create", created["id"])  # a name may not be another vault's id
    assert [v["name"] for v in vault.ok("vault", "list")["vaults"]] == ["notes", "work"]
    with sqlite3.connect(vault.path / "memories.db") as db:  # a store written otherwise may hold such a pair
        db.execute("UPDATE vaults SET name = ? WHERE name = 'notes'", (created["id"],))
    vault.fails("ambiguous_vault", "vault", "show", created["id"])


# -- acceptance 9: bad input -------------------------------------------------------------------------------------


def test_bad_input_never_gives_a_traceback(vault: HomeDir, tmp_path: Path) -> None:
    vault.fails("vault_not_found", "memory", "list", "nope")
    vault.fails("invalid_utf8", "memory", "add", "notes", "--title", "bad", stdin=b"ok \xff\xfe bytes")
    bad_file = tmp_path / "bad.txt"
    bad_file.write_bytes(b"\xc3\x28")
    vault.fails("invalid_utf8", "memory", "add", "notes", "--title", "bad", "--file", str(bad_file))
    empty = vault.ok("memory", "add", "notes", "--title", "empty", stdin=b"")
    assert vault.ok("memory", "read", "notes", empty["id"])["body"] == ""
    at_limit = vault.ok("memory", "add", "notes", "--title", "big", stdin=b"a" * MAX_BODY_BYTES)
    assert len(vault.ok("memory", "read", "notes", at_limit["id"])["body"]) == MAX_BODY_BYTES
    huge = tmp_path / "huge.txt"
    huge.write_bytes(b"a" * (50 * 1024 * 1024))
    for source in (("--file", str(huge)), ()):
        error = vault.fails(
            "body_too_large",
            "memory",
            "add",
            "notes",
            "--title",
            "huge",
            *source,
            stdin=None if source else huge.read_bytes(),
        )
        assert error["details"]["max"] == MAX_BODY_BYTES
    vault.fails("record_not_found", "memory", "read", "notes", "0000000000000000")
    usage = vault.run("memory", "add", "notes", "--kind", "nonsense", "--title", "x", "--body", "y")
    assert usage.code == 2 and "Traceback" not in usage.stderr
    assert len(vault.ok("memory", "list", "notes")["records"]) == 2


def test_missing_home_and_garbage_config(tmp_path: Path) -> None:
    missing = HomeDir(tmp_path / "does" / "not" / "exist")
    error = missing.fails("daemon_not_running", "memory", "list", "notes")
    assert str(missing.path) in error["message"]
    error = missing.fails("invalid_config", "daemon", "start", "--config", str(tmp_path / "confg.toml"))
    assert "confg.toml, which does not exist" in error["message"] and not missing.path.exists()

    # <home>/config.toml is optional: a home without one starts with the defaults.
    bare = HomeDir(tmp_path / "bare")
    try:
        assert bare.ok("daemon", "start")["pid"] and not bare.config.exists()
        assert bare.status()["config"] == str(bare.config.resolve())
    finally:
        bare.stop()

    garbage = HomeDir(tmp_path / "garbage")
    garbage.path.mkdir()
    for text, key in (
        ("[daemon\nbroken", "not valid TOML"),
        ("[daemon]\nauto_lock_minutes = 'soon'\n", "daemon.auto_lock_minutes"),
        ("[daemon]\nsurprise = 1\n", "daemon.surprise"),
        ("[rag.http]\ntoken = 'abc'\n", "rag.http.token"),
        ("[rag.http]\nproxy_url = 'http://user:pw@proxy.example:8080'\n", "credentials"),
        ("[rag]\nlocal_threads = 0\n", "rag.local_threads"),
    ):
        garbage.config.write_text(text)
        error = garbage.fails("invalid_config", "daemon", "start")
        assert key in error["message"], error["message"]


def test_leftover_socket_of_a_dead_daemon(vault: HomeDir) -> None:
    status = vault.status()
    os.kill(status["pid"], signal.SIGKILL)
    vault.wait_for(lambda: not _process_alive(status["pid"]), what="the daemon to die")
    vault.fails("daemon_not_running", "vault", "list")
    vault.start()
    vault.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    assert [v["name"] for v in vault.ok("vault", "list")["vaults"]] == ["notes"]


def test_long_home_path_uses_a_short_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("a-rather-long-folder-name-" * 5) / "home"
    deep.mkdir(parents=True)
    home = HomeDir(deep)
    home.config.write_text(FAST_KDF)
    try:
        initialize(home)
        assert home.ok("vault", "list")["vaults"][0]["name"] == "notes"
    finally:
        home.stop()


@pytest.mark.parametrize("stdin", ["", "\n"])
def test_empty_passphrase_is_refused(home: HomeDir, stdin: str) -> None:
    home.start()
    home.fails("invalid_passphrase", "init", "--passphrase-stdin", stdin=stdin)


def test_daemon_stop_with_no_daemon_running_succeeds_and_says_so(home: HomeDir) -> None:
    """Like `daemon start` of a running daemon, `daemon stop` of a stopped one exits 0 (as `systemctl stop` of a
    stopped unit does), so scripts may call it either way; `already_stopped` tells the two apart."""
    assert home.ok("daemon", "stop") == {"ok": True, "already_stopped": True}
    home.start()
    assert home.ok("daemon", "stop") == {"ok": True, "already_stopped": False}
    again = home.run("daemon", "stop", json_output=False)
    assert (again.code, again.stdout, again.stderr) == (0, "not running; nothing was stopped\n", "")
    home.fails("daemon_not_running", "daemon", "status")


def test_a_second_daemon_for_the_same_home_is_refused(vault: HomeDir, tmp_path: Path) -> None:
    pid = vault.status()["pid"]
    again = vault.ok("daemon", "start")  # scripts and service units call it blindly
    assert again["already_running"] is True and again["pid"] == pid
    human = vault.run("daemon", "start", json_output=False)
    assert human.code == 0 and "already running" in human.stdout
    run = vault.run("daemon", "run")
    assert run.error_code == "daemon_already_running" and run.code == 1
    other = tmp_path / "other.toml"
    other.write_text(FAST_KDF)
    error = vault.fails("home_mismatch", "daemon", "start", "--config", str(other))
    assert str(other) in error["message"]
    assert vault.status()["pid"] == pid
    os.kill(pid, signal.SIGSTOP)
    try:
        vault.fails("daemon_unresponsive", "daemon", "start")
    finally:
        os.kill(pid, signal.SIGCONT)
    assert vault.status()["pid"] == pid


def test_a_third_vault_evicts_the_least_recent_cache_and_comes_back(vault: HomeDir) -> None:
    names = ["notes", "second", "third"]
    for name in names[1:]:
        vault.ok("vault", "create", name)
    for name in names:
        for number in range(3):
            vault.ok("memory", "add", name, "--title", f"{name} {number}", "--body", f"shared word {name}word{number}")
    for _ in range(2):  # two rounds through three vaults with two cache slots: every search finds an evicted cache
        for name in names:
            found = vault.ok("rag", "search", name, "shared word")["results"]
            assert sorted(hit["title"] for hit in found) == [f"{name} {n}" for n in range(3)]
    cached = [vault.ok("rag", "status", name)["cache"] for name in names]
    assert cached == ["cold", "warm", "warm"]


def test_special_files_are_refused_without_reading_them(vault: HomeDir, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "good.md").write_text("# Good\n\nplain text")
    os.mkfifo(folder / "pipe.md")  # opening it for reading would block forever
    result = vault.run("rag", "ingest", "notes", str(folder), "/dev/zero", "/dev/null")
    assert result.code == 3, result.stdout + result.stderr
    statuses = {Path(r["path"]).name: (r["status"], (r["error"] or {}).get("code")) for r in result.doc["results"]}
    assert statuses == {
        "good.md": ("added", None),
        "pipe.md": ("refused", "unsupported_file"),
        "zero": ("refused", "unsupported_file"),
        "null": ("refused", "unsupported_file"),
    }


def test_an_ingest_over_the_chunk_limit_exits_3_and_moving_records_out_fixes_search(
    home: HomeDir, tmp_path: Path
) -> None:
    """``[rag] max_chunks`` (here its least, 1,000): the vault keeps every note, is refused with the figures it has
    and the setting to raise, also after a daemon restart (issue 28, item 1)."""
    home.config.write_text(home.config.read_text() + "[rag]\nmax_chunks = 1000\n")
    vault = initialize(home)
    size = MAX_BODY_BYTES // 10
    paragraph = "lorem ipsum dolor sit amet consectetur adipiscing elit " * 12 + "\n\n"
    body = (paragraph * (size // len(paragraph) + 1))[:size]
    big = [vault.ok("memory", "add", "notes", "--title", f"big {n}", stdin=body)["id"] for n in range(2)]
    vault.ok("memory", "update", "notes", big[0], "--title", "big 0, revised")
    assert vault.ok("memory", "search", "notes", "lorem")["results"]  # about 700 chunks: under 1,000
    note = tmp_path / "small.md"  # with it about 1,050
    note.write_text("# Small\n\nthe last straw\n\n" + body[: size - 100])
    ingested = vault.run("rag", "ingest", "notes", str(note))
    assert ingested.code == 3, ingested.stdout + ingested.stderr
    assert ingested.doc["results"][0]["status"] == "added"  # the card is stored all the same
    over = ingested.doc["over_limit"]
    assert over["code"] == "vault_too_large"
    assert over["details"]["limit"] == "chunks" and over["details"]["max"] == 1_000
    assert over["details"]["over"] == over["details"]["value"] - 1_000 > 0
    assert over["details"]["setting"] == "rag.max_chunks" and over["details"]["chunks"] == over["details"]["value"]
    assert "'notes'" in over["message"] and f"{over['details']['over']:,} chunks over" in over["message"]
    assert "error: vault_too_large: " in ingested.stderr
    status = vault.ok("rag", "status", "notes")
    assert any("searches fail" in warning for warning in status["warnings"])
    assert status["cache"] == "cold"  # a vault over the limits holds no cache slot another vault could use
    assert status["over_limit"]["details"] == over["details"] and status["limits"]["chunks"] == 1_000
    error = vault.fails("vault_too_large", "rag", "search", "notes", "straw")
    assert error["details"] == over["details"]
    vault.ok("daemon", "stop")
    vault.start()
    vault.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    assert vault.fails("vault_too_large", "rag", "search", "notes", "straw")["details"] == over["details"]
    vault.ok("vault", "create", "archive")
    moved = vault.ok("memory", "move", "notes", big[0], "--to", "archive")
    assert moved == {"id": big[0], "revision": 2}
    assert [h["asset_id"] for h in vault.ok("rag", "search", "notes", "straw")["results"]] == [
        ingested.doc["results"][0]["id"]
    ]
    assert vault.ok("memory", "read", "archive", big[0], "--revision", "1")["title"] == "big 0"
    assert vault.ok("rag", "search", "archive", "lorem", "--limit", "1")["results"][0]["asset_id"] == big[0]


def test_cli_boundary_errors_are_one_line(vault: HomeDir) -> None:
    bad = vault.run("memory", "add", "notes", "--title", "\udcff", "--body", "b")  # undecodable argv byte
    assert bad.code == 1 and bad.error_code == "invalid_utf8" and "Traceback" not in bad.stderr
    for args in (
        ("memory", "read", "notes", "x", "--revision", "99999999999999999999999"),
        ("rag", "search", "notes", "q", "--limit", "0"),
        ("jobs", "cancel", "99999999999999999999999"),
    ):
        usage = vault.run(*args)
        assert usage.code == 2 and usage.error_code == "usage_error" and "Traceback" not in usage.stderr
    group = vault.run("--json", "rag", json_output=False)  # a group without a subcommand
    assert group.code == 2 and group.doc["error"] == {"code": "usage_error", "message": "Missing command."}
    ref = vault.ok("memory", "add", "notes", "--title", "t", "--body", "b")
    assert vault.ok("memory", "delete", "notes", ref["id"]) == {"ok": True}
    piped = subprocess.run(
        f"'{memories_executable()}' memory list notes | head -c 1",
        shell=True,
        capture_output=True,
        env={**os.environ, "MEMORIES_HOME": str(vault.path)},
    )
    assert piped.returncode == 0 and b"Traceback" not in piped.stderr and b"error" not in piped.stderr


def test_a_home_that_is_a_file_and_a_blank_passphrase(tmp_path: Path) -> None:
    regular = tmp_path / "not-a-folder"
    regular.write_text("x")
    error = HomeDir(regular).fails("invalid_argument", "daemon", "start")
    assert "not a folder" in error["message"]
    home = HomeDir(tmp_path / "home")
    home.path.mkdir()
    home.config.write_text(FAST_KDF)
    try:
        home.start()
        home.fails("invalid_passphrase", "init", "--passphrase-stdin", stdin="   \n")
    finally:
        home.stop()


def test_an_unreadable_config_is_a_warning_not_a_dead_daemon(vault: HomeDir) -> None:
    original = vault.config.read_text()
    vault.config.unlink()
    vault.config.mkdir()  # reading it now fails
    try:
        wait_for_restart_warning(vault, True)
        assert vault.status()["restart_needed"] is True
    finally:
        vault.config.rmdir()
        vault.config.write_text(original)
    wait_for_restart_warning(vault, False)
    assert "warnings" not in vault.ok("vault", "list")
    vault.ok("daemon", "stop")
    vault.fails("daemon_not_running", "daemon", "status")


def test_code_in_the_working_folder_is_never_imported(home: HomeDir, tmp_path: Path) -> None:
    trap = tmp_path / "trap"
    for package in ("workers", "memories"):
        (trap / package).mkdir(parents=True)
        (trap / package / "__init__.py").write_text(f"open({str(trap / 'imported')!r}, 'w').write('{package}')\n")
    (trap / "workers" / "index.py").write_text(f"open({str(trap / 'imported')!r}, 'w').write('index')\n")
    started = subprocess.run(
        [memories_executable(), "daemon", "start", "--json"],
        cwd=trap,
        env={**os.environ, "MEMORIES_HOME": str(home.path)},
        capture_output=True,
    )
    assert started.returncode == 0, started.stderr
    assert home.ok("init", "--passphrase-stdin", stdin=PASSPHRASE + "\n")["locked"] is False
    home.ok("vault", "create", "notes")
    home.ok("memory", "add", "notes", "--title", "t", "--body", "safe from the trap")
    assert home.ok("rag", "search", "notes", "trap")["results"]
    assert not (trap / "imported").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to listen as another user")
def test_a_socket_of_another_user_gets_no_passphrase(home: HomeDir) -> None:
    socket_path = home.path / "run" / "daemon.sock"
    socket_path.parent.mkdir(mode=0o755)
    listener = subprocess.Popen(  # a stranger's listener where our daemon's socket would be
        [
            sys.executable,
            "-c",
            "import os, socket, sys\n"
            "sock = socket.socket(socket.AF_UNIX); sock.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777)\n"
            "os.setuid(65534); sock.listen(1); print('ready', flush=True)\n"
            "while True: sock.accept()[0].recv(65536)\n",
            str(socket_path),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert listener.stdout is not None and listener.stdout.readline().strip() == b"ready"
        error = home.fails("daemon_not_running", "unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
        assert "another user" in error["message"]
    finally:
        listener.kill()
        listener.wait()


@pytest.mark.parametrize("how", [signal.SIGINT])  # the daemon's side, for every way to hang up: tests/middle
def test_a_client_that_hangs_up_cancels_its_job_and_the_daemon_lives_on(home: HomeDir, how: signal.Signals) -> None:
    with_hooks(home, step_delay_seconds={"IndexQuery": 1})
    vault = initialize(home)
    vault.ok("memory", "add", "notes", "--title", "t", "--body", "hang up")
    vault.worker_pid("index")
    pid = vault.status()["pid"]
    search = _search_in_background(vault, "hang")
    job = vault.wait_for(
        lambda: next((j for j in vault.ok("jobs")["jobs"] if j["state"] == "running"), None), what="a running job"
    )
    search.send_signal(how)
    search.wait(timeout=30)
    if how == signal.SIGINT:
        assert search.returncode == 130
    vault.wait_for(
        lambda: next(j for j in vault.ok("jobs")["jobs"] if j["id"] == job["id"])["state"] == "cancelled",
        what="the job to be cancelled",
    )
    assert vault.status()["pid"] == pid and _process_alive(pid)
    assert vault.ok("rag", "search", "notes", "hang")["results"]


def test_config_that_is_not_a_regular_file(tmp_path: Path) -> None:
    home = HomeDir(tmp_path / "home")
    home.path.mkdir()
    home.fails("invalid_config", "daemon", "start", "--config", "/dev/zero")  # never read to the end
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    home.fails("invalid_config", "daemon", "start", "--config", str(fifo))  # never blocks on a pipe
    home.config.write_text(FAST_KDF)
    try:
        initialize(home)
        home.config.unlink()
        os.mkfifo(home.config)  # swapped for a pipe while the daemon runs: a warning, never a hang
        wait_for_restart_warning(home, True)
    finally:
        home.stop()


def test_a_stopped_daemon_is_stopped_for_good(vault: HomeDir) -> None:
    status = vault.status()
    os.kill(status["pid"], signal.SIGSTOP)
    error = vault.fails("daemon_unresponsive", "daemon", "status")
    assert "daemon stop" in error["message"]
    stopped = vault.ok("daemon", "stop")
    assert any("killed" in warning for warning in stopped["warnings"])
    vault.wait_for(lambda: not _process_alive(status["pid"]), what="the daemon to be gone")
    vault.start()
    vault.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    assert [v["name"] for v in vault.ok("vault", "list")["vaults"]] == ["notes"]


def test_more_bad_input_at_the_boundary(vault: HomeDir, tmp_path: Path) -> None:
    endless = vault.run("unlock", "--passphrase-stdin", stdin=b"a" * (20 * 1024 * 1024))
    assert endless.code == 1 and endless.error_code == "invalid_passphrase"
    vault.fails("limit_too_large", "rag", "search", "notes", "q", "--limit", "99999999999999999999")
    vault.fails("limit_too_large", "memory", "search", "notes", "q", "--limit", "101")
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "good.md").write_text("# Good\n")
    (folder / os.fsdecode(b"bad-\xff-name.md")).write_text("# Bad name\n")
    result = vault.run("rag", "ingest", "notes", str(folder))
    assert result.code == 3, result.stdout + result.stderr
    assert sorted((r["status"], (r["error"] or {}).get("code")) for r in result.doc["results"]) == [
        ("added", None),
        ("refused", "invalid_utf8"),
    ]
    vault.fails("invalid_argument", "rag", "ingest", "notes", str(folder), "--exclude", "foo\\")
    vault.ok("vault", "create", "Caf\u00e9")
    vault.fails("vault_name_taken", "vault", "create", "Cafe\u0301")  # the same name in NFD
    assert vault.ok("vault", "show", "Cafe\u0301")["name"] == "Caf\u00e9"


def test_terminal_escapes_in_notes_are_shown_not_obeyed(vault: HomeDir) -> None:
    evil = "evil \x1b]52;c;cHduZWQ=\x07 clip \x1b[2J \u202e txt"
    ref = vault.ok("memory", "add", "notes", "--title", evil, "--body", f"escape {evil}")
    for args in (
        ("memory", "read", "notes", ref["id"]),
        ("memory", "list", "notes"),
        ("rag", "search", "notes", "clip"),
    ):
        shown = vault.run(*args, json_output=False)
        assert shown.code == 0 and "\x1b" not in shown.stdout and "\x07" not in shown.stdout
        assert "\u202e" not in shown.stdout and "\\x1b" in shown.stdout
    assert vault.ok("memory", "read", "notes", ref["id"])["title"] == evil  # stored and returned exactly


def test_status_of_a_home_without_keys(home: HomeDir) -> None:
    home.start()
    home.fails("not_initialized", "rag", "status", "notes")
