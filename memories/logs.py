"""Logging failures without content: logs are written to disk, and an exception's message or traceback may quote
note text (a library's message about its input). So a failure is logged by type only, unless the person
debugging sets ``MEMORIES_DEBUG=1``.
"""

from __future__ import annotations

import logging
import os


def log_failure(log: logging.Logger, what: str, exc: BaseException) -> None:
    """Log ``what`` failed with the exception's type (the full traceback only with ``MEMORIES_DEBUG=1``)."""
    if os.environ.get("MEMORIES_DEBUG"):
        log.error(what, exc_info=exc)
    else:
        log.error("%s: %s (set MEMORIES_DEBUG=1 for the traceback)", what, type(exc).__name__)
