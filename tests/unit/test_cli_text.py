"""Text the CLI prints for a reply, without a daemon: ``Session.call`` answers with a document as the daemon would,
decoded into the type its request declares (issue 21's smaller things a new user hit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner

from memories import protocol as p
from memories.cli import cli
from memories.cli.output import Session


def _text(monkeypatch: pytest.MonkeyPatch, document: dict[str, Any], *args: str) -> str:
    def call(self: Session, request: Any, **options: Any) -> tuple[Any, list[str]]:
        return msgspec.convert(document, request.reply_type()), []

    monkeypatch.setattr(Session, "call", call)
    done = CliRunner().invoke(cli, ["--home", "/nonexistent", *args], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return done.output


VAULT = {"id": "4f0c9e2a7d1b3c55", "name": "notes", "device_only": False, "created": 0, "records": 3}


def test_vault_create_of_a_vault_that_is_not_device_only_says_nothing_of_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It printed ``(may use configured models)`` to someone who had configured none."""
    assert _text(monkeypatch, VAULT, "vault", "create", "notes") == "4f0c9e2a7d1b3c55  notes\n"
    device_only = {**VAULT, "device_only": True}
    assert _text(monkeypatch, device_only, "vault", "create", "notes") == "4f0c9e2a7d1b3c55  notes  (device-only)\n"
    assert _text(monkeypatch, VAULT, "vault", "policy", "notes", "--device-only", "off").endswith("device-only: off\n")
    assert _text(monkeypatch, VAULT, "vault", "show", "notes").startswith("4f0c9e2a7d1b3c55  notes\ncreated ")


def test_rag_watch_list_lists_whatever_folders_the_current_one_holds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In ``~`` with a vault ``notes`` and a folder ``~/notes`` (the README's naming), ``rag watch list notes`` was
    read as "watch ./notes into a vault named list"."""
    (tmp_path / "notes").mkdir()
    sent: list[Any] = []

    def call(self: Session, request: Any, **options: Any) -> tuple[Any, list[str]]:
        sent.append(request)
        return msgspec.convert({"locked": False, "count": 0, "watches": []}, request.reply_type()), []

    monkeypatch.setattr(Session, "call", call)
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(cli, ["--home", "/nonexistent", "rag", "watch", "list", "notes"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert sent == [p.RagWatchList(vault="notes")]


def _exit_status(monkeypatch: pytest.MonkeyPatch, document: dict[str, Any], *args: str) -> int:
    def call(self: Session, request: Any, **options: Any) -> tuple[Any, list[str]]:
        return msgspec.convert(document, request.reply_type()), []

    monkeypatch.setattr(Session, "call", call)
    return CliRunner().invoke(cli, ["--home", "/nonexistent", *args], catch_exceptions=False).exit_code


def _results(*statuses: str) -> list[dict[str, Any]]:
    return [{"path": f"/n/{number}.md", "source": f"{number}.md", "status": s} for number, s in enumerate(statuses)]


WATCH = {
    "vault": "4f0c9e2a7d1b3c55", "vault_name": "notes", "folder": "/n", "recursive": False, "exclude": [],
    "on_delete": "delete", "state": "watching", "cards": 1, "missing": 0, "refused": 1, "last_change": None,
    "last_scan": None,
}  # fmt: skip
OVER = {"code": "vault_too_large", "message": "vault 'notes' would hold 10,027 chunks", "details": {}}


@pytest.mark.parametrize(
    ("statuses", "over", "ingest", "watch"),
    [
        (["added", "unchanged"], None, 0, 0),
        (["added", "refused"], None, 3, 3),
        (["skipped", "refused"], None, 1, 3),  # a watch is registered all the same
        (["refused"], None, 1, 1),
        (["added"], OVER, 3, 3),
    ],
)
def test_an_imports_exit_status_says_whether_everything_nothing_or_some_went_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, statuses: list[str], over: Any, ingest: int, watch: int
) -> None:
    report = {"results": _results(*statuses), "over_limit": over}
    assert _exit_status(monkeypatch, report, "rag", "ingest", "notes", str(tmp_path)) == ingest
    watched = {**report, "watch": WATCH}
    assert _exit_status(monkeypatch, watched, "rag", "watch", "notes", str(tmp_path)) == watch


STATUS = {
    "vault": "notes",
    "locked": False,
    "records": 3,
    "chunks": 5,
    "cache": "cold",
    "text_bytes": 120,
    "limits": {"max_chunks": 10000},
    "last_build": None,
    "model": {"installed": True, "verified": False, "space_key": None, "path": "/m"},
    "embedded": 4,
    "missing": None,
    "vector_bytes": 12288,
}


def test_rag_status_says_when_model_files_match_no_pinned_hash_and_when_counts_are_not_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 29, item 8: a model whose files match no pinned hash read as plainly "installed", and a cold cache
    (``auto_index = "off"``) printed ``? distinct inputs ... ? missing``."""
    text = _text(monkeypatch, STATUS, "rag", "status", "notes")
    assert "?" not in text and "4 embedded" in text and "known once the cache is built" in text
    assert "installed at /m, but its files match no pinned SHA-256 hash" in text
    verified = {**STATUS, "missing": 1, "model": {**STATUS["model"], "verified": True}}
    text = _text(monkeypatch, verified, "rag", "status", "notes")
    assert "5 distinct inputs to embed (identical chunks share one): 4 embedded, 1 missing" in text
    assert "verified at /m (its files match the pinned SHA-256 hashes)" in text


def test_rag_status_does_not_say_0_embedded_while_the_kept_vectors_are_not_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 29, item 8: right after a restart with kept vectors, ``rag status`` said ``0 embedded``."""
    text = _text(monkeypatch, {**STATUS, "embedded": None}, "rag", "status", "notes")
    assert "embedded" not in text and "counted once loaded" in text and "kept sealed in the home" in text


def test_rag_status_and_daemon_status_say_whether_the_model_is_loaded(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28, item 3: the model loads in the background after an unlock; both statuses say whether it has."""
    for loaded, line in ((True, "loaded     yes, in the embedding worker"), (False, "loaded     not yet")):
        document = {**STATUS, "model": {**STATUS["model"], "loaded": loaded}}
        assert line in _text(monkeypatch, document, "rag", "status", "notes")
    assert "loaded  " not in _text(monkeypatch, STATUS, "rag", "status", "notes")  # a daemon of an older release
    from memories.cli import render

    status = p.DaemonStatus(
        pid=1,
        uptime=2.0,
        home="/h",
        config="/h/config.toml",
        config_digest="0" * 64,
        restart_needed=False,
        initialized=True,
        locked=False,
        workers=[],
        queued_jobs=0,
        running_jobs=0,
        dropped_replies=0,
        dropped_results=0,
        test_hooks=False,
    )
    for loaded, line in ((True, "model     loaded in the embedding worker"), (False, "model     not loaded")):
        render.daemon_status(msgspec.structs.replace(status, model_loaded=loaded))
        assert line in capsys.readouterr().out
    render.daemon_status(status)  # a remote embedding service: no line
    assert "model " not in capsys.readouterr().out


def test_rag_status_of_a_vault_over_its_limits_names_the_setting_to_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28, item 1: the figures the vault has and the setting to raise, one line."""
    details = {"limit": "chunks", "max": 10_000, "value": 14_592, "chunks": 14_592, "text_bytes": 20_000_000}
    over = {**OVER, "details": {**details, "setting": "rag.max_chunks"}}
    text = _text(monkeypatch, {**STATUS, "over_limit": over}, "rag", "status", "notes")
    assert (
        "over       14,592 chunks, 20,000,000 bytes of text: over chunks 10,000; searches fail until records are "
        "removed or rag.max_chunks is raised"
    ) in text


def test_rag_status_says_a_crash_ended_the_background_job_and_what_follows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29, item 4: the background job a worker crash ended, and its retry (or that it is not retried)."""
    error = {"code": "worker_crashed", "message": "the embedding worker was killed by signal 9"}
    crashed = {"job_id": 3, "error": error, "attempt": 1, "retry_job": 4, "attempts": 5}
    text = _text(monkeypatch, {**STATUS, "background_failure": crashed}, "rag", "status", "notes")
    assert (
        "failed     background job 3: the embedding worker was killed by signal 9; job 4 retries it (attempt 1 of 5)"
        in text
    )
    gave_up = {**crashed, "attempt": 5, "retry_job": None}
    text = _text(monkeypatch, {**STATUS, "background_failure": gave_up}, "rag", "status", "notes")
    assert "not retried after 5 attempts: run memories rag index notes --background" in text
