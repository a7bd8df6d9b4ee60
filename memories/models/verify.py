"""Whether a folder holds the files of a pinned manifest, byte for byte (R-23, R-24); nothing here changes a file.

Light to import (standard library, msgspec and the manifest): the supervisor calls :func:`verify_installed` for
``rag status`` without loading httpx, which only the installer (:mod:`memories.models.install`) needs.

SHA-256 results are cached in memory, per process, by the file's identity (path, size, mtime in ns, inode), at
most 256 of them, oldest dropped first; so after the first check a call costs a few ``stat`` calls. The installer
adds each file it has just written and checked (:func:`remember_hash`), so a later check in its process reads
nothing again.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

import msgspec

from memories.models.manifest import Manifest

_HASH_CACHE_ENTRIES = 256
_HASH_CHUNK_BYTES = 1024 * 1024
_FileIdentity = tuple[str, int, int, int]
"""``(path, size in bytes, mtime in ns, inode)``: a file whose identity is unchanged keeps its hash."""
_hash_cache: dict[_FileIdentity, str] = {}


class ModelStatus(msgspec.Struct, frozen=True):
    """The model files in ``directory``: ``installed`` = every manifest path exists; ``verified`` = installed
    and each is a regular file with the pinned size and SHA-256. ``missing`` and ``mismatched`` hold manifest
    paths."""

    directory: str
    installed: bool
    verified: bool
    missing: list[str]
    mismatched: list[str]


def verify_installed(
    manifest: Manifest, directory: Path, *, checkpoint: Callable[[], None] | None = None
) -> ModelStatus:
    """Check ``directory`` against ``manifest`` without changing anything (``rag status``, and the installer
    before it fetches anything).

    A file is mismatched when it is not a regular file (a link counts as mismatched: the installer keeps real
    files), has another size, or another SHA-256. Hashes are cached per file identity, so only new or changed
    files are read.

    Args:
        checkpoint: called before each file and after each 1 MiB read; it stops the check by raising (the
            installer passes its cancellation check, which raises ``cancelled``).

    Raises:
        OSError: a file exists but cannot be read (permissions).
    """
    directory = Path(directory).resolve()
    missing: list[str] = []
    mismatched: list[str] = []
    for file in manifest.files:
        if checkpoint is not None:
            checkpoint()
        path = directory / file.path
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            missing.append(file.path)
            continue
        except NotADirectoryError:
            mismatched.append(file.path)
            continue
        regular = stat.S_ISREG(info.st_mode) and info.st_size == file.size
        if not regular or _sha256(path, info, checkpoint) != file.sha256:
            mismatched.append(file.path)
    return ModelStatus(
        directory=str(directory),
        installed=not missing,
        verified=not missing and not mismatched,
        missing=missing,
        mismatched=mismatched,
    )


def remember_hash(path: Path, sha256: str) -> None:
    """Cache ``sha256`` (lowercase hex) for ``path`` as it is now: a file this process just wrote and checked.

    Raises:
        OSError: ``path`` cannot be ``stat``-ed.
    """
    info = os.stat(path)
    _store((str(path), info.st_size, info.st_mtime_ns, info.st_ino), sha256)


def _sha256(path: Path, info: os.stat_result, checkpoint: Callable[[], None] | None) -> str:
    key = (str(path), info.st_size, info.st_mtime_ns, info.st_ino)
    cached = _hash_cache.get(key)
    if cached is not None:
        return cached
    hasher = hashlib.sha256()
    with open(path, "rb") as reader:
        while chunk := reader.read(_HASH_CHUNK_BYTES):
            hasher.update(chunk)
            if checkpoint is not None:
                checkpoint()
    digest = hasher.hexdigest()
    _store(key, digest)
    return digest


def _store(key: _FileIdentity, digest: str) -> None:
    if len(_hash_cache) >= _HASH_CACHE_ENTRIES:
        del _hash_cache[next(iter(_hash_cache))]
    _hash_cache[key] = digest
