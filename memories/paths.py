"""Where a home keeps its files, shared by the CLI and the daemon.

Cheap to import on the CLI's start-up path: ``os.path`` strings, no pathlib, platformdirs only when neither
``--home`` nor ``MEMORIES_HOME`` is given. Home resolution: ``--home``, else ``MEMORIES_HOME``, else the platform's
user data folder (``platformdirs.user_data_path("memories")``). Config: ``--config``, else ``<home>/config.toml``.

Layout::

    <home>/memories.db         encrypted store (SQLite, WAL)
    <home>/config.toml         settings (optional)
    <home>/run/daemon.sock     client socket (owner-only folder); see Home.socket_path for long homes
    <home>/run/daemon.lock     held by the running daemon (flock)
    <home>/logs/daemon.log     daemon and worker logs (ids and codes, never content)
    <home>/models/embeddinggemma   default model folder
"""

from __future__ import annotations

import errno
import os
import stat

from memories.errors import MemoriesError

HOME_ENV = "MEMORIES_HOME"

SOCKET_PATH_MAX = 107
"""Longest usable AF_UNIX path in bytes on Linux: ``sun_path`` is 108 bytes including the terminating NUL."""


CONFIG_NAME = "config.toml"
"""The config file's name in the home, read when no ``--config`` is given (optional)."""


class Home:
    """A resolved home (absolute, symlinks resolved) and the config file the caller named; paths are ``str``."""

    __slots__ = ("config_path", "root")

    def __init__(self, root: str, config_path: str) -> None:
        self.root = root
        self.config_path = config_path

    def __repr__(self) -> str:
        return f"Home({self.root!r}, {self.config_path!r})"

    @property
    def default_config_path(self) -> str:
        """``<home>/config.toml``, the config when none is named (optional)."""
        return os.path.join(self.root, CONFIG_NAME)

    @property
    def db_path(self) -> str:
        return os.path.join(self.root, "memories.db")

    @property
    def run_dir(self) -> str:
        return os.path.join(self.root, "run")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.run_dir, "daemon.lock")

    @property
    def log_dir(self) -> str:
        return os.path.join(self.root, "logs")

    @property
    def log_path(self) -> str:
        return os.path.join(self.log_dir, "daemon.log")

    @property
    def models_dir(self) -> str:
        return os.path.join(self.root, "models")

    @property
    def default_model_dir(self) -> str:
        """Where ``rag model-install`` puts the model when ``[rag] local_model_dir`` is not set."""
        return os.path.join(self.models_dir, "embeddinggemma")

    @property
    def socket_path(self) -> str:
        """``<home>/run/daemon.sock``, or, when that exceeds :data:`SOCKET_PATH_MAX` bytes, a short path in an
        owner-only runtime folder named by a digest of the home (``$XDG_RUNTIME_DIR/memories`` or
        ``/tmp/memories-<uid>``), so long homes still work and two homes never share a socket."""
        preferred = os.path.join(self.run_dir, "daemon.sock")
        if len(os.fsencode(preferred)) <= SOCKET_PATH_MAX:
            return preferred
        import hashlib

        digest = hashlib.sha256(os.fsencode(self.root)).hexdigest()[:24]
        return os.path.join(_runtime_dir(), f"{digest}.sock")


def _runtime_dir() -> str:
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and len(os.fsencode(base)) < 48 and os.path.isdir(base):
        return os.path.join(base, "memories")
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"memories-{os.getuid()}")


def resolve_home(home: str | None, config: str | None) -> Home:
    """Resolve the home and config path from options and the environment (nothing is created).

    The default ``<home>/config.toml`` is optional; a ``config`` the caller names must exist, so a mistyped
    ``--config`` is not silently the defaults.

    Raises:
        MemoriesError: ``invalid_config`` when ``config`` names nothing.
    """
    if home is None:
        home = os.environ.get(HOME_ENV) or None
    if home is None:
        import platformdirs  # only when neither --home nor MEMORIES_HOME is given

        home = str(platformdirs.user_data_path("memories"))
    root = os.path.realpath(os.path.expanduser(home))
    if not config:
        return Home(root, os.path.join(root, CONFIG_NAME))
    config_path = os.path.realpath(os.path.expanduser(config))
    if not os.path.lexists(config_path):
        raise MemoriesError("invalid_config", f"--config names {config}, which does not exist")
    return Home(root, config_path)


def storage_error(errno_value: int | None, folder: str) -> MemoriesError | None:
    """The error a write under ``folder`` (the home, usually) met, when it is about the disk rather than a bug:
    ``disk_full`` for ``ENOSPC`` and ``EDQUOT`` (the disk or the user's quota is full), ``home_read_only`` for
    ``EROFS``; ``None`` for any other ``errno``. Both name the folder, so the person knows which disk to look at
    (the daemon's own log may be on that same disk, and then holds nothing)."""
    if errno_value in (errno.ENOSPC, errno.EDQUOT):
        return MemoriesError(
            "disk_full",
            f"the disk that holds {folder} is full; nothing more was written: free some space there and run the "
            "command again",
            {"folder": folder},
        )
    if errno_value == errno.EROFS:
        return MemoriesError(
            "home_read_only",
            f"{folder} is on a read-only file system; Memories needs to write its database, socket and log there "
            "(remount it read-write, or use another --home)",
            {"folder": folder},
        )
    return None


def ensure_private_dir(path: str) -> None:
    """Create ``path`` (and parents) if missing, and make it owner-only (0700). The folder itself must be ours and
    not a symbolic link (the socket folder may sit in a shared place such as ``/tmp``).

    Raises:
        MemoriesError: ``invalid_argument`` when ``path`` exists but is not a folder, is a link or another user's,
            or cannot be created; ``home_read_only`` on a read-only file system, ``disk_full`` on a full one.
    """
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid():
            raise MemoriesError("invalid_argument", f"{path} is a link or belongs to another user; refusing to use it")
        os.chmod(path, 0o700)
    except FileExistsError:
        raise MemoriesError("invalid_argument", f"{path} exists and is not a folder") from None
    except NotADirectoryError:  # a folder above it is a file: name that one, the path itself does not exist
        blocker = os.path.abspath(path)
        while not os.path.lexists(blocker):
            blocker = os.path.dirname(blocker)
        raise MemoriesError("invalid_argument", f"cannot create {path}: {blocker} is not a folder") from None
    except OSError as exc:
        refused = storage_error(exc.errno, path)
        if refused is not None:  # an existing folder on a read-only disk is not one that "cannot be created"
            raise refused from None
        raise MemoriesError("invalid_argument", f"cannot create {path}: {exc.strerror}") from None


def ensure_socket_folder(home: Home) -> None:
    """Make the folder of ``home``'s socket ready: ``<home>/run`` by :func:`ensure_private_dir`, or the short socket
    folder in a shared place (:attr:`Home.socket_path`) by :func:`ensure_runtime_dir`."""
    folder = os.path.dirname(home.socket_path)
    if folder == home.run_dir:
        ensure_private_dir(folder)
    else:
        ensure_runtime_dir(folder)


def ensure_runtime_dir(path: str) -> None:
    """Create ``path`` (a folder in ``$XDG_RUNTIME_DIR`` or ``/tmp``) with mode 0700, or accept an existing one only
    when it is a real folder (no link) of this user with mode 0700 exactly. Any account can create
    ``/tmp/memories-<uid>`` first: a daemon that used it would put its socket where that account can replace it, and
    ``chmod`` cannot take such a folder back (issue 29, item 15).

    Raises:
        MemoriesError: ``socket_folder_unsafe`` naming the owner and mode found; ``disk_full``,
            ``home_read_only`` or ``invalid_argument`` when it cannot be created.
    """
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # ours, just made: the umask may have taken bits away
        return
    except FileExistsError:
        pass
    except OSError as exc:
        refused = storage_error(exc.errno, path)
        if refused is not None:
            raise refused from None
        raise MemoriesError("invalid_argument", f"cannot create {path}: {exc.strerror}") from None
    info = os.lstat(path)
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and mode == 0o700:
        return
    kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "a folder" if stat.S_ISDIR(info.st_mode) else "a file"
    raise MemoriesError(
        "socket_folder_unsafe",
        f"{path} is {kind} of uid {info.st_uid} with mode {mode:04o}, not this user's (uid {os.getuid()}) own folder "
        "with mode 0700, so the daemon's socket may not go there; remove it (another account may have made it) or "
        "use a shorter --home",
        {"folder": path, "uid": info.st_uid, "mode": f"{mode:04o}"},
    )


def make_folders(path: str, mode: int = 0o700) -> None:
    """Create ``path`` and any missing parents, each with exactly ``mode`` (set again after ``mkdir``, so no
    umask can take the owner's search bit away). Existing folders are left as they are.

    Raises:
        OSError: a component exists and is not a folder, or cannot be created.
    """
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for folder in reversed(missing):
        os.mkdir(folder, mode)
        os.chmod(folder, mode)


def repair_model_folders(home: Home, user_model_dir: str | None) -> list[str]:
    """Give the owner's read, write and search bits back to the folders Memories makes for the model:
    ``<home>/models`` and ``<home>/models/embeddinggemma`` with every folder below it. Releases that set the umask
    around the socket's ``bind`` could create them 0600, and no later install could enter them. A folder that is
    (or lies inside) the user's ``[rag] local_model_dir``, a symbolic link, or another user's is never touched.

    Returns the folders repaired.
    """
    repaired: list[str] = []
    user_dir = os.path.realpath(user_model_dir) if user_model_dir else None

    def visit(folder: str, descend: bool) -> None:
        if user_dir is not None and (folder == user_dir or folder.startswith(user_dir + os.sep)):
            return
        try:
            info = os.lstat(folder)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                return
            if info.st_mode & stat.S_IRWXU != stat.S_IRWXU:
                os.chmod(folder, stat.S_IMODE(info.st_mode) | stat.S_IRWXU)
                repaired.append(folder)
            if descend:
                with os.scandir(folder) as entries:
                    children = [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
                for child in children:
                    visit(child, descend=True)
        except OSError:
            return  # gone meanwhile, or not ours to change: the install reports what it cannot use

    visit(home.models_dir, descend=False)
    visit(home.default_model_dir, descend=True)
    return repaired
