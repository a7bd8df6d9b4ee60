"""Reading a file the user names, safely: only a regular file, never more than a limit.

A path can name a FIFO (opening it blocks until a writer comes), a device such as ``/dev/zero`` (reading never
ends) or a socket, whatever its name says. :func:`read_regular_file` opens without blocking, checks the open
descriptor with ``fstat`` and reads at most ``limit + 1`` bytes, so neither a hang nor unbounded memory can
follow from a mistyped path or a swapped file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

UTF8_BOM = b"\xef\xbb\xbf"
"""The byte order mark Windows editors start UTF-8 files with: it marks the encoding and is not text, so a note
read from a file (``rag ingest``, ``memory add --file`` or standard input) starts after it, and so do its byte
offsets. A file may hold it beyond the body limit: limits count the text."""


class NotRegularFile(OSError):
    """The path names a device, a pipe, a socket or a folder."""


class FileTooLarge(OSError):
    """The file holds more than the limit."""


def read_regular_file(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes.

    Raises:
        NotRegularFile: not a regular file. FileTooLarge: over ``limit`` bytes. OSError: cannot be opened or read.
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise NotRegularFile(f"{path} is not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(f"{path} is larger than {limit:,} bytes")
    return data
