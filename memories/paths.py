"""Where a home keeps its files, shared by the CLI and the daemon (cheap to import: no platformdirs until needed).

Home resolution: ``--home``, else ``MEMORIES_HOME``, else the platform's user data folder
(``platformdirs.user_data_path("memories")``). Config: ``--config``, else ``<home>/config.toml``.

Layout::

    <home>/memories.db         encrypted store (SQLite, WAL)
    <home>/config.toml         settings (optional)
    <home>/run/daemon.sock     client socket (owner-only folder); see socket_path for long homes
    <home>/run/daemon.lock     held by the running daemon (flock)
    <home>/logs/daemon.log     daemon and worker logs (ids and codes, never content)
    <home>/models/embeddinggemma   default model folder
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

HOME_ENV = "MEMORIES_HOME"

SOCKET_PATH_MAX = 107
"""Longest usable AF_UNIX path in bytes on Linux: ``sun_path`` is 108 bytes including the terminating NUL."""


@dataclass(frozen=True)
class Home:
    """A resolved home (absolute, symlinks resolved) and the config file the caller named."""

    root: Path
    config_path: Path

    @property
    def db_path(self) -> Path:
        return self.root / "memories.db"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def lock_path(self) -> Path:
        return self.run_dir / "daemon.lock"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    @property
    def log_path(self) -> Path:
        return self.log_dir / "daemon.log"

    @property
    def models_dir(self) -> Path:
        return self.root / "models"

    @property
    def socket_path(self) -> Path:
        """``<home>/run/daemon.sock``, or, when that exceeds :data:`SOCKET_PATH_MAX` bytes, a short path in an
        owner-only runtime folder named by a digest of the home (``$XDG_RUNTIME_DIR/memories`` or
        ``/tmp/memories-<uid>``), so long homes still work and two homes never share a socket."""
        preferred = self.run_dir / "daemon.sock"
        if len(os.fsencode(preferred)) <= SOCKET_PATH_MAX:
            return preferred
        digest = hashlib.sha256(os.fsencode(self.root)).hexdigest()[:24]
        return _runtime_dir() / f"{digest}.sock"


def _runtime_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and len(os.fsencode(base)) < 48 and os.path.isdir(base):
        return Path(base) / "memories"
    return Path(tempfile.gettempdir()) / f"memories-{os.getuid()}"


def resolve_home(home: str | None, config: str | None) -> Home:
    """Resolve the home and config path from options and the environment (nothing is created)."""
    if home is None:
        home = os.environ.get(HOME_ENV) or None
    if home is None:
        import platformdirs  # only when neither --home nor MEMORIES_HOME is given

        root = platformdirs.user_data_path("memories")
    else:
        root = Path(home).expanduser()
    root = Path(os.path.realpath(root))
    config_path = Path(os.path.realpath(Path(config).expanduser())) if config else root / "config.toml"
    return Home(root=root, config_path=config_path)


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) if missing, and make it owner-only (0700)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
