"""Logging failures without content: logs are written to disk, and an exception's message or traceback may quote
note text (a library's message about its input). So a failure is logged by type only, unless the person
debugging sets ``MEMORIES_DEBUG=1``. Libraries that log what they send are kept below the level that would write
it (:func:`configure_worker_logging`, :data:`PAYLOAD_LIBRARIES`). A message that names a user's folder (a watch's
reason to pause) is logged with the folder left out (:func:`without_folder`): folder names are plaintext about
the notes (issue 29, item 15).
"""

from __future__ import annotations

import logging
import os

QUIET_LIBRARIES = ("httpx", "httpcore")
"""Logged at WARNING and above only: httpx logs every request's URL at INFO ("HTTP Request: GET https://..."), and
a model download's URL after a redirect is signed (a credential for that file, in ``daemon.log``)."""


PAYLOAD_LIBRARIES = ("mcp", "sse_starlette", "starlette", "uvicorn", "anyio", "httpx", "httpcore")
"""Never logged below INFO, even with ``MEMORIES_DEBUG=1``: their DEBUG lines quote what they carry (sse_starlette
logs each event it streams, ``chunk: ...``, which is a tool result with note text; the MCP SDK logs dropped
frames and messages with ``%r``)."""


def debug_own_loggers_only() -> None:
    """With ``MEMORIES_DEBUG=1``: DEBUG for Memories' own loggers (``memories.*``), INFO at most for the root and
    :data:`PAYLOAD_LIBRARIES` (a library's DEBUG line may quote what it carries); nothing otherwise."""
    if not os.environ.get("MEMORIES_DEBUG"):
        return
    logging.getLogger("memories").setLevel(logging.DEBUG)
    root = logging.getLogger()
    if root.getEffectiveLevel() < logging.INFO:
        root.setLevel(logging.INFO)
    for library in PAYLOAD_LIBRARIES:
        logger = logging.getLogger(library)
        if logger.getEffectiveLevel() < logging.INFO:
            logger.setLevel(logging.INFO)


def without_folder(text: str, folder: str) -> str:
    """``text`` with ``folder`` (an absolute path) replaced by ``<folder>``, for a log line.

    >>> without_folder("the folder /home/a/Diary is gone", "/home/a/Diary")
    'the folder <folder> is gone'
    """
    return text.replace(folder, "<folder>") if folder else text


def configure_worker_logging(name: str) -> None:
    """A worker's logging: INFO and above to stderr (the daemon's log), each line naming the worker and its pid;
    :data:`QUIET_LIBRARIES` at WARNING."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name}[%(process)d] %(levelname)s %(message)s")
    for library in QUIET_LIBRARIES:
        logging.getLogger(library).setLevel(logging.WARNING)


def log_failure(log: logging.Logger, what: str, exc: BaseException) -> None:
    """Log ``what`` failed with the exception's type (the full traceback only with ``MEMORIES_DEBUG=1``)."""
    if os.environ.get("MEMORIES_DEBUG"):
        log.error("%s", what, exc_info=exc)
    else:
        log.error("%s: %s (set MEMORIES_DEBUG=1 for the traceback)", what, type(exc).__name__)
