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


def test_the_index_limits_are_settings_validated_with_the_key_named(tmp_path: Path) -> None:
    """Issue 28, item 1: ``[rag] max_chunks`` (1,000 and up, default 100,000; 10,000 is R-21), the byte limits
    derived from it by R-21's ratios unless set."""
    path = tmp_path / "config.toml"
    limits = load_config(path).rag.index_limits()
    assert (limits.chunks, limits.text_bytes, limits.vector_bytes) == (100_000, 160 * 2**20, 320 * 2**20)
    path.write_text("[rag]\nmax_chunks = 10000\n")
    limits = load_config(path).rag.index_limits()
    assert (limits.chunks, limits.text_bytes, limits.vector_bytes) == (10_000, 16 * 2**20, 32 * 2**20)
    path.write_text("[rag]\nmax_chunks = 1000\nmax_text_bytes = 3000000\n")
    limits = load_config(path).rag.index_limits()
    assert (limits.chunks, limits.text_bytes, limits.vector_bytes) == (1_000, 3_000_000, 3_355_443)
    for key, bad in (
        ("max_chunks", "999"),
        ("max_chunks", "0"),
        ("max_chunks", '"many"'),
        ("max_chunks", "1e6"),
        ("max_text_bytes", "1000"),
        ("max_vector_bytes", "-1"),
    ):
        path.write_text(f"[rag]\n{key} = {bad}\n")
        with pytest.raises(MemoriesError) as caught:
            load_config(path)
        assert caught.value.code == "invalid_config" and f"rag.{key}" in caught.value.message
