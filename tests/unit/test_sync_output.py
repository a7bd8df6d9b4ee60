"""What `sync pull` and `sync status` tell a person (issue 21 item 4): exit 3 when some payload files failed
authentication, and the last failure of the timed sync."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from memories import protocol as p
from memories.cli import cli
from memories.cli.output import Session


def _report(bad: list[p.SyncBadFile], timer_error: p.SyncTimerError | None = None) -> p.SyncReport:
    return p.SyncReport(
        vault="notes", folder="/sync", device="a" * 16, last_push=None, last_pull=1.0, imported=2, pushed=0,
        conflicts=[], bad=bad, skipped=[], not_local=0, waiting=0, timer_error=timer_error,
    )  # fmt: skip


@pytest.mark.parametrize("json_mode", [False, True])
def test_sync_pull_exits_3_when_some_files_failed_authentication(
    monkeypatch: pytest.MonkeyPatch, json_mode: bool
) -> None:
    flags = ["--json"] if json_mode else []
    for bad, code in (
        ([], 0),
        ([p.SyncBadFile(file="x.rev", reason="truncated", pending=True)], 0),  # may still be arriving
        ([p.SyncBadFile(file="x.rev", reason="tampered", pending=False)], 3),
        ([p.SyncBadFile(file="y.rev", reason="other_revision", pending=False)], 3),
    ):
        document = _report(bad)
        monkeypatch.setattr(Session, "call", lambda self, request, document=document, **_: (document, []))
        run = CliRunner().invoke(cli, ["sync", "pull", "notes", *flags])
        assert run.exit_code == code, (bad, run.output)


def test_sync_status_shows_the_last_failure_of_the_timed_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    failure = p.SyncTimerError(code="sync_folder_error", message="the sync folder /sync failed: I/O error", at=1.78e9)
    document = _report([], failure)
    monkeypatch.setattr(Session, "call", lambda self, request, **_: (document, []))
    run = CliRunner().invoke(cli, ["sync", "status", "notes"])
    assert run.exit_code == 0
    assert "timed sync failed 2026-05-2" in run.stdout  # 1.78e9 s is 28 May 2026
    assert ": sync_folder_error: the sync folder /sync failed: I/O error\n" in run.stdout
