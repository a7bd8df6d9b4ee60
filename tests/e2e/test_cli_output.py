"""Issue 12, what a careful user notices in the human output: escaped file names, plain scores, jobs that read
right."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from tests.fixtures.daemon import HomeDir, initialize, memories_executable, with_hooks

EXPONENT = re.compile(r"\de[-+]\d")


def test_control_characters_in_file_names_are_shown_escaped(vault: HomeDir, tmp_path: Path) -> None:
    note = tmp_path / "evil\nname\x1b[31m.md"
    note.write_text("# Escapes\n\nthe escapeword appears here\n")
    vault.ok("rag", "ingest", "notes", str(note))
    for command in (("rag", "search", "notes", "escapeword"), ("rag", "ingest", "notes", str(note))):
        human = vault.run(*command, json_output=False)
        assert human.code == 0, human.stderr
        assert "\x1b" not in human.stdout and "evil\\x0aname\\x1b[31m.md" in human.stdout
    missing = vault.run("rag", "ingest", "notes", str(tmp_path / "gone\x1b]0;owned\x07"), json_output=False)
    assert missing.code != 0 and "\x1b" not in missing.stderr and "\x07" not in missing.stderr


def test_scores_are_readable_shares_of_the_best(vault: HomeDir) -> None:
    for title in ("one", "two", "three"):  # a term in every record: BM25 scores very close to zero
        vault.ok("memory", "add", "notes", "--title", title, "--body", "commonword here")
    for command in ("memory", "rag"):
        human = vault.run(command, "search", "notes", "commonword", json_output=False)
        assert human.code == 0 and human.stdout.strip(), human.stderr
        assert not EXPONENT.search(human.stdout), human.stdout
        assert "100%" in human.stdout and "0.0000" not in human.stdout, human.stdout  # shares of the best


def test_jobs_show_a_finished_search_as_done(vault: HomeDir) -> None:
    vault.ok("memory", "add", "notes", "--title", "t", "--body", "jobword")
    vault.ok("rag", "search", "notes", "jobword")
    human = vault.run("jobs", json_output=False)
    row = next(line for line in human.stdout.splitlines() if " search " in line)
    assert " notes " in row and " done " in row and "0/?" not in row  # the vault's name, not its id
    search = next(job for job in vault.ok("jobs")["jobs"] if job["kind"] == "search")
    assert search["vault_name"] == "notes" and search["vault"] != "notes"


def _slow_search(home: HomeDir) -> tuple[subprocess.Popen[bytes], int]:
    """A search whose index step the test hook holds for a minute, started in the background; and its job id."""
    search = subprocess.Popen(
        [memories_executable(), "rag", "search", "notes", "slowword", "--json"],
        env={**os.environ, "MEMORIES_HOME": str(home.path), **home.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def running() -> int | None:
        return next((j["id"] for j in home.ok("jobs")["jobs"] if j["state"] == "running"), None)

    return search, home.wait_for(running, what="the search to run")


def test_jobs_cancel_prints_the_new_state(home: HomeDir) -> None:
    with_hooks(home, step_delay_seconds={"IndexQuery": 60})
    initialize(home)
    search, job_id = _slow_search(home)
    try:
        cancelled = home.ok("jobs", "cancel", str(job_id))["jobs"]
        assert [(j["id"], j["state"], j["error"]["code"]) for j in cancelled] == [(job_id, "cancelled", "cancelled")]
        assert search.wait(timeout=60) == 1
    finally:
        search.kill()
        search.wait()
    human = home.run("jobs", json_output=False)
    assert any(line.split()[:4] == [str(job_id), "search", "notes", "cancelled"] for line in human.stdout.splitlines())


def test_daemon_stop_tells_a_waiting_client_why(home: HomeDir) -> None:
    with_hooks(home, step_delay_seconds={"IndexQuery": 60})
    initialize(home)
    search, _ = _slow_search(home)
    try:
        home.ok("daemon", "stop")
        out, err = search.communicate(timeout=60)
    finally:
        search.kill()
        search.wait()
    assert search.returncode == 1
    assert "error: cancelled: the daemon is stopping" in err.decode(), err
    assert json.loads(out)["error"]["code"] == "cancelled"


def test_usage_errors_are_one_line(home: HomeDir) -> None:
    """Click's four-line block (Usage / Try / blank / Error) becomes the CLI's one error line; with ``--json`` the
    same message is the one document. Usage errors need no daemon."""
    missing = home.run("grant", "create", json_output=False)
    assert missing.code == 2 and missing.stdout == ""
    assert missing.stderr.splitlines() == [
        "error: usage_error: Missing argument 'VAULT'. (see `memories grant create --help`)"
    ]
    typed = home.run("rag", "search", "notes", "q", "--limit", "0")
    assert typed.code == 2 and len(typed.stderr.splitlines()) == 1 and typed.stderr.startswith("error: usage_error: ")
    assert json.loads(typed.stdout)["error"]["message"] == typed.stderr.split(": ", 2)[2].split(" (see `")[0]
    unknown = home.run("nosuch\x1b[31m", json_output=False)
    assert unknown.stderr.splitlines() == [
        "error: usage_error: No such command 'nosuch\\x1b[31m'. (see `memories --help`)"
    ]
    choice = home.run("vault", "policy", "notes")  # click writes the choices on lines of their own
    assert choice.stderr.splitlines()[0].startswith(
        "error: usage_error: Missing option '--device-only'. Choose from: on, off"
    )
    assert json.loads(choice.stdout)["error"]["message"] == "Missing option '--device-only'. Choose from: on, off"
    group = home.run("rag", json_output=False)  # a group alone: its help (what it holds), then the error line
    assert group.code == 2 and "Commands:" in group.stderr
    assert group.stderr.splitlines()[-1] == "error: usage_error: Missing command."


def test_every_group_takes_the_common_options(home: HomeDir) -> None:
    """``memories rag --json status ...`` works like ``memories rag status ... --json`` (it was "No such option")."""
    for group, command in (("rag", "status"), ("vault", "list"), ("memory", "list"), ("daemon", "status")):
        args = [group, "--json", "--home", str(home.path), command] + (["notes"] if group in ("rag", "memory") else [])
        run = home.run(*args, json_output=False)
        assert run.code == 1 and run.error_code == "daemon_not_running", run.stdout + run.stderr


def test_counts_are_singular_for_one(vault: HomeDir) -> None:
    vault.ok("memory", "add", "notes", "--title", "only", "--body", "one record")
    shown = vault.run("vault", "show", "notes", json_output=False)
    assert shown.stdout.splitlines()[-1].endswith(", 1 record"), shown.stdout
    vault.ok("rag", "search", "notes", "record")  # builds the cache: one chunk
    status = vault.run("rag", "status", "notes", json_output=False)
    assert "1 chunk," in status.stdout and "1 chunks" not in status.stdout, status.stdout
    deleted = vault.run("vault", "delete", "notes", "--yes", json_output=False)
    assert deleted.code == 0 and "with 1 record; 0 grants revoked" in deleted.stdout, deleted.stdout


def test_memory_update_with_nothing_to_change_is_refused(vault: HomeDir) -> None:
    ref = vault.ok("memory", "add", "notes", "--title", "t", "--body", "b")
    error = vault.fails("invalid_argument", "memory", "update", "notes", ref["id"])
    assert error["message"].startswith("nothing to change")
    assert vault.ok("memory", "read", "notes", ref["id"])["revision"] == 1  # no identical revision added
    assert vault.ok("memory", "update", "notes", ref["id"], "--title", "t2")["revision"] == 2


def test_inject_shows_config_paths_escaped(vault: HomeDir, tmp_path: Path) -> None:
    fake = tmp_path / "fake\x1b[31m\nhome"
    (fake / ".cursor").mkdir(parents=True)
    vault.env.update(HOME=str(fake))
    run = vault.run("inject", "cursor", "--vault", "notes", "--scope", "search", json_output=False)
    assert run.code == 0, run.stderr
    assert "\x1b" not in run.stdout and "fake\\x1b[31m\\x0ahome/.cursor/mcp.json" in run.stdout, run.stdout
