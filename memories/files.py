"""Reading a file the user names, safely: only a regular file, never more than a limit.

A path can name a FIFO (opening it blocks until a writer comes), a device such as ``/dev/zero`` (reading never
ends) or a socket, whatever its name says. :func:`read_regular_file` opens without blocking, checks the open
descriptor with ``fstat`` and reads at most ``limit + 1`` bytes, so neither a hang nor unbounded memory can
follow from a mistyped path or a swapped file.

A note found in a folder is read with :func:`read_inside`: from the folder's own descriptor (checked to be the
folder that was listed), one path component at a time, never following a symbolic link (``O_NOFOLLOW`` on every
component). Whoever can write into an ingested or watched folder can swap a note for a link to ``~/.ssh/id_rsa``
between the walk that listed it and the read; the read then refuses the link instead of importing the secret.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

UTF8_BOM = b"\xef\xbb\xbf"
"""The byte order mark Windows editors start UTF-8 files with: it marks the encoding and is not text, so a note
read from a file (``rag ingest``, ``memory add --file`` or standard input) starts after it, and so do its byte
offsets. A file may hold it beyond the body limit: limits count the text."""


class NotRegularFile(OSError):
    """The path names a device, a pipe, a socket or a folder."""


class FileTooLarge(OSError):
    """The file holds more than the limit."""


class SwappedFile(OSError):
    """Since the folder was listed, the file or a folder on its way became a symbolic link, or the folder itself
    was replaced by another one (another device or inode)."""


def read_regular_file(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes.

    Raises:
        NotRegularFile: not a regular file. FileTooLarge: over ``limit`` bytes. OSError: cannot be opened or read.
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    return _read_descriptor(descriptor, str(path), limit)[0]


_NO_LINK = os.O_NOFOLLOW | os.O_CLOEXEC


def read_inside(folder: str, identity: tuple[int, int], parts: Sequence[str], limit: int) -> tuple[bytes, float]:
    """The bytes of the regular file ``folder/parts[0]/…/parts[-1]`` of at most ``limit`` bytes, and its
    modification time (Unix seconds, of the file read), reached without following any symbolic link.

    ``folder`` (an absolute path, resolved when it was listed) is opened and must still be the folder of
    ``identity`` (``(st_dev, st_ino)`` as the walk saw it); each of ``parts`` is then opened relative to the one
    before with ``O_NOFOLLOW`` (the subfolders with ``O_DIRECTORY``, the file with ``O_NONBLOCK`` so a FIFO put in
    its place cannot block), and the file's descriptor must be a regular file. So what is read lies inside the
    folder whatever was renamed, replaced or linked in the meantime (a note saved again by an editor, as a new file
    renamed over the old one, is read as it is now; a hard link is the same file and is read).

    Raises:
        SwappedFile: the folder is another one, or a component is now a symbolic link. NotRegularFile: not a
            regular file. FileTooLarge: over ``limit`` bytes. OSError: cannot be opened or read (gone, say).
    """
    shown = os.path.join(folder, *parts)
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        found = os.fstat(descriptor)
        if (found.st_dev, found.st_ino) != identity:
            raise SwappedFile(f"{folder} was replaced by another folder since it was listed")
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            flags = os.O_RDONLY | _NO_LINK | (os.O_NONBLOCK | os.O_NOCTTY if last else os.O_DIRECTORY)
            try:
                inner = os.open(part, flags, dir_fd=descriptor)
            except OSError as exc:
                if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(part, descriptor)):
                    raise SwappedFile(f"{shown}: a symbolic link took its place since it was listed") from None
                raise
            os.close(descriptor)
            descriptor = inner
    except BaseException:
        os.close(descriptor)
        raise
    return _read_descriptor(descriptor, shown, limit)


def _is_link(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=folder).st_mode)
    except OSError:
        return False


def _read_descriptor(descriptor: int, shown: str, limit: int) -> tuple[bytes, float]:
    """Read at most ``limit`` bytes of the open ``descriptor`` (closed after) if it is a regular file, with its
    modification time; raises :class:`NotRegularFile`, :class:`FileTooLarge`, ``OSError``."""
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(f"{shown} is not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(f"{shown} is larger than {limit:,} bytes")
    return data, info.st_mtime
