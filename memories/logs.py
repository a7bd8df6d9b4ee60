"""Logging failures without content: logs are written to disk, and an exception's message or traceback may quote
note text (a library's message about its input). So a failure is logged by type only, unless the person
debugging sets ``MEMORIES_DEBUG=1``. Libraries that log what they send are kept below the level that would write
it (:func:`configure_worker_logging`).
"""

from __future__ import annotations

import logging
import os

QUIET_LIBRARIES = ("httpx", "httpcore")
"""Logged at WARNING and above only: httpx logs every request's URL at INFO ("HTTP Request: GET https://..."), and
a model download's URL after a redirect is signed (a credential for that file, in ``daemon.log``)."""


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
