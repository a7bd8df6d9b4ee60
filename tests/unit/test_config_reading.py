"""Reading ``config.toml`` as editors write it."""

from __future__ import annotations

from pathlib import Path

import pytest

from memories.config import load_config
from memories.errors import MemoriesError


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"\xef\xbb\xbf[daemon]\nauto_lock_minutes = 5\n")
    assert load_config(path).daemon.auto_lock_minutes == 5


def test_the_sync_interval_is_off_by_default_and_bounded(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    assert load_config(path).sync.interval_seconds is None
    path.write_text("[sync]\ninterval_seconds = 60\n")
    assert load_config(path).sync.interval_seconds == 60
    for bad in ("1", "0", "-5", '"often"'):
        path.write_text(f"[sync]\ninterval_seconds = {bad}\n")
        with pytest.raises(MemoriesError) as caught:
            load_config(path)
        assert caught.value.code == "invalid_config" and "sync.interval_seconds" in caught.value.message
