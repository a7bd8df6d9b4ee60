"""Reading ``config.toml`` as editors write it."""

from __future__ import annotations

from pathlib import Path

from memories.config import load_config


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"\xef\xbb\xbf[daemon]\nauto_lock_minutes = 5\n")
    assert load_config(path).daemon.auto_lock_minutes == 5
