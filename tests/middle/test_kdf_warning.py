"""Issue 21, item 7: a config that lowers Argon2id below its default says so when a passphrase is set with it."""

from __future__ import annotations

from pathlib import Path

from memories import protocol as p
from memories.config import CryptoConfig, weak_kdf_warning
from memories.daemon.core.context import RequestContext
from tests.fixtures.middle import Middle


async def test_init_and_sync_init_with_a_lowered_kdf_warn(middle: Middle, tmp_path: Path) -> None:
    """The middle's config lowers the KDF (as every test's does, to be fast)."""
    [warning] = middle.init_warnings
    assert "lowers Argon2id below its default" in warning and "kdf_memory_kib = 256" in warning
    assert middle.daemon.home.config_path in warning
    ctx = RequestContext()
    await middle.ok(p.SyncInit(vault="notes", folder=str(tmp_path / "sync"), passphrase="sync passphrase"), ctx)
    assert any("lowers Argon2id below its default" in note for note in ctx.warnings)


def test_the_default_kdf_and_a_stronger_one_do_not_warn() -> None:
    assert weak_kdf_warning(CryptoConfig(), "c.toml") is None
    assert weak_kdf_warning(CryptoConfig(kdf_memory_kib=256 * 1024, kdf_iterations=4, kdf_lanes=1), "c.toml") is None
    assert weak_kdf_warning(CryptoConfig(kdf_iterations=2), "c.toml") is not None
