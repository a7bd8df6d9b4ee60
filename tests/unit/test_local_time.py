"""Issue 21: times the CLI shows in text (`rag status`'s `built`, `memory read`, `vault show`, `grant list`,
`sync status`) carry their UTC offset, so a time copied elsewhere is still one moment."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from memories.cli.output import local_time
from tests.conftest import REPO


@pytest.fixture
def zone_plus_8(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "XYZ-8")  # POSIX: eight hours east of UTC, no time zone database needed
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_time_in_text_carries_its_offset(zone_plus_8: None) -> None:
    assert local_time(0) == "1970-01-01T08:00:00+08:00"
    assert local_time(1.6) == "1970-01-01T08:00:01+08:00"
    assert local_time(None) == "never"


def test_every_cli_time_is_shown_by_local_time() -> None:
    """No command formats a timestamp itself (each one did, without its offset)."""
    for path in sorted((REPO / "memories" / "cli").glob("*.py")):
        if path.name != "output.py":
            assert "fromtimestamp" not in path.read_text(encoding="utf-8"), path.name
