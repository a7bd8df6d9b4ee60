"""What the daemon and every worker set first, before they hold a key or a note: no core dumps, one umask.

- **No core dumps.** A core file is a copy of the process's memory written to disk: the supervisor's holds the
  vault keys, a worker's holds note text. :func:`harden_process` sets ``RLIMIT_CORE`` to 0 (soft and hard) and,
  on Linux, marks the process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``), which also keeps other processes of
  the same user from attaching a debugger or reading its memory through ``/proc``. The flag is reset by
  ``execve``, so every worker sets it again itself (:func:`workers.loop.run_worker`).
- **One umask, set once.** The umask is process-wide, threads included, so changing it around one call races
  with every thread and child started meanwhile. The daemon sets ``0o077`` before it starts any thread or child
  and never changes it; workers inherit it. Files and folders are still created with explicit modes.

Not covered (see docs/security.md, "No core dumps"): a ``kernel.core_pattern`` that pipes cores to a crash collector
(``|/usr/lib/systemd/systemd-coredump ...``) ignores ``RLIMIT_CORE`` (the non-dumpable flag still applies);
with ``fs.suid_dumpable = 2`` the kernel dumps non-dumpable processes too, readable by root only; and memory
the kernel swaps out reaches the swap device unless swap is encrypted.
"""

from __future__ import annotations

import os
import resource
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes

UMASK = 0o077
"""Owner-only: new files and folders get no group or other permission bits."""

_PR_SET_DUMPABLE = 4  # <linux/prctl.h>
_PR_GET_DUMPABLE = 3


def harden_process() -> None:
    """Turn core dumps off and set :data:`UMASK`; call first, before any thread, child or secret exists.

    Raises:
        OSError: the kernel refused ``setrlimit`` or ``prctl`` (never expected for an unprivileged lowering).
    """
    os.umask(UMASK)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sys.platform.startswith("linux"):
        libc = _libc()
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            errno = _errno()
            raise OSError(errno, f"prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(errno)}")


def dumpable() -> bool | None:
    """Whether this process may dump core: ``prctl(PR_GET_DUMPABLE)`` on Linux, elsewhere whether
    ``RLIMIT_CORE`` allows a core file; ``None`` when it cannot be told."""
    if sys.platform.startswith("linux"):
        value = _libc().prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)
        return None if value < 0 else value != 0
    return resource.getrlimit(resource.RLIMIT_CORE)[0] != 0


def _libc() -> ctypes.CDLL:
    import ctypes  # only in the daemon and workers, never on the CLI's start-up path

    return ctypes.CDLL(None, use_errno=True)


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()
