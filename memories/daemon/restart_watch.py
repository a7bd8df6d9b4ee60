"""The files whose change needs a daemon restart (R-09, R-24), watched off the event loop.

A background task looks at ``config.toml`` and the model files in a thread at most once a second: it stats them,
and re-hashes the config only when its stat changed. Replies read what the task last found, so answering a request
never opens or stats a file on the event loop.
"""

from __future__ import annotations

import os
from pathlib import Path

import trio

from memories.config import config_digest
from memories.daemon.index.models import Fingerprint, Models

INTERVAL = 1.0
"""Seconds between two looks at the files."""

_Stamp = tuple[int, int, int, int] | None


def _stamp(path: str) -> _Stamp:
    """``(inode, size, mtime_ns, ctime_ns)`` of ``path``, or ``None`` when it cannot be stat-ed."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class FileWatch:
    """What the config file and the model files looked like at the last look.

    Args:
        config_path: the daemon's ``config.toml`` (it may not exist).
        models: the model, whose files are watched once loaded.

    Attributes:
        loaded_digest: SHA-256 hex of the config the daemon runs with (``"absent"`` without one), as
            :func:`~memories.config.config_digest` gives it; read when the daemon is built, before it serves.
        model_files: the model files at the last look (``None`` before the first).
    """

    def __init__(self, config_path: str, models: Models) -> None:
        self._config_path = config_path
        self._models = models
        self._config_stamp = _stamp(config_path)
        self.loaded_digest = config_digest(Path(config_path))
        self._digest = self.loaded_digest
        self.model_files: Fingerprint | None = None

    def config_changed(self) -> bool:
        """``config.toml`` differs from the one the daemon runs with (as last seen)."""
        return self._digest != self.loaded_digest

    async def look(self) -> None:
        """Look at the files once, in a thread."""
        await trio.to_thread.run_sync(self._look)

    def _look(self) -> None:
        stamp = _stamp(self._config_path)
        if stamp != self._config_stamp:
            self._config_stamp = stamp
            self._digest = config_digest(Path(self._config_path))
        self.model_files = self._models.fingerprint_now()

    async def run(self) -> None:
        """Look every :data:`INTERVAL` seconds, for ever."""
        while True:
            await self.look()
            await trio.sleep(INTERVAL)
