"""``memories daemon run``: take the home's lock, load config and hooks, serve until stopped.

The lock (``flock`` on ``<home>/run/daemon.lock``) makes a second daemon for the same home fail with
``daemon_already_running`` instead of stealing the socket; since the running daemon holds it, any socket file
found at start is a leftover of a dead daemon and is replaced.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
from pathlib import Path

import msgspec
import trio

from memories.config import load_config, weak_kdf_warning
from memories.daemon.supervisor import Daemon
from memories.errors import MemoriesError
from memories.hardening import harden_process
from memories.paths import Home, ensure_private_dir, repair_model_folders
from memories.testing import HOOKS_ENV, load_hooks

log = logging.getLogger("memories.daemon")


def run_daemon(home: Home) -> None:
    """Serve ``home`` in the foreground; logs go to stderr (``daemon start`` points it at the log file).

    Raises:
        MemoriesError: ``daemon_already_running``, ``invalid_config``.
    """
    harden_process()  # first: no thread, child or secret exists yet (memories.hardening)
    for folder in (home.root, home.run_dir, home.log_dir):
        ensure_private_dir(folder)
    lock_fd = os.open(home.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise MemoriesError("daemon_already_running", f"a daemon already serves {home.root}") from None
    os.ftruncate(lock_fd, 0)
    os.write(lock_fd, f"{os.getpid()}\n".encode())  # so `daemon stop` can find a daemon that stopped answering
    os.chdir(home.root)  # never keep the folder it was started from busy, nor resolve anything against it
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s daemon[%(process)d] %(name)s %(levelname)s %(message)s",
    )
    config = load_config(Path(home.config_path))
    weak = weak_kdf_warning(config.crypto, home.config_path)
    if weak:
        log.warning("%s", weak)
    repaired = repair_model_folders(home, config.rag.local_model_dir)
    if repaired:
        log.info("gave the owner's permissions back to %d model folder(s) under %s", len(repaired), home.models_dir)
    try:
        hooks = load_hooks()
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MemoriesError("invalid_argument", f"{HOOKS_ENV} is malformed: {exc}") from None
    if hooks is not None:
        log.warning("test hooks are active (%s is set)", HOOKS_ENV)
    daemon = Daemon(home, config, hooks, sys.stderr)
    try:
        trio.run(daemon.serve)
    except ExceptionGroup as group:
        raise _sole_error(group) from None
    finally:
        os.close(lock_fd)


def _sole_error(group: ExceptionGroup) -> Exception:
    """The one :class:`MemoriesError` a nursery wrapped (a start-up failure such as an occupied socket path), so
    it reaches the user as ``error: CODE: message``; any other group as it is."""
    leaves: list[BaseException] = []

    def collect(error: BaseException) -> None:
        if isinstance(error, BaseExceptionGroup):
            for inner in error.exceptions:
                collect(inner)
        else:
            leaves.append(error)

    collect(group)
    if len(leaves) == 1 and isinstance(leaves[0], MemoriesError):
        return leaves[0]
    return group
